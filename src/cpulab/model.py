"""The values every stage shares: the status of a result, the verdict of a comparison,
the typed summary of a run (Result, Comparison, Geomean, Analysis, Summary, and what the
run was asked: record.RunRecord) that the analyse stage produces and every view draws, and
machines side by side (Machines) or two runs against each other (RunPair).

Status and Verdict are string enums, so they compare equal to (and are stored and
exported as) their plain values: `Status.OK == "ok"`.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from typing import Any

from cpulab.spec.policy import DecisionPolicy
from cpulab.spec.record import RunRecord, StoredVariant


class Status(StrEnum):
    PENDING = "pending"  # planned, not (fully) measured yet
    OK = "ok"  # measured
    IDENTICAL = "identical"  # same code and environment as another variant: measured once, as that one
    SKIPPED = "skipped"  # this machine lacks a toolchain, library or instruction set
    BUILD_FAILED = "build-failed"
    SETUP_FAILED = "setup-failed"  # the kernel could not set up (a parameter it cannot take, no memory)
    VERIFY_FAILED = "verify-failed"  # wrong known answer: never timed
    CRASH = "crash"  # killed by a signal
    TIMEOUT = "timeout"
    ERROR = "error"  # anything else: no result could be read
    LOST = "lost"  # its cluster worker died in the middle of it, twice, or left: never stored as complete

    @property
    def measured(self) -> bool:
        """Has samples to estimate from (its own or, for identical, its twin's)."""
        return self in (Status.OK, Status.IDENTICAL)


class Verdict(StrEnum):
    FASTER = "faster"
    SLOWER = "slower"
    SAME = "same"  # the interval lies within +-precision
    UNCLEAR = "unclear"  # neither significant nor that narrow: more rounds would decide
    INCONCLUSIVE = "inconclusive"  # too few processes for any difference to be significant
    IDENTICAL_CODE = "identical code"
    NO_BASELINE = "no baseline"
    NOT_COMPARABLE = "not comparable: emulated vs native"  # qemu's time says nothing of the native core
    SMALLER = "smaller"  # metric memory: a significantly lower peak memory (faster's place)
    LARGER = "larger"  # and a higher one


def params_key(params: dict[str, str]) -> tuple:
    """A parameter point as a hashable key, whatever order its parameters came in."""
    return tuple(sorted(params.items()))


@dataclass
class Result:
    """One workload x variant x parameter point of a run, estimated from its samples;
    `processes` counts the processes that gave samples (older documents: `invocations`)."""
    id: int
    experiment: str
    workload: str
    variant: str
    params: dict[str, str]
    unit: str
    rate_unit: str
    per_clock_unit: str
    status: Status
    error: str = ""
    same_as: str | None = None
    notes: dict = field(default_factory=dict)
    emulated: bool = False  # ran under qemu-user: the time is the emulator's
    median: float | None = None
    ci: list[float] | None = None
    cv: float | None = None
    processes: int = 0
    cycles_per_unit: float | None = None
    cycles_per_unit_ci: list[float] | None = None
    ns_per_unit: float | None = None
    ipc: float | None = None  # instructions per core cycle: counters', or the count's over cycles_per_unit
    # The second witness (measure/instructions.py): instructions per unit of the timed
    # work, from "counters", "valgrind" or "branch-step" (stepped on the core at each
    # branch: what valgrind cannot run; "single-step" in runs before 2026-11-27);
    # instructions_why says why a result has none.
    instructions_per_unit: float | None = None
    instructions_source: str | None = None
    instructions_why: str | None = None
    # A memory kernel's count with valgrind's cache model: simulated misses per unit.
    d1_misses_per_unit: float | None = None
    ll_misses_per_unit: float | None = None
    timer: str | None = None
    core_per_tsc: float | None = None
    samples: list[float] = field(default_factory=list)
    real_s: float | None = None
    user_s: float | None = None
    sys_s: float | None = None
    ci_coverage: float | None = None  # the real coverage of ci (below 6 processes it is under 95%)
    excluded_samples: int = 0  # samples judged contaminated (signals.contamination), left out
    excluded_processes: int = 0  # processes with no sample left
    excluded_why: dict[str, int] = field(default_factory=dict)
    # Placement (build/artifacts.py): how many placements its processes ran, the spread
    # of their estimates as [lowest, highest] / median (process noise included), and the
    # timed code's distinct offsets within a page that produced it.  0 placements: not varied.
    placements: int = 0
    placement_band: list[float] | None = None
    code_offsets: list[int] = field(default_factory=list)
    # One observation per process, keyed by the round it ran in (for paired comparisons),
    # and each used sample's rate as round -> {cycle: rate} (for rounds in turns); not
    # part of the document.
    observations: dict[int, float] = field(default_factory=dict, repr=False)
    turn_rates: dict[int, dict[int, float]] = field(default_factory=dict, repr=False)
    # Per process in turns: its rate after another member over after itself (not in the document).
    carryover_ratios: list[float] = field(default_factory=list, repr=False)
    # Whole processes (programs, cpulab time): work per core cycle of each process whose
    # cycles were counted or read from the TSC at the core clock around it (not in the document).
    cycle_observations: dict[int, float] = field(default_factory=dict, repr=False)
    # Whole processes: 1 / peak memory (kB) of each, higher is better as a rate is (not in the document).
    memory_observations: dict[int, float] = field(default_factory=dict, repr=False)
    # Named counters (--events) per unit [CI], top-down level 1, why one did not count here.
    events_per_unit: dict[str, float] = field(default_factory=dict)
    events_per_unit_ci: dict[str, list[float]] = field(default_factory=dict)
    topdown: dict[str, float] | None = None
    events_unavailable: dict[str, str] = field(default_factory=dict)
    event_observations: dict[str, dict[int, float]] = field(default_factory=dict, repr=False)

    @property
    def point(self) -> tuple:
        return params_key(self.params)

    @property
    def label(self) -> str:
        """The variant as every view names it: emulated results say so."""
        return self.variant + (" (emulated)" if self.emulated else "")

    def to_dict(self) -> dict:
        d = asdict(self)
        for hidden in ("observations", "turn_rates", "carryover_ratios", "cycle_observations", "memory_observations",
                       "event_observations"):
            del d[hidden]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Result":
        d = {k: v for k, v in d.items() if k != "invocations"}  # the older name of `processes`
        return cls(**_known(cls, {**d, "status": Status(d["status"])}))


@dataclass
class Comparison:
    """A variant against its experiment's baseline at one parameter point."""
    experiment: str
    workload: str
    params: dict[str, str]
    baseline: str
    variant: str
    verdict: str  # a Verdict, or the variant's Status when it has nothing to compare
    ratio: float | None = None  # variant rate / baseline rate: > 1 is faster
    ci: list[float] | None = None
    p: float | None = None  # Holm-corrected
    p_raw: float | None = None
    method: str | None = None  # turns, paired or unpaired (policy.METHODS)
    rounds: int | None = None  # observations the test used
    alpha: float | None = None  # the level of its look (budget mode spends 0.05 over its looks: policy.level)
    confidence: float | None = None  # the coverage of ci: 1 - alpha
    # Instructions per unit, variant over baseline (< 1: fewer), and in words where the two
    # witnesses disagree (estimates.witness_words); None where either has no count.
    instruction_ratio: float | None = None
    witness: str = ""
    # Why a decided comparison came out so (analysis/why.py): {"sentence", "figures"}.
    why: dict | None = None
    # In turns: each member's carry-over (its rate right after the other member over
    # right after itself: {"baseline"|"variant": {ratio, ci, processes}}) and their
    # asymmetry (variant's over baseline's, {ratio, ci}), which biases the ratio; `held`
    # says why a faster/slower was held back as unclear (estimates.hold_for_carryover).
    carryover: dict | None = None
    held: str = ""
    # What the ratio is of: "time", "core cycles" for whole processes whose every process
    # has them (the host moves the core clock between processes), or "peak memory" under
    # the memory metric (estimates._basis)
    basis: str = "time"
    # Each counter both sides counted (--events): {ratio, ci, verdict, ...} (estimates.compare_events)
    events: dict[str, dict] = field(default_factory=dict)

    @property
    def point(self) -> tuple:
        return params_key(self.params)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Comparison":
        return cls(**_known(cls, d))


@dataclass
class Geomean:
    """The geometric mean of a variant's ratios over an experiment's parameter points."""
    experiment: str
    workload: str
    variant: str
    baseline: str
    ratio: float
    points: int
    ci: list[float] | None = None  # at the comparisons' confidence, over rounds (summary.geomeans)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Analysis:
    """A derived finding stored with a run, as data: `kind` says which renderer draws it
    (report/analysis_views.py), `key` tells several of one kind apart (a probe's body, a table's name)."""
    kind: str
    key: str
    data: Any

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Summary:
    """Everything every view of a run shows: what analyse produces, what presenters draw.
    to_dict() is the `--json` document (README, "JSON output")."""
    run_id: int
    status: str
    started: float
    finished: float | None
    plan: RunRecord
    machine: dict
    conditions: dict
    timing: dict
    variants: list[StoredVariant]
    results: list[Result]
    comparisons: list[Comparison]
    geomeans: list[Geomean]
    analyses: list[Analysis]
    # What each (workload, variant) was built from: {workload, variant, hash, commands}.
    artifacts: list[dict] = field(default_factory=list)
    # Samples right after another group member against right after their own process:
    # {ratio, ci, p, processes} (estimates.carryover); None when nothing ran in turns.
    carryover: dict | None = None
    # Seconds per phase (time_split.py), per experiment and for the run ("").
    time_split: dict[str, dict[str, float]] = field(default_factory=dict)
    # The run's one decision policy (from its stored plan): every view's verdicts and legend.
    policy: DecisionPolicy = field(default_factory=DecisionPolicy)
    wall_s: float | None = None  # set by `cpulab run`: how long the whole run took
    report: str | None = None  # set by `cpulab run`: where its HTML report is

    def to_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        for name in ("results", "comparisons", "geomeans", "analyses"):
            d[name] = [x.to_dict() for x in d[name]]
        d["variants"] = [v.to_dict() for v in self.variants]
        d["policy"] = asdict(self.policy)
        d["plan"] = self.plan.stored
        for name in ("wall_s", "report"):
            if d[name] is None:
                del d[name]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Summary":
        """A document as to_dict() wrote it (an export, a test fixture) back as a Summary."""
        plan = RunRecord.of_stored(d["plan"])
        return cls(**{**_known(cls, d), "plan": plan,
                      "variants": [StoredVariant.from_dict(v) for v in d["variants"]],
                      "results": [Result.from_dict(r) for r in d["results"]],
                      "comparisons": [Comparison.from_dict(c) for c in d["comparisons"]],
                      "geomeans": [Geomean(**g) for g in d["geomeans"]],
                      "analyses": [Analysis(**a) for a in d.get("analyses", [])],
                      "policy": DecisionPolicy.from_dict(d["policy"]) if "policy" in d else plan.policy})


@dataclass
class MachineRun:
    """One machine of machines side by side: the run that measured it, and its fingerprint."""
    machine: str  # the name the tables give it (between_runs.machine_name)
    machine_id: str
    run_id: int
    status: str
    fingerprint: dict
    conditions: dict
    timing: dict
    variants: list[StoredVariant]
    label: str = ""


@dataclass
class MachineRow:
    """One point on one machine: its rate and cycles per unit, its share of the best
    machine's rate there, and its verdict against the reference machine."""
    experiment: str
    workload: str
    variant: str
    params: dict[str, str]
    machine: str
    status: str
    rate_unit: str
    median: float | None = None
    ci: list[float] | None = None
    cycles_per_unit: float | None = None
    pct_of_best: float | None = None
    reference: str | None = None  # the machine compared with: the best one, or `--against`
    ratio: float | None = None
    ci_ratio: list[float] | None = None
    p: float | None = None
    verdict: str | None = None  # a Verdict, or the row's Status when it has no estimate


@dataclass
class RankedMachine:
    """A machine's standing over the points every machine measured (geometric means)."""
    machine: str
    points: int
    pct_of_best_rate: float | None
    pct_of_best_per_clock: float | None  # the best cycles per unit as a % of its own
    rank: int = 0


@dataclass
class Machines:
    """Machines side by side (analysis.between_runs): a cluster run's, or any runs'."""
    run_ids: list[int]
    machines: list[MachineRun]
    results: list[dict]  # each machine's results (Result.to_dict) tagged machine, machine_id
    comparisons: list[dict]  # each machine's own comparisons, tagged likewise
    machine_table: list[MachineRow]
    ranking: list[RankedMachine]
    memlat: dict[str, list[list[float]]]  # per machine and page mode: [working set, ns per load]
    drift: dict  # between_runs.drift_note: what verdicts across the machines had to clear
    machines_lost: list[dict] = field(default_factory=list)
    # A cluster run's own (None for runs put side by side):
    run_id: int | None = None
    status: str | None = None
    started: float | None = None
    finished: float | None = None
    plan: RunRecord | None = None
    client: dict | None = None  # the fingerprint of the machine that ran the client
    wall_s: float | None = None  # set by `cpulab run --cluster`
    report: str | None = None

    def to_dict(self) -> dict:
        d = {k: v for k, v in asdict(self).items() if v is not None}
        for m, run in zip(d["machines"], self.machines):
            m["variants"] = [v.to_dict() for v in run.variants]
        if self.plan is not None:
            d["plan"] = self.plan.stored
        return d


@dataclass
class RunSide:
    """One side of a comparison of two runs: the run and the machine that measured it."""
    run_id: int
    machine: str | None
    machine_id: str
    started: float
    status: str
    fingerprint: dict


@dataclass
class RunPairRow:
    """One point measured in both runs: B's rate against A's."""
    experiment: str
    workload: str
    variant: str
    params: dict[str, str]
    rate_unit: str
    a: float | None  # A's estimate (None: not measured there)
    b: float | None
    ratio: float | None = None  # b / a
    ci: list[float] | None = None
    p: float | None = None
    verdict: str | None = None


@dataclass
class RunPair:
    """Run B against run A (analysis.between_runs.compare_runs): the same points, measured apart."""
    a: RunSide
    b: RunSide
    comparisons: list[RunPairRow]
    drift: dict  # between_runs.drift_note: what each verdict had to clear

    def to_dict(self) -> dict:
        return asdict(self)


def _known(cls, d: dict) -> dict:
    """d's keys that are fields of cls; a key the model does not declare is an error, so
    a field added to the document without a place in the model is found at once."""
    names = {f.name for f in fields(cls)}
    unknown = sorted(set(d) - names)
    if unknown:
        raise TypeError(f"{cls.__name__}: no field {unknown[0]!r}")
    return dict(d)
