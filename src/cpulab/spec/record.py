"""What a run was asked: its RunRecord, made once when the run starts, stored with it, and
read back by every stage after (the schedule's looks, summarise, the views, `--json`);
and what the run stored, read back before summarising: each result (StoredResult), each
result's samples (StoredSample) and the variants it built (StoredVariant).

A record has a kind (KINDS) and the spec its kind measures: a plan's settings and
experiments (Plan.as_dict), `cpulab time`'s commands, a probe's body, an imported tool's
results.  `stored` is the spec as written, which the `--json` document carries unchanged as
"plan".  Every record is built by RunRecord.make, written and read alike: a spec that
compares anything must say how (its method); nothing falls back to a default quietly.
"""
from __future__ import annotations

import dataclasses
import functools
import json
from dataclasses import dataclass, field, fields, make_dataclass

from pydantic import ValidationError

from cpulab.spec.policy import DecisionPolicy
from cpulab.spec.settings import Settings
from cpulab.spec.signals import SIGNALS

# plan: `cpulab run` (and ci, bisect, memlat, bandwidth: plans they make); time: `cpulab
# time`; probe and align: the probe commands; cluster: a cluster run's parent (its
# machines' runs are plans); imported: another tool's results (store/harnesses.py).
KINDS = ("plan", "time", "probe", "align", "cluster", "imported")


class RecordError(ValueError):
    """A run record that does not say what every record must."""


@dataclass(frozen=True)
class RecordedExperiment:
    """One experiment as its run recorded it: what summarise and the report read of it."""
    name: str
    workloads: list[str]
    baseline: str
    title: str = ""
    tag: str = ""  # the seed it redoes, if any
    intro: str = ""
    first_look: int | None = None  # its rounds at the first look (None: stored before looks were recorded)


@dataclass(frozen=True)
class RunRecord:
    kind: str
    experiments: list[RecordedExperiment]
    policy: DecisionPolicy  # the run's one decision policy: its looks, its verdicts, every view's legend
    against: str | None  # the variant every other is compared with across experiments
    commands: dict[str, str]  # `cpulab time`'s: each label's command line
    stored: dict = field(repr=False)

    @classmethod
    def make(cls, kind: str, spec: dict, settings: Settings | None = None) -> "RunRecord":
        """The record of a run of this kind asked `spec`, whose policy is that of its
        settings (given, or read from the spec); raises RecordError naming what is missing
        or wrong (a stored spec may come from an imported file: every part a reader takes
        is checked for its type here)."""
        if kind not in KINDS:
            raise RecordError(f"run record: kind {kind!r} is not one of {', '.join(KINDS)}")
        if not isinstance(spec, dict):
            raise RecordError("run record: not a table of settings")
        stored = {**spec, "kind": kind}
        experiments = [_experiment(e) for e in _typed(stored, "experiments", list, [])]
        commands = _typed(stored, "commands", dict, {})
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in commands.items()):
            raise RecordError("run record: commands: each label's command is a string")
        policy = (_policy(stored, settings) if experiments else DecisionPolicy())
        return cls(kind, experiments, policy,
                   _typed(stored, "against", str, None), dict(commands), stored)

    @classmethod
    def of_stored(cls, d: dict) -> "RunRecord":
        """A record as a run stored it, one of an earlier version brought up to date first
        (upgraded)."""
        d = upgraded(d)
        return cls.make(d["kind"], d)

    @property
    def first_looks(self) -> dict[str, int]:
        """Each experiment's rounds at its first look, where recorded: what places a
        comparison among its looks (DecisionPolicy.level)."""
        return {e.name: e.first_look for e in self.experiments if e.first_look}

    def compared_by(self, method: str | None) -> DecisionPolicy:
        """The policy with another method (`cpulab compare --method`); None: as run."""
        return self.policy if method is None else _policy({**self.stored, "method": method})


def _typed(d: dict, key: str, kind: type, default):
    """d[key] if it is of `kind` (absent or None: the default), else RecordError."""
    v = d.get(key)
    if v is None:
        return default
    if not isinstance(v, kind) or isinstance(v, bool) and kind is not bool:
        raise RecordError(f"run record: {key}: expected {getattr(kind, '__name__', 'a number')}, "
                          f"got {type(v).__name__}")
    return v


def _experiment(e) -> RecordedExperiment:
    if not isinstance(e, dict):
        raise RecordError("run record: an experiment is not a table")
    for key in ("name", "baseline"):
        if not isinstance(e.get(key), str):
            raise RecordError(f"run record: an experiment has no {key}")
    workloads = _typed(e, "workloads", list, [])
    if not all(isinstance(w, str) for w in workloads):
        raise RecordError(f"run record: experiment {e['name']}: workloads are names")
    return RecordedExperiment(e["name"], list(workloads), e["baseline"], _typed(e, "title", str, ""),
                              _typed(e, "tag", str, ""), _typed(e, "intro", str, ""),
                              _typed(e, "first_look", int, None))


def _policy(d: dict, settings: Settings | None = None) -> DecisionPolicy:
    """The policy of a record's settings (those given, else the ones it stores); samples
    in pairs only where it says so (a run stored before pairs took them singly)."""
    if settings is None:
        if "method" not in d:  # said by every record that compares (`upgraded` fills in older ones)
            raise RecordError("run record: method: not given")
        try:  # a record without a budget ran a fixed count
            settings = Settings.model_validate({**{k: d[k] for k in _POLICY_KEYS if d.get(k) is not None},
                                                "budget": d.get("budget") or 0.0})
        except ValidationError as e:
            err = e.errors()[0]
            raise RecordError(f"run record: {'.'.join(map(str, err['loc']))}: {err['msg']}, "
                              f"got {err.get('input')!r}") from None
    # `cpulab time` compares its commands as given, layout and all: no effect floor
    return dataclasses.replace(settings.policy, pairs=d.get("turn_pairs") is True,
                               **({"min_effect": 0.0} if d.get("kind") == "time" else {}))


# The settings a policy is made of, which every record that compares must hold.
_POLICY_KEYS = ("budget", "precision", "method", "metric")


def upgraded(d: dict) -> dict:
    """A record stored by an earlier version, with what it did not yet say: its kind (from
    its name or tool), and for one that compares, the method it was compared by then
    (unpaired: before methods were recorded, processes were independent samples)."""
    if "kind" in d:
        return d
    name = d.get("name", "")
    kind = ("imported" if "tool" in d else "cluster" if "cluster" in d
            else name if name in ("time", "probe", "align") else "plan")
    up = {**d, "kind": kind}
    if up.get("experiments") and "method" not in up:
        up["method"] = "unpaired"
    return up


@dataclass(frozen=True)
class StoredResult:
    """One result as stored: a parameter point of a workload under a variant, in one
    experiment of a run; its samples are read apart (Store.samples)."""
    id: int
    run_id: int
    experiment: str
    workload: str
    variant: str
    params: dict[str, str]
    unit: str
    status: str  # model.Status
    error: str
    artifact_hash: str | None
    same_as: str | None  # measured as this variant's twin (identical code)
    notes: dict  # the kernel's notes, its instruction count or why it has none

    @classmethod
    def of_row(cls, row) -> "StoredResult":
        d = dict(row)
        return cls(**{**d, "params": json.loads(d["params"]), "notes": json.loads(d["notes"])})


@dataclass(frozen=True)
class StoredVariant:
    """A variant as a run stored it: its definition as the plan gave it (plan.toolchain
    Variant.as_dict; an imported run's may hold other keys) and the compiler that built it."""
    name: str
    definition: dict
    compiler_version: str | None

    @classmethod
    def of_row(cls, row) -> "StoredVariant":
        return cls(row["name"], json.loads(row["definition"]), row["compiler_version"])

    @classmethod
    def from_dict(cls, d: dict) -> "StoredVariant":
        """to_dict's document back (an export, a `--json` document)."""
        return cls(d["name"], {k: v for k, v in d.items() if k != "compiler_version"}, d.get("compiler_version"))

    def to_dict(self) -> dict:
        return {**self.definition, "compiler_version": self.compiler_version}


@dataclass(frozen=True, slots=True)
class _Sample:
    process: int = 0
    idx: int = 0
    ns: float = 0.0
    work: float = 0.0
    reps: int = 1
    cycles: float | None = None  # core cycles (counters, or TSC ticks x core_per_tsc)
    instructions: float | None = None
    user_s: float | None = None
    sys_s: float | None = None
    timer: str = "wait4"
    tsc_hz: float | None = None
    core_per_tsc: float | None = None
    layout_pad: int = 0
    result_id: int = 0
    excluded: str = ""
    placement: int | None = None
    code_offset: int | None = None
    start_ns: float | None = None
    turn: int | None = None
    follows: str | None = None  # the variant that ran just before it, when it ran in turns
    events: dict | None = None  # named counters around it (--events): name -> count (None: not counted)

    @classmethod
    def of_row(cls, row) -> "StoredSample":
        d = {name: row[name] for name in _stored_fields(cls, tuple(row.keys()))}
        if d.get("events"):
            d["events"] = json.loads(d["events"])
        return cls(**d)


StoredSample = make_dataclass("StoredSample", [(s.name, float | None, None) for s in SIGNALS], bases=(_Sample,),
                              frozen=True, slots=True, namespace={"__doc__": """One timed sample: which process
    (round) of a result and which sample in it, its time, cycles and work, why it is left out
    of estimates ('' when used), where and when it ran (store/db.py PLACED), and a field for
    each signal seen around it (SIGNALS).  A run of an earlier version has None in the
    columns added since; the defaults are for samples made by hand (tests, benchmarks)."""})


@functools.cache
def _stored_fields(cls, columns: tuple[str, ...]) -> tuple[str, ...]:
    """The fields of `cls` that a row of these columns holds: asked once per query shape
    (a report reads some 30,000 samples)."""
    return tuple(f.name for f in fields(cls) if f.name in columns)
