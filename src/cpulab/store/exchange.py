"""A run as one file, for offline machines and history: `cpulab export --format cpulab`
and `cpulab import`.

The file holds the run (and, for a cluster run, each machine's run) with its
fingerprint, conditions, timing, variants, the artifacts' exact command lines and every
raw sample.  Import trusts nothing: the whole document is checked against a strict
schema (types, finite positive numbers, known statuses, references between its parts)
before one transaction writes it, so a broken or hostile file writes nothing.  A run is
known by its machine id, start time and worker name: importing it twice adds it once.
"""
from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, field_validator, model_validator

from cpulab import paths
from cpulab.spec import record
from cpulab.spec.signals import SIGNALS
from cpulab.model import Status
from cpulab.params import INT64_MAX  # SQLite's INTEGER too
from cpulab.store.db import Store

FORMAT = "cpulab-run"
VERSION = 2  # 2: a sample's process is `process` (version 1 called it `invocation`; still read)
READS = (1, 2)
MAX_FILE_BYTES = 1 << 30  # a full seeds run is a few MB; more than this is not a run
RUN_STATUSES = ("running", "done", "interrupted", "failed")
LAST_TIME = 253402300799.0  # 9999-12-31 23:59:59 UTC: the last second the time functions show

Name = Annotated[str, Field(min_length=1, max_length=200)]
Text = Annotated[str, Field(max_length=100_000)]
Finite = Annotated[float, Field(allow_inf_nan=False)]
Positive = Annotated[float, Field(gt=0, allow_inf_nan=False)]
Count = Annotated[int, Field(ge=0, le=INT64_MAX)]
Timestamp = Annotated[float, Field(gt=0, le=LAST_TIME, allow_inf_nan=False)]
# A sample's time: from a picosecond to a year.  Outside that it is no measurement, and its
# rate (work / time) or inverse is no finite number.
SampleNs = Annotated[float, Field(ge=1e-3, le=3.2e16, allow_inf_nan=False)]
Work = Annotated[float, Field(gt=0, le=float(INT64_MAX), allow_inf_nan=False)]


class RunFileError(Exception):
    """The file is not a cpulab run this cpulab can import; the message names where."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class _Typed(BaseModel):
    """A part of a run that later versions may add keys to: what this cpulab reads of it,
    typed, with a default for what older files lack; other keys are dropped."""
    model_config = ConfigDict(extra="ignore", strict=True)


class CacheRecord(_Typed):  # machine.caches(): one cache of CPU 0
    level: Annotated[int, Field(ge=0, le=9)]
    type: Name
    size_bytes: Annotated[int, Field(gt=0, le=INT64_MAX)]
    ways: Count | None = None
    line_bytes: Count | None = None
    shared_cpus: Text | None = None
    name: Text = ""


class TlbRecord(_Typed):  # machine/tlb.py tlb()
    level: Annotated[int, Field(ge=0, le=9)]
    type: Name
    page_bytes: Annotated[int, Field(gt=0, le=INT64_MAX)]
    entries: Annotated[int, Field(gt=0, le=INT64_MAX)]
    ways: Count | None = None
    reach_bytes: Annotated[int, Field(gt=0, le=INT64_MAX)]
    name: Text = ""
    source: Text = ""


class TlbsRecord(_Typed):
    tlbs: list[TlbRecord] = []
    source: Text = ""


class FingerprintRecord(_Typed):  # machine.fingerprint(), and foreign.fingerprint_of
    hostname: Text = ""
    arch: Text = ""
    cpu_model: Text = "unknown"
    cpu_family: Text = ""
    cpu_model_id: Text = ""
    cpus: Annotated[int, Field(ge=0, le=1 << 20)] | None = None
    flags_hash: Text = ""
    caches: list[CacheRecord] = []
    tlbs: TlbsRecord = TlbsRecord()
    kernel: Text = ""
    os: Text = ""
    memory_bytes: Count | None = None
    hypervisor: bool | None = None
    tsc_hz: Positive | None = None
    core_per_tsc: Positive | None = None
    timer: Text | None = None
    perf_error: Text = ""
    mhz: Positive | None = None
    imported_from: Text | None = None


class VariantRecord(BaseModel):  # plan.toolchain.Variant.as_dict and the compiler that built it
    model_config = ConfigDict(extra="allow", strict=True)  # an imported tool's variant may say more
    name: Name
    compiler_version: Text | None = None
    compiler: Text = ""
    cflags: list[Text] = []
    ldflags: list[Text] = []
    abi_flags: list[Text] = []
    env: dict[Text, Text] = {}


class OriginRecord(_Typed):  # plan/origin.py: the git commit of the code a run measured
    dir: Text = ""
    commit: Text = ""
    dirty: bool = False
    commit_time: Count | None = None


class ConditionsRecord(BaseModel):  # machine.conditions(), and what a run adds to them as it goes
    model_config = ConfigDict(extra="allow", strict=True)  # shown as they are: governor, load, THP, ...
    time_split: dict[Text, dict[Text, Annotated[float, Field(ge=0, allow_inf_nan=False)]]] = {}
    shared_machine: list[Text] = []


class TimingRecord(_Typed):  # a harness --calibrate-only result: the run's timer
    timer: Text | None = None
    tsc_hz: Positive | None = None
    core_per_tsc: Positive | None = None
    perf_error: Text = ""


class SampleRecord(_Strict):
    process: Count
    idx: Count
    ns: SampleNs
    cycles: Finite | None
    instructions: Finite | None
    work: Work
    reps: Annotated[int, Field(ge=1, le=INT64_MAX)]
    user_s: Finite | None
    sys_s: Finite | None
    timer: Name
    tsc_hz: Finite | None
    core_per_tsc: Finite | None
    layout_pad: Count
    # Why the sample is left out of estimates ('' = used); after these fields, one per
    # signal seen around it (spec/signals.py, absent in older runs).
    excluded: Annotated[str, Field(max_length=500)] = ""
    # Where and when it ran (store.PLACED; absent in older runs).
    placement: Count | None = None
    code_offset: Annotated[int, Field(ge=0, lt=4096)] | None = None
    start_ns: Finite | None = None
    turn: Count | None = None
    follows: Annotated[str, Field(max_length=200)] | None = None
    # Named counters read around it (--events), by name; absent where none was asked.
    events: Annotated[dict[Annotated[str, Field(max_length=64)], Finite | None], Field(max_length=16)] | None = None


SampleRecord = create_model("SampleRecord", __base__=SampleRecord,
                            **{s.name: (Finite | None, None) for s in SIGNALS})


class ResultRecord(_Strict):
    experiment: Annotated[str, Field(max_length=200)]
    workload: Name
    variant: Name
    params: dict[Name, Text]
    unit: Name
    status: Name
    error: Text
    artifact_hash: Name | None
    same_as: Annotated[str, Field(max_length=200)]
    notes: dict[str, Any]
    samples: list[SampleRecord]

    @field_validator("status")
    @classmethod
    def known_status(cls, v):
        if v not in set(Status):
            raise ValueError(f"unknown status {v!r}")
        return v


class ArtifactRecord(_Strict):
    hash: Name
    code_hash: Name
    path: Text
    size_bytes: Count
    compiler_version: Text | None
    commands: list[list[Text]]
    placements: list[Count] = []  # pads of the 16 placements of older versions
    placeable: bool = False


class AnalysisRecord(_Strict):
    kind: Name
    key: Text
    data: Any


class ExportedRun(_Strict):
    """One run of a run file, as `export --format cpulab` writes it and `import` checks it
    (its `plan` is the spec.record.RunRecord the run stored)."""
    parent: int | None  # index of the cluster run in this file's runs
    machine: Annotated[str, Field(max_length=200)]
    machine_id: Annotated[str, Field(pattern=r"^[0-9a-f]{1,64}$")]
    fingerprint: FingerprintRecord
    started: Timestamp
    finished: Timestamp | None
    status: Name
    plan: dict[str, Any]
    conditions: ConditionsRecord
    timing: TimingRecord
    argv: list[Text]
    variants: list[VariantRecord]
    artifacts: list[ArtifactRecord]
    results: list[ResultRecord]
    analyses: list[AnalysisRecord]
    label: Annotated[str, Field(max_length=1000)] = ""  # absent in files of schema 4 and before
    origin: OriginRecord = OriginRecord()

    @model_validator(mode="after")
    def consistent(self):
        try:  # the plan as every reader reads it: a record of a known kind, its policy sound
            record.RunRecord.of_stored(self.plan)
        except record.RecordError as e:
            raise ValueError(f"plan: {e}") from None
        try:  # what a file parsed from JSON cannot hold but a parser's Python can (go's NaN B/op)
            json.dumps([self.plan, self.conditions.model_dump(), [r.notes for r in self.results],
                        [a.data for a in self.analyses]], allow_nan=False)
        except ValueError:
            raise ValueError("a value is not a finite number") from None
        if self.status not in RUN_STATUSES:
            raise ValueError(f"status: unknown run status {self.status!r}")
        names = [v.name for v in self.variants]
        if len(set(names)) != len(names):
            raise ValueError("variants: a name appears twice")
        if len({(a.kind, a.key) for a in self.analyses}) != len(self.analyses):
            raise ValueError("analyses: a kind and key appear twice")
        hashes, points = {a.hash for a in self.artifacts}, set()
        for i, r in enumerate(self.results):
            point = (r.experiment, r.workload, r.variant, json.dumps(r.params, sort_keys=True))
            if point in points:
                raise ValueError(f"results.{i}: {r.workload} under {r.variant} at these parameters appears twice")
            points.add(point)
            if r.variant not in names:
                raise ValueError(f"results.{i}.variant: {r.variant!r} is not among the run's variants")
            if r.artifact_hash is not None and r.artifact_hash not in hashes:
                raise ValueError(f"results.{i}.artifact_hash: not among the run's artifacts")
            if len({(s.process, s.idx) for s in r.samples}) != len(r.samples):
                raise ValueError(f"results.{i}.samples: a sample appears twice")
        return self


class DocumentRecord(_Strict):
    format: str
    version: int
    exported: Timestamp
    runs: Annotated[list[ExportedRun], Field(min_length=1)]

    @model_validator(mode="before")
    @classmethod
    def older_words(cls, raw):
        """A version 1 file's samples name their process `invocation`."""
        if isinstance(raw, dict) and raw.get("version") == 1 and isinstance(raw.get("runs"), list):
            for run in raw["runs"]:
                for r in run.get("results", []) if isinstance(run, dict) else ():
                    for smp in r.get("samples", []) if isinstance(r, dict) else ():
                        if isinstance(smp, dict) and "invocation" in smp:
                            smp["process"] = smp.pop("invocation")
        return raw

    @model_validator(mode="after")
    def parents_first(self):
        if self.format != FORMAT:
            raise ValueError(f"format: not a cpulab run file ({self.format!r})")
        if self.version not in READS:
            raise ValueError(f"version: {self.version} (this cpulab reads {', '.join(map(str, READS))})")
        for i, r in enumerate(self.runs):
            if r.parent is not None and not 0 <= r.parent < i:
                raise ValueError(f"runs.{i}.parent: must name an earlier run in the file")
        return self


def export_run(store: Store, run_id: int) -> dict:
    """The run (and its machines' runs, if it ran on a cluster) as one document."""
    ids = [run_id, *store.machine_runs(run_id)]
    return {"format": FORMAT, "version": VERSION, "exported": time.time(),
            "runs": [_run_doc(store, rid, 0 if rid != run_id else None) for rid in ids]}


def _run_doc(store: Store, run_id: int, parent: int | None) -> dict:
    run = store.run(run_id)
    results, hashes = [], []
    for r in store.results(run_id):
        samples = [{k: getattr(s, k) for k in SampleRecord.model_fields} for s in store.samples(r.id)]
        results.append({**{k: getattr(r, k) for k in ResultRecord.model_fields if k != "samples"}, "samples": samples})
        if r.artifact_hash and r.artifact_hash not in hashes:
            hashes.append(r.artifact_hash)
    return {"parent": parent, "machine": run.machine, "machine_id": run.machine_id,
            "fingerprint": run.fingerprint, "started": run.started, "finished": run.finished,
            "status": run.status, "plan": run.record.stored, "conditions": run.conditions, "timing": run.timing,
            "argv": run.argv, "label": run.label, "origin": run.origin, "variants": [v.to_dict() for v in store.variants(run_id)],
            "artifacts": [store.artifact(h).to_dict() for h in hashes], "results": results,
            "analyses": [a.to_dict() for a in store.analyses(run_id)]}


def read_document(path: Path) -> DocumentRecord:
    """Parse and check a run file; RunFileError with one line naming the file and where."""
    raw = read_json(path)
    if not isinstance(raw, dict):
        raise RunFileError(f"{path}: not a cpulab run file (want a JSON object)")
    return validated(DocumentRecord, raw, path)


def read_json(path: Path):
    """A JSON document of at most MAX_FILE_BYTES (no NaN or infinities), or RunFileError."""
    try:
        raw = json.loads(paths.read_limited(path, MAX_FILE_BYTES).decode("utf-8"), parse_constant=_reject_constant,
                         parse_float=_finite)
    except paths.TooLarge as e:
        raise RunFileError(str(e)) from None
    except OSError as e:
        raise RunFileError(f"{path}: {e.strerror or e}") from None
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise RunFileError(f"{path}: not JSON ({str(e).splitlines()[0][:200]})") from None
    return raw


def validated(model: type[BaseModel], raw, path: Path):
    """raw checked against a pydantic model, or RunFileError naming the first field at fault."""
    try:
        return model.model_validate(raw)
    except ValidationError as e:
        loc, msg = first_error(e)
        raise RunFileError(f"{path}: {'.'.join(loc) or 'document'}: {msg}") from None
    except RecursionError:
        raise RunFileError(f"{path}: nested too deeply") from None


def first_error(e: ValidationError) -> tuple[list[str], str]:
    """Where the first fault of a document is (its path of keys and positions) and what it is."""
    err = e.errors()[0]
    return [str(x) for x in err["loc"]], err["msg"].removeprefix("Value error, ")[:200]


def _reject_constant(name: str):
    raise ValueError(f"{name} is not a number cpulab stores")


def _finite(text: str) -> float:
    """A JSON number as a float; 1e400 would be infinity."""
    v = float(text)
    if not math.isfinite(v):
        raise ValueError(f"{text[:40]} is out of a float's range")
    return v


def import_document(store: Store, doc: DocumentRecord) -> list[tuple[int, bool]]:
    """Write the runs in one transaction; (run id, True if new) for each, in file order."""
    return store.import_runs([r.model_dump() for r in doc.runs], "cpulab")
