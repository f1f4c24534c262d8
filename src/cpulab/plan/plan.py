"""The plan: which workloads, under which variants, with which parameters, how often.

A plan is a TOML file (see plans/*.toml) or is made from command-line flags.  Loading
validates everything up front and raises PlanError with one line naming the file and
the field, so a typo never costs a half-finished run.
"""
from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pydantic import ValidationError

from cpulab import paths, workloads
from cpulab.spec.record import RunRecord
from cpulab.spec.schedule import Schedule
from cpulab.spec.settings import DEFAULTS, Settings
from cpulab.plan import kernels, model, toolchain
from cpulab.plan.checks import PlanError, canonical_params, check, validate  # noqa: F401 (plans.validate)
from cpulab.plan.model import ExperimentTable
from cpulab.plan.programs import CommandError, Program, parse_programs
from cpulab.plan.toolchain import Variant
from cpulab.machine import toolchains

PLAN_DIR = Path(__file__).resolve().parents[1] / "plans"
DEFAULT_PLAN = "seeds"
MAX_PLAN_BYTES = 64 << 20  # a plan is a page of TOML; a larger file (or /dev/zero) is not read whole


@dataclass
class Experiment:
    name: str
    workloads: list[str]
    variants: list[str]
    baseline: str
    title: str = ""
    intro: str = ""  # what the experiment asks, for the report
    tag: str = ""  # where it comes from, e.g. the seed it redoes ("seed000")
    # workload -> parameter -> values: as written (a string such as '1K,4K' or '16..1024', a
    # number, or a list) until validate() replaces them with canonical strings.
    params: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    processes: int | None = None  # processes per result here, if not the plan's
    samples: int | None = None  # samples per process here, if not the plan's
    budget: float | None = None  # seconds for rounds beyond the first look here, if not the plan's
    # Its kernels are bound by their own core (registers, L1/L2-sized data, or emulated):
    # it may be measured on one CPU while another such experiment runs on the other
    # (runner._measure).  Otherwise it has the machine to itself.
    share_machine: bool = False
    # Count each result's instructions per unit under valgrind after its rounds
    # (measure/instructions.py), as the plan's `instructions` does for every experiment.
    instructions: bool = False


@dataclass
class Plan:
    name: str
    experiments: list[Experiment]
    # How it measures and decides: every run setting, declared in spec/settings.py.
    settings: Settings = DEFAULTS
    # Probes run after the workloads, by name (measure.probes.registry(), checked there), e.g. seed004-table2.
    probe_tables: list[str] = field(default_factory=list)
    custom_variants: dict[str, Variant] = field(default_factory=dict)
    programs: dict[str, Program] = field(default_factory=dict)  # the [program.NAME] tables
    # The [kernel.NAME] tables (plan/kernels.py), paths absolute: workloads of the user's own.
    kernels: dict[str, dict] = field(default_factory=dict)

    def experiment(self, name: str) -> Experiment:
        return next(e for e in self.experiments if e.name == name)

    def processes_of(self, experiment: str) -> int:
        e = self.experiment(experiment)
        return e.processes or self.settings.processes or self.settings.policy.first_look(self.comparisons_of(e))

    def points_of(self, e: Experiment) -> int:
        """The parameter points of an experiment's workloads and programs."""
        return sum(len(self.programs[w].grid(e.params.get(w)) if w in self.programs
                       else workloads.get(w).grid(self.settings.grid, e.params.get(w))) for w in e.workloads)

    def comparisons_of(self, e: Experiment) -> int:
        """How many comparisons the experiment's one Holm family holds: every variant but
        the baseline at every point of every workload."""
        return (len(e.variants) - 1) * self.points_of(e)

    def schedule(self) -> Schedule:
        """The run's one schedule and policy, for every round and look."""
        s = self.settings
        return Schedule({e.name: self.processes_of(e.name) for e in self.experiments},
                        {e.name: self.budget_of(e.name) for e in self.experiments}, s.policy,
                        {e.name: e.baseline for e in self.experiments}, s.against)

    def given(self, **settings) -> "Plan":
        """This plan with some settings replaced (validated)."""
        return dataclasses.replace(self, settings=self.settings.given(**settings))

    def record(self, kind: str = "plan", **more) -> RunRecord:
        """What a run of this plan was asked, as it is stored (a cluster run's: with `more`),
        each experiment with the rounds of its first look (what places a comparison among
        its looks: DecisionPolicy.level)."""
        d = self.as_dict()
        d["experiments"] = [{**e, "first_look": self.processes_of(e["name"])} for e in d["experiments"]]
        return RunRecord.make(kind, {**d, "turn_pairs": self.settings.policy.pairs, **more}, self.settings)

    def counts_instructions(self, experiment: str) -> bool:
        s = self.settings
        return s.instructions or s.metric == "instructions" or self.experiment(experiment).instructions

    def budget_of(self, experiment: str) -> float:
        """Seconds the experiment spends adding rounds to its undecided comparisons: its own
        budget, if it has one, in budget mode (a plan's budget of 0, a fixed count, holds
        for every experiment), else the plan's."""
        e = self.experiment(experiment)
        return e.budget if e.budget is not None and self.settings.budget else self.settings.budget

    def samples_of(self, experiment: str) -> int:
        e = self.experiment(experiment)
        return e.samples or self.settings.samples

    def variant(self, name: str) -> Variant:
        """A variant by name; V@RUN (run --against: RUN's build of V) is defined as V."""
        return toolchain.get(name.partition("@")[0], self.custom_variants)

    def as_dict(self) -> dict:
        """The plan as a run stores it: its settings at the top, beside its tables."""
        d = asdict(self)
        del d["settings"]
        d["custom_variants"] = {k: v.as_dict() for k, v in self.custom_variants.items()}
        return {"name": self.name, **self.settings.model_dump(), **d}


def parse_param_flags(flags: list[str]) -> dict[str, str]:
    """['n=16..1024', 'precision=float'] -> {'n': '16..1024', 'precision': 'float'}; the
    values are parsed against each workload's declaration when the plan is validated."""
    out: dict[str, str] = {}
    for f in flags:
        key, eq, value = f.partition("=")
        key = key.strip()
        if not eq or not key:
            raise PlanError(f"--param {f!r}: expected key=value")
        if key in out:
            raise PlanError(f"--param {key}: given twice (give one --param {key}=a,b,c)")
        out[key] = value
    return out


def _variant(name: str, v: model.VariantTable) -> Variant:
    return Variant(name=name, compiler=v.compiler, cflags=tuple(v.cflags), ldflags=tuple(v.ldflags),
                   abi_flags=tuple(v.abi_flags), env=tuple((k, str(x)) for k, x in v.env.items()),
                   package=v.package, description=v.description)


def _experiment(e: ExperimentTable, i: int, custom: dict[str, Variant], at: str) -> Experiment:
    """One [[experiment]] table; its baseline, given in order of preference, the first this
    machine builds."""
    baselines = e.baseline if e.baseline is not None else e.variants[:1]
    for b in baselines:
        check(b in e.variants, f"{at}.baseline", f"{b!r} is not one of its variants ({', '.join(e.variants)})")
    return Experiment(name=e.name if e.name is not None else f"experiment-{i}", title=e.title, intro=e.intro,
                      tag=e.tag, workloads=list(e.workloads), variants=list(e.variants),
                      baseline=_pick_baseline(baselines, custom), params=dict(e.params), processes=e.processes,
                      samples=e.samples, budget=e.budget, share_machine=e.share_machine, instructions=e.instructions)


def _pick_baseline(names: list[str], custom: dict[str, Variant]) -> str:
    """A baseline given in order of preference: the first variant this machine can build
    (toolchains.unavailable_reason), else the first, whose rows then say why it is missing."""
    def buildable(name: str) -> bool:
        try:
            return not toolchains.unavailable_reason(toolchain.get(name, custom))
        except KeyError:  # an unknown variant: validate() names it
            return False
    return next((n for n in names if buildable(n)), names[0] if names else "")


def from_dict(d: dict, where: str) -> Plan:
    f = model.read(d, where)
    custom = {name: _variant(name, v) for name, v in f.variants.items()}
    exps = [_experiment(e, i, custom, f"{where}: experiment[{i}]") for i, e in enumerate(f.experiment)]
    try:
        own_kernels = kernels.resolved(f.kernel, Path(where).parent, where)
        programs = parse_programs(f.program, where)
    except (kernels.KernelError, CommandError) as e:
        raise PlanError(str(e)) from None
    plan = Plan(name=f.name if f.name is not None else Path(where).stem, experiments=exps, settings=f.settings(),
                custom_variants=custom, programs=programs, kernels=own_kernels, probe_tables=list(f.probe_tables))
    return validate(plan, where)


def load(path_or_name: str) -> Plan:
    """A plan file, or the name of a built-in plan (plans/NAME.toml)."""
    p = Path(path_or_name)
    if not p.exists() and (PLAN_DIR / f"{path_or_name}.toml").exists():
        p = PLAN_DIR / f"{path_or_name}.toml"
    if not p.exists():
        builtin = ", ".join(sorted(f.stem for f in PLAN_DIR.glob("*.toml")))
        raise PlanError(f"{path_or_name}: no such plan file or built-in plan (built-in: {builtin})")
    try:
        data = tomllib.loads(paths.read_limited(p, MAX_PLAN_BYTES).decode("utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise PlanError(f"{p}: malformed TOML: {e}") from None
    except RecursionError:
        raise PlanError(f"{p}: nested too deeply") from None
    except paths.TooLarge as e:
        raise PlanError(str(e)) from None
    except (OSError, UnicodeDecodeError) as e:
        raise PlanError(f"{p}: cannot read: {getattr(e, 'strerror', None) or e}") from None
    return from_dict(data, str(p))


def from_flags(workload_names: list[str], variant_names: list[str], params: dict[str, str | list[str]],
               baseline: str | None, kernel_files: list[str] = ()) -> Plan:
    """A one-experiment plan from `--workload`, `--kernel`, `--variant`, `--param`, `--baseline`."""
    variants = variant_names or list(toolchain.DEFAULT_VARIANTS)
    try:
        own = dict(kernels.from_file(f) for f in kernel_files)
        kernels.register(own, "--kernel")
    except kernels.KernelError as e:
        raise PlanError(str(e)) from None
    names = [*workload_names, *own] or ["sha256"]
    per_workload = {}
    for w in names:
        try:
            wl = workloads.get(w)
        except KeyError as err:
            raise PlanError(f"--workload: {err.args[0]}") from None
        per_workload[w] = canonical_params(wl, {k: v for k, v in params.items() if k in wl.params}, "--param ")
    for k in params:
        if not any(k in per_workload[w] for w in names):
            raise PlanError(f"--param {k}: no selected workload has this parameter"
                            + (" (a --kernel file has none: declare them in a plan's [kernel] table)" if own else ""))
    exp = Experiment(name="cli", workloads=names, variants=variants,
                     baseline=baseline or ("O2" if "O2" in variants else variants[0]),
                     params={w: p for w, p in per_workload.items() if p})
    return validate(Plan(name="command line", experiments=[exp], kernels=own), "command line")


def from_stored(record: RunRecord, where: str) -> Plan:
    """The Plan a run stored (Plan.record), read back to resume that run with its settings
    (its seed among them)."""
    d = {k: v for k, v in model.renamed(record.stored).items() if k not in ("kind", "turn_pairs")}
    if d.get("programs"):
        raise PlanError(f"{where}: a run with [program] tables cannot be resumed (its kernels and programs "
                        "would be measured apart); run it again")
    try:
        custom = {name: Variant(**{**v, "cflags": tuple(v["cflags"]), "ldflags": tuple(v["ldflags"]),
                                   "abi_flags": tuple(v["abi_flags"]), "env": tuple(v["env"].items())})
                  for name, v in d["custom_variants"].items()}
        exps = [_experiment(ExperimentTable.model_validate({k: v for k, v in e.items() if k != "first_look"}), i,
                            custom, where) for i, e in enumerate(d["experiments"])]
        settings = Settings.model_validate({k: d[k] for k in Settings.model_fields if k in d})
        plan = Plan(name=d["name"], experiments=exps, settings=settings, custom_variants=custom,
                    kernels=d.get("kernels") or {}, probe_tables=d.get("probe_tables") or [])
    except (KeyError, TypeError, AttributeError, ValueError, ValidationError) as e:
        raise PlanError(f"{where}: the stored plan cannot be read back ({type(e).__name__}: {e})") from None
    return validate(plan, where)
