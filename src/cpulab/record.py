"""What a run was asked: its RunRecord, made once when the run starts, stored with it, and
read back by every stage after (the schedule's looks, summarise, the views, `--json`);
and each of its results as stored (StoredResult), before summarising.

A record has a kind (KINDS) and the spec its kind measures: a plan's settings and
experiments (Plan.as_dict), `cpulab time`'s commands, a probe's body, an imported tool's
results.  `stored` is the spec as written, which the `--json` document carries unchanged as
"plan".  Every record is built by RunRecord.make, written and read alike: a spec that
compares anything must say how (its method); nothing falls back to a default quietly.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from cpulab.policy import METHODS, METRICS, PRECISION, DecisionPolicy

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


@dataclass(frozen=True)
class RunRecord:
    kind: str
    experiments: list[RecordedExperiment]
    policy: DecisionPolicy  # the run's one decision policy: its looks, its verdicts, every view's legend
    against: str | None  # the variant every other is compared with across experiments
    commands: dict[str, str]  # `cpulab time`'s: each label's command line
    stored: dict = field(repr=False)

    @classmethod
    def make(cls, kind: str, spec: dict) -> "RunRecord":
        """The record of a run of this kind asked `spec`; raises RecordError naming what
        is missing or wrong."""
        if kind not in KINDS:
            raise RecordError(f"run record: kind {kind!r} is not one of {', '.join(KINDS)}")
        stored = {**spec, "kind": kind}
        try:
            experiments = [RecordedExperiment(e["name"], list(e.get("workloads", [])), e["baseline"],
                                              e.get("title", ""), e.get("tag", ""), e.get("intro", ""))
                           for e in stored.get("experiments", [])]
        except KeyError as e:
            raise RecordError(f"run record: an experiment has no {e.args[0]}") from None
        return cls(kind, experiments, _policy(stored) if experiments else DecisionPolicy(), stored.get("against"),
                   dict(stored.get("commands", {})), stored)

    @classmethod
    def of_stored(cls, d: dict) -> "RunRecord":
        """A record as a run stored it, one of an earlier version brought up to date first
        (upgraded)."""
        d = upgraded(d)
        return cls.make(d["kind"], d)

    def compared_by(self, method: str | None) -> DecisionPolicy:
        """The policy with another method (`cpulab compare --method`); None: as run."""
        return self.policy if method is None else _policy({**self.stored, "method": method})


def _policy(d: dict) -> DecisionPolicy:
    if d.get("method") not in METHODS:
        raise RecordError(f"run record: method {d.get('method')!r} is not one of {', '.join(METHODS)}")
    if d.get("metric", "time") not in METRICS:
        raise RecordError(f"run record: metric {d.get('metric')!r} is not one of {', '.join(METRICS)}")
    return DecisionPolicy.of_settings(float(d.get("budget") or 0.0), float(d.get("precision") or PRECISION),
                                      d["method"], d.get("metric", "time"))


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
