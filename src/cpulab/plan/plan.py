"""The plan: which workloads, under which variants, with which parameters, how often.

A plan is a TOML file (see plans/*.toml) or is made from command-line flags.  Loading
validates everything up front and raises PlanError with one line naming the file and
the field, so a typo never costs a half-finished run.
"""
from __future__ import annotations

import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path

from cpulab import paths, workloads
from cpulab.spec import policy
from cpulab.spec.record import RunRecord
from cpulab.plan import kernels, toolchain
from cpulab.plan.checks import LIMITS, PlanError, canonical_params, check, check_keys, str_list, validate  # noqa: F401 (plans.LIMITS, plans.validate)
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
    # Processes per result, one per round (the first look in budget mode; TOML `runs`:
    # its old name).  None: the fewest rounds at which each experiment's comparisons can
    # be significant after Holm over all of them (policy.first_look): 8 for one, 12 for 16.
    processes: int | None = None
    # Samples per process: short ones, so preempted ones can be left out; many, since in
    # turns a round's ratio is a median over its turns (per-sample noise here is ~13%).
    samples: int = 50
    min_sample_time: float = 0.0025
    # Budget mode (budget > 0): after `processes` rounds, add rounds to undecided comparisons
    # whose interval is wider than +-precision, up to `budget` seconds per experiment
    # (measure/schedule/rounds.py; looks at 1x, 2x, 4x).  0 = a fixed count of `processes` rounds.
    budget: float = 60.0
    precision: float = 0.01
    warmup: float = 0.020
    timeout: float = 300.0  # seconds per process
    grid: str = "quick"  # the parameter grids: quick or full (TOML `profile`: its old name)
    timer: str = "auto"
    # Measure variants even when their code is byte-identical (an A/A test of the method).
    measure_identical: bool = False
    # Probes run after the workloads, by name (measure.probes.registry(), checked there), e.g. seed004-table2.
    probe_tables: list[str] = field(default_factory=list)
    custom_variants: dict[str, Variant] = field(default_factory=dict)
    programs: dict[str, Program] = field(default_factory=dict)  # the [program.NAME] tables
    # The [kernel.NAME] tables (plan/kernels.py), paths absolute: workloads of the user's own.
    kernels: dict[str, dict] = field(default_factory=dict)
    cold: bool = False  # evict program inputs from the page cache before each run
    # How variants meet their baseline (policy.METHODS): "turns" runs the kernels of one
    # point as processes alive together, taking samples in turns.
    method: str = policy.DEFAULT_METHOD
    # The id of a stored run whose artifacts are measured beside this plan's builds, as
    # each variant's baseline (`run --against`): a comparison within one run.
    against: int | None = None
    # Every experiment's results get their instructions per unit counted (valgrind), the
    # second witness beside the time (measure/instructions.py); per experiment: its own key.
    instructions: bool = False
    # What the verdicts are read from (policy.METRICS): "instructions" counts every
    # experiment and decides by the counts, with the time beside them.
    metric: str = "time"

    def experiment(self, name: str) -> Experiment:
        return next(e for e in self.experiments if e.name == name)

    def processes_of(self, experiment: str) -> int:
        e = self.experiment(experiment)
        return e.processes or self.processes or self.decision_policy().first_look(self.comparisons_of(e))

    def points_of(self, e: Experiment) -> int:
        """The parameter points of an experiment's workloads and programs."""
        return sum(len(self.programs[w].grid(e.params.get(w)) if w in self.programs
                       else workloads.get(w).grid(self.grid, e.params.get(w))) for w in e.workloads)

    def comparisons_of(self, e: Experiment) -> int:
        """How many comparisons the experiment's one Holm family holds: every variant but
        the baseline at every point of every workload."""
        return (len(e.variants) - 1) * self.points_of(e)

    def decision_policy(self) -> policy.DecisionPolicy:
        """The policy of these settings, as the run's record will hold it."""
        return policy.DecisionPolicy.of_settings(self.budget, self.precision, self.method, self.metric, pairs=True)

    def record(self, kind: str = "plan", **more) -> RunRecord:
        """What a run of this plan was asked, as it is stored (a cluster run's: with `more`)."""
        return RunRecord.make(kind, {**self.as_dict(), "turn_pairs": self.decision_policy().pairs, **more})

    def counts_instructions(self, experiment: str) -> bool:
        return self.instructions or self.metric == "instructions" or self.experiment(experiment).instructions

    def samples_of(self, experiment: str) -> int:
        e = self.experiment(experiment)
        return e.samples or self.samples

    def variant(self, name: str) -> Variant:
        """A variant by name; V@RUN (run --against: RUN's build of V) is defined as V."""
        return toolchain.get(name.partition("@")[0], self.custom_variants)

    def as_dict(self) -> dict:
        d = asdict(self)
        d["custom_variants"] = {k: v.as_dict() for k, v in self.custom_variants.items()}
        return d


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


# Keys plans were written with before their words changed, and the word each now means.
OLD_KEYS = {"runs": "processes", "profile": "grid"}


def _renamed(d: dict, where: str) -> dict:
    """A plan's (or experiment's) table with its old keys read as the new ones."""
    out = dict(d)
    for old, new in OLD_KEYS.items():
        if old in out:
            check(new not in out, f"{where}: {old}", f"{old!r} is the old name of {new!r}; give one of them")
            out[new] = out.pop(old)
    return out


def _programs_from_toml(table, where: str) -> dict[str, Program]:
    try:
        return parse_programs(table, where)
    except CommandError as e:
        raise PlanError(str(e)) from None


_PLAN_KEYS = {"name", "processes", "samples", "min_sample_time", "warmup", "timeout", "grid", "timer", "budget", "precision",
              "measure_identical", "probe_tables", "variants", "experiment", "program", "kernel", "cold", "method",
              "instructions", "metric"}
_EXP_KEYS = {"name", "title", "intro", "tag", "workloads", "variants", "baseline", "params", "processes", "samples",
             "share_machine", "instructions"}
_VARIANT_KEYS = {"compiler", "cflags", "ldflags", "abi_flags", "env", "package", "description"}


def _str(d: dict, key: str, default: str, where: str) -> str:
    value = d.get(key, default)
    check(isinstance(value, str), f"{where}: {key}", f"expected a string, got {value!r}")
    return value


def _variant_from_toml(name: str, d: dict, where: str) -> Variant:
    check_keys(d, _VARIANT_KEYS, where)
    env = d.get("env", {})
    check(isinstance(env, dict) and all(isinstance(v, (str, int)) and not isinstance(v, bool)
                                         for v in env.values()), f"{where}.env", "expected a table of NAME = \"value\"")
    return Variant(name=name, compiler=_str(d, "compiler", "gcc", where),
                   cflags=tuple(str_list(d.get("cflags", ["-O2"]), f"{where}.cflags")),
                   ldflags=tuple(str_list(d.get("ldflags", []), f"{where}.ldflags")),
                   abi_flags=tuple(str_list(d.get("abi_flags", []), f"{where}.abi_flags")),
                   env=tuple((k, str(v)) for k, v in env.items()), package=_str(d, "package", "", where),
                   description=_str(d, "description", "", where))


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
    d = _renamed(d, where)
    check_keys(d, _PLAN_KEYS, where)
    variants_table = d.get("variants") or {}
    check(isinstance(variants_table, dict), f"{where}: variants", "expected [variants.NAME] tables")
    custom = {}
    for name, vd in variants_table.items():
        check(isinstance(vd, dict), f"{where}: variants.{name}", "expected a table")
        custom[name] = _variant_from_toml(name, vd, f"{where}: variants.{name}")
    exps = []
    raw_exps = d.get("experiment") or []
    check(isinstance(raw_exps, list), f"{where}: experiment", "expected [[experiment]] tables")
    for i, ed in enumerate(raw_exps):
        at = f"{where}: experiment[{i}]"
        check(isinstance(ed, dict), at, "expected a table")
        ed = _renamed(ed, at)
        check_keys(ed, _EXP_KEYS, at)
        variants = str_list(ed.get("variants", []), f"{at}.variants")
        baselines = str_list(ed.get("baseline", variants[:1]), f"{at}.baseline")
        for b in baselines:
            check(b in variants, f"{at}.baseline", f"{b!r} is not one of its variants ({', '.join(variants)})")
        for key in ("share_machine", "instructions"):
            check(isinstance(ed.get(key, False), bool), f"{at}.{key}", "expected true or false")
        exps.append(Experiment(name=_str(ed, "name", f"experiment-{i}", at), title=_str(ed, "title", "", at),
                               intro=_str(ed, "intro", "", at), tag=_str(ed, "tag", "", at),
                               workloads=str_list(ed.get("workloads", []), f"{at}.workloads"),
                               variants=variants, baseline=_pick_baseline(baselines, custom),
                               params=ed.get("params") or {}, processes=ed.get("processes"), samples=ed.get("samples"),
                               share_machine=ed.get("share_machine", False),
                               instructions=ed.get("instructions", False)))
    try:
        own_kernels = kernels.resolved(d.get("kernel"), Path(where).parent, where)
    except kernels.KernelError as e:
        raise PlanError(str(e)) from None
    plan = Plan(name=_str(d, "name", Path(where).stem, where), experiments=exps, custom_variants=custom,
                programs=_programs_from_toml(d.get("program"), where), kernels=own_kernels,
                cold=bool(d.get("cold", False)),
                **{k: d[k] for k in ("processes", "samples", "min_sample_time", "warmup", "timeout", "budget", "precision",
                                     "grid", "timer", "measure_identical", "method", "instructions", "metric") if k in d},
                probe_tables=str_list(d.get("probe_tables", []), f"{where}: probe_tables"))
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
    """The Plan a run stored (Plan.record), read back to resume that run."""
    # the seed: the run's, not the plan's; samples in pairs: how this version takes turns
    d = {k: v for k, v in record.stored.items() if k not in ("kind", "seed", "turn_pairs")}
    if d.get("programs"):
        raise PlanError(f"{where}: a run with [program] tables cannot be resumed (its kernels and programs "
                        "would be measured apart); run it again")
    try:
        custom = {name: Variant(**{**v, "cflags": tuple(v["cflags"]), "ldflags": tuple(v["ldflags"]),
                                   "abi_flags": tuple(v["abi_flags"]), "env": tuple(v["env"].items())})
                  for name, v in d["custom_variants"].items()}
        d = _renamed(d, where)  # a run stored before the words changed
        plan = Plan(**{**d, "experiments": [Experiment(**_renamed(e, where)) for e in d["experiments"]],
                       "custom_variants": custom})
    except (KeyError, TypeError, AttributeError) as e:
        raise PlanError(f"{where}: the stored plan cannot be read back ({type(e).__name__}: {e})") from None
    return validate(plan, where)
