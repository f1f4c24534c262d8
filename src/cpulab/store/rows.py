"""The store's rows as typed values: what its read methods return (a run, the list of runs,
a build's artifact; analyses are model.Analysis, and results, samples and variants
record.py's).  A run's record is read through RunRecord.of_stored, so runs
of earlier versions read like new ones; a run whose owner is gone reads as interrupted."""
from __future__ import annotations

import json
import os
import socket
from dataclasses import asdict, dataclass
from pathlib import Path

from cpulab.spec.record import RunRecord


@dataclass(frozen=True)
class RunListing:
    """One line of `cpulab runs`: a run, where its code came from and how many results it has."""
    id: int
    started: float
    finished: float | None
    status: str  # running | done | interrupted | failed (a running one whose owner is gone: interrupted)
    machine_id: str
    parent: int | None  # the cluster run it is one machine's part of
    machine: str  # its worker's name in a cluster run
    label: str
    origin: dict  # the source's commit, dirty, commit time (plan/origin.py)
    results: int
    imported: str  # what it was imported from ('' measured by this cpulab)

    @classmethod
    def of_row(cls, row) -> "RunListing":
        d = dict(row)
        return cls(d["id"], d["started"], d["finished"], shown_status(d), d["machine_id"], d["parent"], d["machine"],
                   d["label"], json.loads(d["origin"]), d["results"], d["imported"])

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class StoredArtifact:
    """A build as stored: where its executable was, its bytes' hash and the commands that
    built it (compile.artifacts.Artifact, from_dict(to_dict()), is the build itself)."""
    hash: str
    code_hash: str
    path: str
    size_bytes: int
    compiler_version: str
    commands: list[list[str]]
    placements: list  # stores before placements were drawn per round kept their pads here
    placeable: bool

    @classmethod
    def of_row(cls, row) -> "StoredArtifact":
        d = dict(row)
        return cls(d["hash"], d["code_hash"], d["path"], d["size_bytes"], d["compiler_version"],
                   json.loads(d["commands"]), json.loads(d["placements"]), bool(d["placeable"]))

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class StoredRun:
    """A run as stored: what it was asked (its record), where and how it ran."""
    id: int
    started: float
    finished: float | None
    status: str
    machine_id: str
    parent: int | None
    machine: str
    label: str
    origin: dict
    record: RunRecord
    fingerprint: dict  # its machine's (machine.fingerprint)
    conditions: dict  # governor, load, ... and the time split (time_split.py)
    timing: dict  # timer, tsc_hz, core_per_tsc at the start
    argv: list[str]
    imported: str  # what it was imported from: "cpulab" (a run file), "TOOL:DIGEST"; '' measured by this cpulab

    @classmethod
    def of_row(cls, row) -> "StoredRun":
        d = dict(row)
        j = {k: json.loads(d[k]) for k in ("plan", "conditions", "timing", "argv", "fingerprint", "origin")}
        return cls(d["id"], d["started"], d["finished"], shown_status(d), d["machine_id"], d["parent"], d["machine"],
                   d["label"], j["origin"], RunRecord.of_stored(j["plan"]), j["fingerprint"],
                   j["conditions"], j["timing"], j["argv"], d["imported"])


def _boot_id() -> str:
    """This boot's random id: a pid names one process only within one boot."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _process_started(pid: int) -> int | None:
    """When process pid started (clock ticks after boot), None if there is no such process.
    With the pid it names one process: a reused pid has a later start."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Field 22; the command name (field 2) may hold spaces, so count after its ')'.
    return int(stat[stat.rindex(")") + 2:].split()[19])


def owner() -> dict:
    pid = os.getpid()
    return {"owner_pid": pid, "owner_started": _process_started(pid), "owner_boot_id": _boot_id(),
            "owner_host": socket.gethostname()}


def _owner_gone(run: dict) -> bool:
    """Whether the process that owns a run is known to have ended.  Unknown owners (runs
    from before migration 2) and owners on another host are not known to be gone."""
    if run.get("owner_pid") is None or run.get("owner_host") != socket.gethostname():
        return False
    if run.get("owner_boot_id") and run["owner_boot_id"] != _boot_id():
        return True  # the machine restarted since
    started = _process_started(run["owner_pid"])
    return started is None or (run.get("owner_started") is not None and started != run["owner_started"])


def shown_status(run: dict) -> str:
    """A run's status as it stands: 'running' whose owner is gone is 'interrupted'."""
    return "interrupted" if run["status"] == "running" and _owner_gone(run) else run["status"]
