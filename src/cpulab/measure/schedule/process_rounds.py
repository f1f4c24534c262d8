"""Whole processes timed in rounds: a plan's programs and `cpulab time`'s commands.

Each target (one command at one parameter point) is checked once with its output kept,
warmed up, then timed in the one rounds loop (rounds.measure_rounds): in each round a
point's commands run back to back in random order, each a process of its own under the
launcher (execute/processes.py), a relinked program in a layout of its own.
"""
from __future__ import annotations

import contextlib
import os
import random
import shlex
from dataclasses import dataclass, field

from cpulab.compile import artifacts
from cpulab.compile.relink import Relink
from cpulab.measure.execute.executor import Executor, LocalExecutor, Outcome, on_cpu
from cpulab.measure.execute.processes import ProcessJob, evict, launcher, process_notes, process_record
from cpulab.measure.schedule.rounds import QuietProgress, measure_rounds
from cpulab.model import Status
from cpulab.plan.programs import Check
from cpulab.spec.schedule import Schedule
from cpulab.store.db import Store


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
    events: str = ""  # named counters of each timed run (machine/events.spec), "": none


def _run(executor: Executor, t: ProcessTarget, argv: list[str], check: Check | None, capture: bool,
         timeout: float, env: dict[str, str] | None = None, events: str = "") -> Outcome:
    return executor.execute(ProcessJob(argv, launcher(), check, capture, timeout, t.env if env is None else env,
                                       events))


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
    return _run(executor, t, command or t.command, t.check, False, how.timeout, env, how.events)


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
