"""The kernels' rounds: each round of a point runs its targets' processes, in turns or
back to back, and stores what they measured (rounds.measure_rounds calls `round`).

With the method "turns" a point's targets run as one group: processes alive together on
one CPU taking their samples in turns, two in a row each, in a fresh random order each
turn, so sample j of a variant and of its baseline are milliseconds apart and share the
host's state.  Otherwise they run back to back in the round's random order.  A target
whose point cannot be prepared, whose placement cannot be linked or whose process fails
is recorded with its reason and dropped from later rounds while the others go on.
"""
from __future__ import annotations

import contextlib
import math
import random
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field

from cpulab import workloads
from cpulab.compile.artifacts import BuildError
from cpulab.measure.execute.executor import Executor, HarnessJob, LocalExecutor, on_cpu
from cpulab.measure.schedule.auto_check import checked
from cpulab.measure.schedule.rounds import Looks, Progress, measure_rounds, turn_order, turns_in_pairs
from cpulab.measure.schedule.session import Stopped
from cpulab.measure.schedule.site import Site
from cpulab.measure.schedule.targets import Target
from cpulab.model import Status, params_key
from cpulab.plan.plan import Plan
from cpulab.spec import signals
from cpulab.spec.schedule import Schedule
from cpulab.store.db import Store
from cpulab.time_split import TimeSplit


def points_of(live: list[Target]) -> dict[tuple, list[Target]]:
    """The live targets grouped by comparison point: (experiment, workload, params)."""
    points: dict[tuple, list[Target]] = defaultdict(list)
    for t in live:
        points[(t.experiment, t.workload, params_key(t.params))].append(t)
    return points


@dataclass
class KernelRounds:
    """A run's kernel rounds, wherever they run (this CPU, a lane's): what every round
    reads.  tsc_hz: the run's TSC rate, handed to native processes so that none spins
    30 ms to measure it again."""
    plan: Plan
    site: Site
    split: TimeSplit
    tsc_hz: float | None
    points: dict[tuple, list[Target]]
    events: str = ""  # named counters around each sample (machine/events.spec), "": none
    prepared: dict[int, dict[str, str]] = field(default_factory=dict)  # result id -> its parameters made ready

    def measure(self, experiments: set[str], executor: Executor, store: Store, rng: random.Random,
                progress: Progress, schedule: Schedule, stop: threading.Event | None = None,
                looks: Looks | None = None) -> bool:
        """The experiments' points, in rounds and looks as the schedule says, on the
        executor; given `looks`, one look, and whether another is due (measure_rounds)."""
        def one(k: tuple, order: list[Target]) -> float:
            return self.round(k, order, executor, store, rng, progress, stop)
        return measure_rounds(store, {k: ts for k, ts in self.points.items() if k[0] in experiments}, schedule,
                              one, progress, rng, stop, looks, name=" ".join(["measure", *sorted(experiments)]))

    def round(self, k: tuple, order: list[Target], executor: Executor, store: Store, rng: random.Random,
              progress: Progress, stop: threading.Event | None) -> float:
        """One round of the point k: its targets' processes run and stored; the seconds it took."""
        t0, waited0 = time.perf_counter(), getattr(executor, "waited_s", 0.0)
        # A placement not linked yet is linked on this lane's CPU, which is idle until the
        # round starts (the other may be measuring)
        with on_cpu(executor.cpu) if isinstance(executor, LocalExecutor) else contextlib.nullcontext():
            jobs = [(t, job) for t in order if (job := self._job(store, t, progress))]
        orders: list[list[tuple[int, str]] | None] = [None] * len(jobs)
        if self.plan.settings.method == "turns" and len(jobs) > 1:
            for _, job in jobs:
                job.turns = True
            cycles = turns_in_pairs(len(jobs), self.plan.samples_of(k[0]), rng)
            outs = executor.execute_group([job for _, job in jobs], cycles)
            seconds = max((o.process.wall_s for o in outs if o.process), default=0.0)
            orders = turn_order(cycles, [t.variant for t, _ in jobs])
        else:
            outs = [executor.execute(job) for _, job in jobs]
            seconds = sum(o.process.wall_s for o in outs if o.process)
        if stop is not None and stop.is_set():  # stopped under it: its processes were killed, not failed
            return seconds
        self.split.add_round(k[0], time.perf_counter() - t0, getattr(executor, "waited_s", 0.0) - waited0, outs)
        outs = checked(self.plan.experiment(k[0]).baseline, [t.variant for t, _ in jobs], k[1], outs)
        for (t, _), out, turns in zip(jobs, outs, orders):
            _record(store, t, out, progress, self.plan.settings.min_sample_time, turns)
        return seconds

    def _job(self, store: Store, t: Target, progress: Progress) -> HarnessJob | None:
        """The next process of one target, or None when its point cannot be prepared or its
        placement linked (then the target fails, saying which).  After the target's first
        process, its repetitions and its passed known-answer test are handed on too."""
        w = workloads.get(t.workload)
        if t.result_id not in self.prepared:
            try:
                self.prepared[t.result_id] = self.site.prepare(w, t.params)
            except Stopped:  # not this point's failure: the whole run stops
                raise
            except Exception as e:  # a data file that cannot be made fails this point only
                _fail(store, t, progress, Status.SETUP_FAILED, f"preparing {t.workload}: {e}")
                return None
        p = t.placement()
        try:
            exe = t.artifact.path if p is None else self.site.place(t.artifact, p)
        except BuildError as e:  # this build's placements cannot be linked: it fails alone
            _fail(store, t, progress, Status.BUILD_FAILED, f"linking placement {p}: {e}")
            return None
        s = self.plan.settings
        return HarnessJob(exe, self.prepared[t.result_id], self.plan.samples_of(t.experiment), s.min_sample_time,
                          s.warmup, s.timer, s.timeout, dict(self.plan.variant(t.variant).env), emulator=t.emulator,
                          tsc_hz=None if t.emulator else self.tsc_hz, reps=t.reps, verified=t.reps is not None,
                          # io-bound: the other member leaves nothing it would reuse.  qemu-user:
                          # carry-over -1.0% without the whole call, -0.5% with it, which took 6 s
                          # of 8 s of samples (model 167, float-abi-arm at 16 Ki elements)
                          rewarm_calls=0 if w.io_bound or t.emulator else 1,
                          events="" if t.emulator else self.events)  # qemu-user's counts are the emulator's


def _fail(store: Store, t: Target, progress: Progress, status: str, error: str) -> None:
    t.live = False
    store.set_status(t.result_id, status, error)
    progress.advance(f"{t.workload} {t.variant}: {status}")


def _record(store: Store, t: Target, out, progress: Progress, min_sample_time: float,
            turns: list[tuple[int, str]] | None = None) -> None:
    """Store one process of a target (its round: t.rounds): its samples, each with why it
    is left out if the signals around it say it was disturbed (signals.contamination), its
    placement and turns, or the failure, which ends the target.  The target's first
    process sets the repetitions of every later one (steady_reps)."""
    round_ = t.rounds
    if out.status == Status.OK and out.data.get("ns"):
        d = out.data
        io = workloads.get(t.workload).io_bound
        excluded = signals.left_out(d, io)
        store.add_process(t.result_id, round_, d, out.layout_pad, excluded, t.placement(), turns)
        t.rounds += 1
        t.reps = t.reps or steady_reps(d["reps"], [ns for ns, x in zip(d["ns"], excluded) if not x], min_sample_time)
    else:
        t.live = False
        store.set_status(t.result_id, out.status if out.status != Status.OK else Status.ERROR, out.error or "no samples")
    progress.advance(f"round {round_ + 1}  {t.workload} {t.variant}"
                     + (f"  {out.status}: {out.error[:60]}" if out.status != Status.OK else ""))


def steady_reps(reps: int, kept_ns: list[float], min_sample_time: float) -> int:
    """The repetitions a sample of a target's later processes takes: the first process's
    count scaled so that its fastest kept sample would last min_sample_time and a tenth,
    as its harness calibrates.  The harness calibrates before it warms up, so a first
    call slower or faster than the samples (caches, clock) would set every later
    process's count; its samples say the speed they ran at.  In a default run the two
    agreed at the median of every experiment; rc5-72's later counts were 12-14% more,
    and memlat's at the L3's edge, where whole processes differ 8-fold, 0.2-3.9x."""
    if not kept_ns:
        return reps
    return max(1, math.ceil(reps * min_sample_time * 1e9 * 1.1 / min(kept_ns)))
