"""What a measured process is to cpulab: a job (what to run, how to read what it left
behind), the executor protocol that runs it (executor.py), what the executor saw of the
process (Finished) and what the job made of it (Outcome).  HarnessJob is the job of a
kernel's harness (native/harness.c): its command line and its one JSON line read back."""
from __future__ import annotations

import json
import signal
from dataclasses import dataclass, field
from typing import Protocol

from cpulab.model import Status


@dataclass
class Finished:
    """What an executor saw of one process, from fork to reap."""
    returncode: int  # negative: killed by that signal
    stdout: str
    stderr: str
    wall_s: float
    user_s: float
    sys_s: float
    max_rss_kb: int
    voluntary_switches: int
    involuntary_switches: int
    timed_out: bool = False


@dataclass
class Outcome:
    status: Status
    error: str = ""
    data: dict = field(default_factory=dict)  # what the job read from the process when status is ok
    layout_pad: int = 0
    process: Finished | None = None


class Job(Protocol):
    timeout: float
    env: dict[str, str]

    def argv(self) -> list[str]: ...
    def outcome(self, done: Finished) -> Outcome: ...


class Executor(Protocol):
    def execute(self, job: Job) -> Outcome: ...
    def execute_group(self, jobs: list["HarnessJob"], orders: list[list[int]]) -> list[Outcome]: ...


@dataclass
class HarnessJob:
    """One run of an artifact's harness (native/harness.c): samples of its kernel at one
    parameter point, or with calibrate_only the timer, TSC rate and core/TSC ratio."""
    artifact_path: str
    params: dict[str, str] = field(default_factory=dict)
    samples: int = 5
    min_sample_time: float = 0.010
    warmup: float = 0.020
    timer: str = "auto"
    timeout: float = 300.0
    env: dict[str, str] = field(default_factory=dict)
    calibrate_only: bool = False
    emulator: tuple[str, ...] = ()  # e.g. ("/usr/bin/qemu-arm",) for a cross artifact (emulation.py)
    profile_code: float = 0.0  # seconds of sampled profile after the samples (explain)
    turns: bool = False  # samples in turns with the other members of a group (execute_group)
    tsc_hz: float | None = None  # the run's TSC rate: the harness then skips its 30 ms spin to measure it
    reps: int | None = None  # repetitions per sample, from an earlier process: no calibration
    verified: bool = False  # an earlier process of this executable passed the known-answer test here
    rewarm_calls: int = 1  # turns: whole calls at least re-warmed after another member (0: io-bound)
    events: str = ""  # named counters around each sample (machine/events.spec), "": none

    def argv(self) -> list[str]:
        args = [*self.emulator, self.artifact_path, "--timer", self.timer]
        if self.calibrate_only:
            return args + ["--calibrate-only"]
        if self.turns:
            args += ["--turns", "--rewarm-calls", str(self.rewarm_calls)]
        if self.tsc_hz:
            args += ["--tsc-hz", repr(float(self.tsc_hz))]
        if self.reps:
            args += ["--reps", str(self.reps)]
        if self.verified:
            args.append("--verified")
        if self.events:
            args += ["--events", self.events]
        if self.profile_code:
            args += ["--profile-code", repr(self.profile_code)]
        args += ["--samples", str(self.samples), "--min-sample-time", repr(self.min_sample_time),
                 "--warmup", repr(self.warmup)]
        for k, v in self.params.items():
            args += ["--param", f"{k}={v}"]
        return args

    def outcome(self, done: Finished) -> Outcome:
        out = parse_harness_output(done)
        if self.emulator and out.status == Status.OK:
            # Stored with the result's notes, so every view can flag it and no verdict mixes it with native.
            out.data.setdefault("notes", {})["emulated"] = 1
        return out


def parse_harness_output(done: Finished) -> Outcome:
    """The harness prints one JSON object; signals, timeouts and garbage are failures."""
    if done.timed_out:
        return Outcome(Status.TIMEOUT, f"no result within {done.wall_s:.0f}s")
    if done.returncode < 0:
        try:
            name = signal.Signals(-done.returncode).name
        except ValueError:
            name = f"signal {-done.returncode}"
        detail = done.stderr.strip()[:200]
        return Outcome(Status.CRASH, f"killed by {name}" + (f": {detail}" if detail else ""))
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    try:
        data = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        detail = (done.stderr.strip() or done.stdout.strip())[:200]
        return Outcome(Status.ERROR, f"exit status {done.returncode}, no result" + (f": {detail}" if detail else ""))
    status = data.get("status", "error")
    if status == "ok" and done.returncode == 0:
        if data.get("event_errors"):  # said once per result, in its notes
            data["notes"] = {**data.get("notes", {}), "events_unavailable": data["event_errors"]}
        return Outcome(Status.OK, data=data)
    try:
        st = Status(status) if status != "ok" else Status.ERROR
    except ValueError:  # e.g. the harness's "usage"
        st = Status.ERROR
    return Outcome(st, data.get("error") or f"exit status {done.returncode}")
