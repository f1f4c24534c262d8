"""Running whole processes: a program's run or any command, under the launcher.

One timed run is a ProcessJob: the executor (execute.LocalExecutor, pinned, own session,
killed at its timeout) runs native/launch.c, which spawns the command and reports its
wall time and wait4 rusage.  The launcher exists because Python's subprocess spends
about a millisecond between fork and exec, 20% of a 5 ms command; the launcher's
posix_spawn costs what hyperfine's does.

Each result's samples are its processes: one sample per process, whose "ns" is the
process's wall time and whose work is one run, so the summary reports runs/s (higher is
faster) and real/user/sys per run.  Before any timing every command runs once with its
output checked; one that fails the check is never timed (schedule/process_rounds.py
times them in rounds).
"""
from __future__ import annotations

import json
import os
import signal
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from cpulab.compile import artifacts
from cpulab.machine import events
from cpulab.measure.execute.executor import Finished, LocalExecutor, Outcome
from cpulab.model import Status
from cpulab.plan.programs import Check

LAUNCH_SOURCE = artifacts.NATIVE_DIR / "launch.c"
LAUNCH_MARK = "cpulab-launch "
UNIT = "runs"  # workloads.UNITS: one run of the command is one unit of work


def launcher() -> str:
    return str(artifacts.build_tool(LAUNCH_SOURCE, headers=(artifacts.NATIVE_DIR / "coreclock.h",
                                                            artifacts.NATIVE_DIR / "events.h")))


@dataclass
class ProcessJob:
    """One run of a command under the launcher.  With capture_stdout the command's
    output is kept (for the check); timed runs discard it, as hyperfine does."""
    command: list[str]
    launcher: str
    check: Check | None = Check()
    capture_stdout: bool = False
    timeout: float = 300.0
    env: dict[str, str] = field(default_factory=dict)
    events: str = ""  # named counters of the command alone (machine/events.spec), "": none

    def argv(self) -> list[str]:
        return [self.launcher, *([] if self.capture_stdout else ["--null-stdout"]),
                *(["--events", self.events] if self.events else []), *self.command]

    def outcome(self, done: Finished) -> Outcome:
        if done.timed_out:
            return Outcome(Status.TIMEOUT, f"no exit within {done.wall_s:.0f}s")
        head, _, line = done.stderr.rstrip("\n").rpartition("\n")
        if not line.startswith(LAUNCH_MARK):
            return Outcome(Status.ERROR, f"launcher said nothing (exit {done.returncode}): {done.stderr[-200:]}")
        data = json.loads(line[len(LAUNCH_MARK):])
        if "spawn_errno" in data:
            return Outcome(Status.ERROR, f"cannot execute {self.command[0]}: {os.strerror(data['spawn_errno'])}")
        if "wall_s" not in data:
            return Outcome(Status.ERROR, f"launcher failed: {line}")
        if data["signal"]:
            detail = head.strip()[-200:]
            return Outcome(Status.CRASH, f"killed by {_signal_name(data['signal'])}" + (f": {detail}" if detail else ""),
                           data=data)
        why = self.check.failure(data["exit"], done.stdout if self.capture_stdout else None) if self.check else ""
        if why:
            detail = head.strip()[-200:]
            return Outcome(Status.VERIFY_FAILED, why + (f"; stderr: {detail}" if detail else ""), data=data)
        return Outcome(Status.OK, data=data)


def _signal_name(n: int) -> str:
    try:
        return signal.Signals(n).name
    except ValueError:
        return f"signal {n}"


def process_record(data: dict) -> dict:
    """A launcher report as the store's process: one sample, one unit of work.  Its
    cycles are the counters' where the kernel allows them (the command's own, user
    space), else its TSC ticks at the core clock read around it (x86: launch.c)."""
    ratios = [data.get("ratio_before"), data.get("ratio_after")]
    cycles = data.get("cycles")
    if cycles is None and data.get("tsc_ticks") and all(ratios):
        cycles = data["tsc_ticks"] * (ratios[0] + ratios[1]) / 2
    return {"ns": [data["wall_s"] * 1e9], "cycles": [cycles], "instructions": [data.get("instructions")],
            "work": 1, "reps": 1, "user_s": [data["user_s"]], "sys_s": [data["sys_s"]], "timer": "wait4",
            "notes": {"events_unavailable": data["event_errors"]} if data.get("event_errors") else {},
            "max_rss_kb": [data.get("max_rss_kb")], "page_faults": [data.get("page_faults")],
            **({"events": {k: [v] for k, v in data["events"].items()}} if data.get("events") else {}),
            **({"ratio_before": [ratios[0]], "ratio_after": [ratios[1]]} if all(ratios) else {})}


def events_here(names: list[str]) -> dict[str, str]:
    """Which of these events count on this machine: name -> "" where one opens, else why
    not (the launcher opens each around /bin/true, as it does around a program)."""
    out, known = {}, []
    for name in names:
        try:
            known += events.resolve([name])
        except events.EventError as e:
            out[name] = str(e).partition(": ")[2]
    if known:
        done = LocalExecutor().execute(ProcessJob(["true"], launcher(), Check(), events=events.spec(known)))
        errors = (done.data or {}).get("event_errors", {})
        out.update({e.name: errors.get(e.name, "") for e in known})
    return out


PROCESS_NOTES = ("max_rss_kb", "voluntary_switches", "involuntary_switches")


def process_notes(reports: list[dict]) -> dict:
    """Medians over a result's processes of what wait4 said besides time."""
    return {f"median_{k}": statistics.median(r[k] for r in reports) for k in PROCESS_NOTES} if reports else {}


# ---- page cache --------------------------------------------------------------------

def evict(files: list[str], drop_caches: bool = True) -> str:
    """Drop files from the page cache before a cold run; returns the method used:
    drop_caches (all clean pages, needs root) or posix_fadvise DONTNEED (these files)."""
    if drop_caches and os.geteuid() == 0:
        try:
            os.sync()
            Path("/proc/sys/vm/drop_caches").write_text("1\n")
            return "drop_caches"
        except OSError:
            pass  # a container's read-only /proc: fall back to the per-file advice
    for f in files:
        fd = os.open(f, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    return "posix_fadvise"
