"""The plan: which workloads, under which variants, with which parameters, how often.

A plan is a TOML file (see plans/*.toml) or is made from command-line flags.  Loading
validates everything up front and raises PlanError with one line naming the file and
the field, so a typo never costs a half-finished run.
"""
from __future__ import annotations

import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path

from . import toolchain, workloads
from .toolchain import Variant

PLAN_DIR = Path(__file__).resolve().parent / "plans"
DEFAULT_PLAN = "seeds"


class PlanError(Exception):
    pass


@dataclass
class Experiment:
    name: str
    workloads: list[str]
    variants: list[str]
    baseline: str
    title: str = ""
    params: dict[str, dict[str, list[str]]] = field(default_factory=dict)  # workload -> overrides
    runs: int | None = None  # processes per result here, if not the plan's
    samples: int | None = None  # samples per process here, if not the plan's


@dataclass
class Plan:
    name: str
    experiments: list[Experiment]
    runs: int = 10  # invocations (processes) per result, interleaved in rounds (the first look in budget mode)
    samples: int = 20  # samples per invocation: short ones, so preempted ones can be left out
    min_sample_time: float = 0.0025
    # Budget mode (budget > 0): after `runs` rounds, add rounds to undecided comparisons
    # whose interval is wider than +-precision, up to `budget` seconds per experiment
    # (run.py; looks at 1x, 2x, 4x runs).  0 = a fixed count of `runs` rounds.
    budget: float = 60.0
    precision: float = 0.01
    warmup: float = 0.020
    timeout: float = 300.0  # seconds per invocation
    profile: str = "quick"
    timer: str = "auto"
    # Measure variants even when their code is byte-identical (an A/A test of the method).
    measure_identical: bool = False
    # Probes run after the workloads, by name (probes.registry()), e.g. seed004-table2.
    probe_tables: list[str] = field(default_factory=list)
    custom_variants: dict[str, Variant] = field(default_factory=dict)

    def runs_of(self, experiment: str) -> int:
        e = next(e for e in self.experiments if e.name == experiment)
        return e.runs or self.runs

    def samples_of(self, experiment: str) -> int:
        e = next(e for e in self.experiments if e.name == experiment)
        return e.samples or self.samples

    def variant(self, name: str) -> Variant:
        return toolchain.get(name, self.custom_variants)

    def as_dict(self) -> dict:
        d = asdict(self)
        d["custom_variants"] = {k: v.as_dict() for k, v in self.custom_variants.items()}
        return d


def parse_param_values(text: str) -> list[str]:
    """'1024' | '16,64,256' | '16..1024' (powers of two from 16 to 1024)."""
    text = text.strip()
    if ".." in text:
        lo_s, hi_s = text.split("..", 1)
        try:
            lo, hi = int(lo_s, 0), int(hi_s, 0)
        except ValueError:
            raise PlanError(f"range {text!r}: both ends must be integers") from None
        if lo < 1 or hi < lo:
            raise PlanError(f"range {text!r}: want 1 <= low <= high")
        out, v = [], lo
        while v <= hi:
            out.append(str(v))
            v *= 2
        return out
    values = [v.strip() for v in text.split(",") if v.strip()]
    if not values:
        raise PlanError(f"empty parameter value {text!r}")
    return values


def parse_size(text: str) -> int:
    """'4096', '64K', '64M', '1G' (powers of 1024) -> bytes."""
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    mult = {"K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}.get(t[-1:], 1)
    try:
        n = int(float(t[:-1] if mult > 1 else t) * mult)
    except ValueError:
        raise PlanError(f"size {text!r}: expected a number of bytes such as 4096, 64K, 64M or 1G") from None
    if n < 1:
        raise PlanError(f"size {text!r}: must be positive")
    return n


def parse_param_flags(flags: list[str]) -> dict[str, list[str]]:
    """['n=16..1024', 'precision=float'] -> {'n': [...], 'precision': ['float']}."""
    out: dict[str, list[str]] = {}
    for f in flags:
        key, eq, value = f.partition("=")
        if not eq or not key.strip():
            raise PlanError(f"--param {f!r}: expected key=value")
        out[key.strip()] = parse_param_values(value)
    return out


def _check(cond: bool, where: str, msg: str) -> None:
    if not cond:
        raise PlanError(f"{where}: {msg}")


def _check_keys(d: dict, known: set[str], where: str) -> None:
    unknown = sorted(set(d) - known)
    if unknown:
        raise PlanError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(sorted(known))})")


def _str_list(value, where: str) -> list[str]:
    if isinstance(value, str):
        value = [value]
    _check(isinstance(value, list) and all(isinstance(v, (str, int, float)) for v in value),
           where, "expected a list of strings")
    return [str(v) for v in value]


def validate(plan: Plan, where: str = "plan") -> Plan:
    _check(plan.runs >= 1, f"{where}: runs", f"must be at least 1, got {plan.runs}")
    _check(1 <= plan.samples <= 10000, f"{where}: samples", f"must be 1..10000, got {plan.samples}")
    _check(plan.min_sample_time > 0, f"{where}: min_sample_time", "must be positive")
    _check(plan.budget >= 0, f"{where}: budget", f"must be >= 0 seconds, got {plan.budget}")
    _check(0 < plan.precision < 1, f"{where}: precision", f"must be between 0 and 1, got {plan.precision}")
    _check(plan.timeout > 0, f"{where}: timeout", "must be positive")
    _check(plan.profile in ("quick", "full"), f"{where}: profile", f"must be quick or full, got {plan.profile!r}")
    _check(plan.timer in ("auto", "perf", "tsc", "clock"), f"{where}: timer",
           f"must be auto, perf, tsc or clock, got {plan.timer!r}")
    _check(bool(plan.experiments) or bool(plan.probe_tables), where, "no experiments")
    from . import probes  # the catalogue of probes, as workloads is the catalogue of kernels
    for t in plan.probe_tables:
        _check(t in probes.registry(), f"{where}: probe_tables",
               f"unknown probe {t!r} (known: {', '.join(probes.registry())})")
    for i, e in enumerate(plan.experiments):
        at = f"{where}: experiment {e.name or i!r}"
        _check(bool(e.workloads), at, "no workloads")
        _check(bool(e.variants), at, "no variants")
        for key in ("runs", "samples"):
            v = getattr(e, key)
            _check(v is None or (isinstance(v, int) and not isinstance(v, bool) and v >= 1),
                   f"{at}: {key}", f"must be a whole number >= 1, got {v!r}")
        for w in e.workloads:
            try:
                wl = workloads.get(w)
            except KeyError as err:
                raise PlanError(f"{at}: workloads: {err.args[0]}") from None
            try:
                wl.grid(plan.profile, e.params.get(w))
            except KeyError as err:
                raise PlanError(f"{at}: params: {err.args[0]}") from None
        for w in e.params:
            _check(w in e.workloads, f"{at}: params", f"{w!r} is not one of this experiment's workloads")
        for v in e.variants:
            try:
                plan.variant(v)
            except KeyError as err:
                raise PlanError(f"{at}: variants: {err.args[0]}") from None
        _check(e.baseline in e.variants, f"{at}: baseline",
               f"{e.baseline!r} is not one of its variants ({', '.join(e.variants)})")
    return plan


_PLAN_KEYS = {"name", "runs", "samples", "min_sample_time", "warmup", "timeout", "profile", "timer", "budget", "precision",
              "measure_identical", "probe_tables", "variants", "experiment"}
_EXP_KEYS = {"name", "title", "workloads", "variants", "baseline", "params", "runs", "samples"}
_VARIANT_KEYS = {"compiler", "cflags", "ldflags", "abi_flags", "env", "package", "description"}


def _variant_from_toml(name: str, d: dict, where: str) -> Variant:
    _check_keys(d, _VARIANT_KEYS, where)
    env = d.get("env", {})
    _check(isinstance(env, dict), f"{where}.env", "expected a table of NAME = value")
    return Variant(name=name, compiler=str(d.get("compiler", "gcc")),
                   cflags=tuple(_str_list(d.get("cflags", ["-O2"]), f"{where}.cflags")),
                   ldflags=tuple(_str_list(d.get("ldflags", []), f"{where}.ldflags")),
                   abi_flags=tuple(_str_list(d.get("abi_flags", []), f"{where}.abi_flags")),
                   env=tuple((str(k), str(v)) for k, v in env.items()),
                   package=str(d.get("package", "")), description=str(d.get("description", "")))


def from_dict(d: dict, where: str) -> Plan:
    _check_keys(d, _PLAN_KEYS, where)
    custom = {}
    for name, vd in (d.get("variants") or {}).items():
        _check(isinstance(vd, dict), f"{where}: variants.{name}", "expected a table")
        custom[name] = _variant_from_toml(name, vd, f"{where}: variants.{name}")
    exps = []
    raw_exps = d.get("experiment") or []
    _check(isinstance(raw_exps, list), f"{where}: experiment", "expected [[experiment]] tables")
    for i, ed in enumerate(raw_exps):
        at = f"{where}: experiment[{i}]"
        _check(isinstance(ed, dict), at, "expected a table")
        _check_keys(ed, _EXP_KEYS, at)
        variants = _str_list(ed.get("variants", []), f"{at}.variants")
        params = {}
        for w, pd in (ed.get("params") or {}).items():
            _check(isinstance(pd, dict), f"{at}.params.{w}", "expected a table of parameter = values")
            params[w] = {}
            for k, v in pd.items():
                try:
                    params[w][k] = parse_param_values(v) if isinstance(v, str) else _str_list(v, k)
                except PlanError as e:
                    raise PlanError(f"{at}.params.{w}.{k}: {e}") from None
        exps.append(Experiment(name=str(ed.get("name", f"experiment-{i}")), title=str(ed.get("title", "")),
                               workloads=_str_list(ed.get("workloads", []), f"{at}.workloads"),
                               variants=variants, baseline=str(ed.get("baseline", variants[0] if variants else "")),
                               params=params, runs=ed.get("runs"), samples=ed.get("samples")))
    try:
        plan = Plan(name=str(d.get("name", Path(where).stem)), experiments=exps, custom_variants=custom,
                    **{k: d[k] for k in ("runs", "samples", "min_sample_time", "warmup", "timeout", "budget", "precision",
                                         "profile", "timer", "measure_identical") if k in d},
                    probe_tables=_str_list(d.get("probe_tables", []), f"{where}: probe_tables"))
    except TypeError as e:
        raise PlanError(f"{where}: {e}") from None
    for k, typ in (("runs", int), ("samples", int), ("min_sample_time", (int, float)),
                   ("warmup", (int, float)), ("timeout", (int, float)), ("budget", (int, float)),
                   ("precision", (int, float))):
        _check(isinstance(getattr(plan, k), typ) and not isinstance(getattr(plan, k), bool),
               f"{where}: {k}", f"expected a number, got {getattr(plan, k)!r}")
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
        data = tomllib.loads(p.read_text())
    except tomllib.TOMLDecodeError as e:
        raise PlanError(f"{p}: malformed TOML: {e}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise PlanError(f"{p}: cannot read: {e}") from None
    return from_dict(data, str(p))


def from_flags(workload_names: list[str], variant_names: list[str], params: dict[str, list[str]],
               baseline: str | None) -> Plan:
    """A one-experiment plan from `--workload`, `--variant`, `--param`, `--baseline`."""
    variants = variant_names or list(toolchain.DEFAULT_VARIANTS)
    names = workload_names or ["sha256"]
    per_workload = {}
    for w in names:
        try:
            known = workloads.get(w).params
        except KeyError:
            known = {}
        per_workload[w] = {k: v for k, v in params.items() if k in known}
    for k in params:
        if not any(k in per_workload[w] for w in names):
            raise PlanError(f"--param {k}: no selected workload has this parameter")
    exp = Experiment(name="cli", workloads=names, variants=variants,
                     baseline=baseline or ("O2" if "O2" in variants else variants[0]),
                     params={w: p for w, p in per_workload.items() if p})
    return validate(Plan(name="command line", experiments=[exp]), "command line")
