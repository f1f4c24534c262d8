"""Timing whole processes: a program's run or any command, under the launcher.

One timed run is a ProcessJob: the executor (execute.LocalExecutor, pinned, own session,
killed at its timeout) runs native/launch.c, which spawns the command and reports its
wall time and wait4 rusage.  The launcher exists because Python's subprocess spends
about a millisecond between fork and exec, 20% of a 5 ms command; the launcher's
posix_spawn costs what hyperfine's does.

Each result's samples are its processes: one sample per process, whose "ns" is the
process's wall time and whose work is one run, so the summary reports runs/s (higher is
faster) and real/user/sys per run.  Before any timing every command runs once with its
output checked; one that fails the check is never timed.  Then warm-up runs, then the
one rounds loop (rounds.measure_rounds), a point's commands back to back in random order.
"""
from __future__ import annotations

import contextlib
import json
import os
import random
import shlex
import signal
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from cpulab.compile import artifacts
from cpulab.compile.relink import Relink
from cpulab.measure.execute.executor import Executor, Finished, LocalExecutor, Outcome, on_cpu
from cpulab.measure.schedule.rounds import QuietProgress, Schedule, measure_rounds
from cpulab.model import Status
from cpulab.plan.programs import Check
from cpulab.store.db import Store

LAUNCH_SOURCE = artifacts.NATIVE_DIR / "launch.c"
LAUNCH_MARK = "cpulab-launch "
UNIT = "runs"  # workloads.UNITS: one run of the command is one unit of work


def launcher() -> str:
    return str(artifacts.build_tool(LAUNCH_SOURCE, headers=(artifacts.NATIVE_DIR / "coreclock.h",)))


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

    def argv(self) -> list[str]:
        return [self.launcher, *([] if self.capture_stdout else ["--null-stdout"]), *self.command]

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
            "notes": {}, "max_rss_kb": [data.get("max_rss_kb")], "page_faults": [data.get("page_faults")],
            **({"ratio_before": [ratios[0]], "ratio_after": [ratios[1]]} if all(ratios) else {})}


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


# ---- interleaved rounds ------------------------------------------------------------

@dataclass
class ProcessTarget:
    """One command at one parameter point, stored as one result.  point: the comparison
    it belongs to, (experiment, ...): its rounds and looks are that point's."""
    result_id: int
    label: str
    point: tuple
    command: list[str]
    check: Check | None = Check()
    prepare: list[list[str]] = field(default_factory=list)  # before each run, untimed
    cold_files: list[str] = field(default_factory=list)  # evicted before each run when cold
    env: dict[str, str] = field(default_factory=dict)
    live: bool = True
    evicted_with: str = ""  # how the page cache was emptied before its cold runs
    reports: list[dict] = field(default_factory=list)
    rounds: int = 0  # rounds it has been timed in (one process each): its next process's number
    # A program whose link cpulab can run again (compile/relink.py): each round runs a layout
    # of its own; else why it keeps one ("" for a command, which has no build).
    relink: Relink | None = None
    one_layout: str = ""


@dataclass
class Rounds:
    """How whole processes are timed: `warmup` untimed rounds, then rounds as the
    schedule says (rounds.Schedule: the first look, budget and looks)."""
    warmup: int = 1
    timeout: float = 300.0
    cold: bool = False


def _run(executor: Executor, t: ProcessTarget, argv: list[str], check: Check | None, capture: bool,
         timeout: float, env: dict[str, str] | None = None) -> Outcome:
    return executor.execute(ProcessJob(argv, launcher(), check, capture, timeout, t.env if env is None else env))


def _fail(store: Store, t: ProcessTarget, status: str, error: str) -> None:
    t.live = False
    store.set_status(t.result_id, status, error)


def _prepare_and_run(store: Store, executor: Executor, t: ProcessTarget, how: Rounds, evict,
                     command: list[str] | None = None, env: dict[str, str] | None = None) -> Outcome | None:
    """Prepare commands, eviction, then one run of the command (or of `command` with `env`:
    the same in another layout); None if preparing failed."""
    for p in t.prepare:
        out = _run(executor, t, p, Check(), False, how.timeout)
        if out.status != Status.OK:
            _fail(store, t, Status.SETUP_FAILED, f"prepare {shlex.join(p)}: {out.status}: {out.error}")
            return None
    if how.cold and t.cold_files:
        t.evicted_with = evict(t.cold_files)
    return _run(executor, t, command or t.command, t.check, False, how.timeout, env)


HEAP_PAD_SOURCE = artifacts.NATIVE_DIR / "heap_pad.c"


def _layouts(store: Store, order: list[ProcessTarget], rng: random.Random, executor: Executor) -> dict[int, tuple]:
    """The layout each relinked program of a round runs, drawn and linked before any of the
    round's processes, on a CPU the round does not measure on where there is one (a link
    of hashdeep: README), with its heap moved by a drawn pad (native/heap_pad.c, a
    dynamic program's): id(target) -> (layout, its command, its environment).  A layout
    that cannot be linked fails its program alone."""
    todo = [t for t in order if t.relink is not None and t.live]
    if not todo:
        return {}
    heap_pad = str(artifacts.build_tool(HEAP_PAD_SOURCE, ("-O2", "-shared", "-fPIC")))
    others = sorted(os.sched_getaffinity(0) - {getattr(executor, "cpu", -1)})
    out = {}
    with on_cpu(others[0]) if others else contextlib.nullcontext():
        for t in todo:
            i = rng.getrandbits(31)
            try:
                exe = t.relink.place(i)
            except artifacts.BuildError as e:
                _fail(store, t, Status.BUILD_FAILED, f"linking layout {i}: {e}")
                continue
            preload = " ".join(filter(None, [heap_pad, t.env.get("LD_PRELOAD", "")]))
            out[id(t)] = (i, [exe if w == t.relink.exe else w for w in t.command],
                          {**t.env, "LD_PRELOAD": preload, "CPULAB_HEAP_PAD": str(16 * rng.randrange(256))})
    return out


def measure(store: Store, targets: list[ProcessTarget], how: Rounds, schedule: Schedule,
            executor: Executor | None = None, progress=None, rng: random.Random | None = None, evict=evict) -> None:
    """Check each target once (output kept), warm it up, then time it in the one rounds
    loop (rounds.measure_rounds): in each round a point's commands run back to back in
    random order, so A and B are timed seconds apart at most.  `evict(files)` empties
    the page cache where the processes run, before each cold run."""
    executor = executor or LocalExecutor()
    rng = rng or random.Random()
    progress = progress or QuietProgress()
    live = [t for t in targets if t.live]
    progress.phase("check", len(live))
    for t in live:
        out = _run(executor, t, t.command, t.check, True, how.timeout)
        if out.status != Status.OK:
            _fail(store, t, out.status, out.error)
        progress.advance(f"{t.label}: {out.status}")
    live = [t for t in live if t.live]
    progress.phase("warm-up", len(live) * how.warmup)
    for _ in range(how.warmup):
        for t in rng.sample(live, len(live)):
            if t.live:
                out = _prepare_and_run(store, executor, t, how, evict)
                if out is not None and out.status != Status.OK:
                    _fail(store, t, out.status, out.error)
                progress.advance(f"warm-up  {t.label}")

    def run_round(k: tuple, order: list[ProcessTarget]) -> float:
        seconds, layouts = 0.0, _layouts(store, order, rng, executor)
        for t in order:
            if not t.live:  # its layout could not be linked
                continue
            layout, command, env = layouts.get(id(t), (None, None, None))
            out = _prepare_and_run(store, executor, t, how, evict, command, env)
            if out is None:
                continue
            seconds += out.process.wall_s if out.process else 0.0
            if out.status != Status.OK:
                _fail(store, t, out.status, out.error)
            else:
                store.add_process(t.result_id, t.rounds, process_record(out.data), out.layout_pad, placement=layout)
                t.reports.append(out.data)
                t.rounds += 1
            progress.advance(f"round {t.rounds}  {t.label}" + (f"  {out.status}: {out.error[:60]}"
                                                              if out.status != Status.OK else ""))
        return seconds

    points: dict[tuple, list[ProcessTarget]] = {}
    for t in targets:
        if t.live:
            points.setdefault(t.point, []).append(t)
    measure_rounds(store, points, schedule, run_round, progress, rng)
    for t in targets:
        if t.reports:
            store.set_notes(t.result_id, {**process_notes(t.reports),
                                          **({"cache": f"cold ({t.evicted_with})"} if t.evicted_with else {}),
                                          **({"one_layout": t.one_layout} if t.one_layout else {})})


# ---- cpulab time -------------------------------------------------------------------

