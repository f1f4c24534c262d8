"""What follows a run's rounds, on the CPUs the rounds leave: each result's instructions
counted where the plan asks (measure/instructions.py), then each experiment's largest
differences explained and the builds of its decided comparisons read (explain/).  A
shared experiment's follow as soon as its rounds end, in its lane; the rest after every
round, on both CPUs.
"""
from __future__ import annotations

import functools
import random
import threading
from dataclasses import dataclass
from typing import Callable, Sequence

from cpulab import time_split, workloads
from cpulab.measure import instructions
from cpulab.measure.execute.executor import Executor, LocalExecutor
from cpulab.measure.explain.largest import (
    decided, decided_builds, explain_difference, largest_differences, read_code
)
from cpulab.measure.schedule.lanes import in_lanes
from cpulab.measure.schedule.process_rounds import ProcessTarget
from cpulab.measure.schedule.rounds import Progress
from cpulab.measure.schedule.site import Site
from cpulab.measure.schedule.targets import Target
from cpulab.plan.plan import Plan
from cpulab.spec.schedule import Schedule
from cpulab.store.db import Store
from cpulab.time_split import TimeSplit


@dataclass
class Afterwards:
    """A run's analyses after its rounds: what they read of the run."""
    plan: Plan
    run_id: int
    site: Site
    split: TimeSplit
    schedule: Schedule
    tsc_hz: float | None
    targets: list[Target]

    def analyse(self, experiments: set[str] | None, executors: list[Executor], store: Store, rng: random.Random,
                progress: Progress, ran: Sequence[ProcessTarget] = (), stop: threading.Event | None = None) -> None:
        """The experiments' (None: all) instructions counted, then (explain shows them by
        function) their largest differences explained, on the executors' CPUs."""
        self.count(experiments, len(executors), store, progress, ran, stop)
        if work := self.explanations(experiments, store, progress, stop):  # none where the builds are elsewhere
            in_lanes(work, executors, store.path, rng)

    def explanations(self, experiments: set[str] | None, store: Store, progress: Progress,
                     stop: threading.Event | None = None) -> list:
        """The experiments' (None: all) explanations (explain) as lane work, each item timed."""
        if not isinstance(self.site.executor, LocalExecutor):  # elsewhere, the builds' files are there
            return []

        def timed(item):
            def run(*lane):
                with self.split.timing(time_split.RUN, "explain"):
                    item(*lane)
            return run
        return [(0.0, timed(item)) for item in explain(store, self.run_id, self.schedule, progress, self.prepared,
                                                       experiments, stop)]

    def count(self, experiments: set[str] | None, workers: int, store: Store, progress: Progress,
              ran: Sequence[ProcessTarget] = (), stop: threading.Event | None = None, measured: bool = True) -> None:
        """The instructions of the experiments' (None: all) targets counted, `workers` at a
        time, where the plan asks; measured: only those that got rounds (a stopped run's
        others stay uncounted).  A count depends on no round: it may come before them."""
        if not isinstance(self.site.executor, LocalExecutor):
            return
        with self.split.timing(time_split.RUN, "instructions"):
            count_instructions(self.plan, store, [t for t in self.targets if t.live and (t.rounds or not measured)
                                                  and not t.emulator
                                                  and (experiments is None or t.experiment in experiments)],
                               [t for t in ran if t.live and t.rounds], self.site, self.tsc_hz, progress, workers, stop)

    def prepared(self, name: str, params: dict) -> dict:
        """A kernel's parameters made ready (input files); a program's as they are."""
        return self.site.prepare(w, params) if (w := workloads.registry().get(name)) else params


def explain(store: Store, run_id: int, schedule: Schedule, progress: Progress, prepare: Callable[[str, dict], dict],
            experiments: set[str] | None = None, stop: threading.Event | None = None) -> list[Callable]:
    """Of each experiment's (of `experiments`) workload, the largest difference explained
    (both builds profiled, their code side by side, at its parameters as the site
    prepares them: input files), and every build in a decided comparison read (its hot
    loop, whence analysis/why.py words each comparison's cause): the items that do each
    and store it, for lanes (in_lanes), one per executor at a time: a profile gives the
    shares of a kernel's time by instruction, which work on the other CPU hardly moves."""
    found = decided(store, run_id, schedule, experiments)
    todo = [("explain", d.key, functools.partial(explain_difference, d, prepare))
            for d in largest_differences(store, run_id, found)]
    todo += [("code", key, functools.partial(read_code, path, prepare(key.split("/")[1], params)))
             for key, path, params in decided_builds(store, run_id, found)]
    progress.phase("explain", len(todo))

    def item(kind: str, key: str, read):
        def run(executor, lane_store, lane_rng, _):
            if stop is not None and stop.is_set():  # the run is stopping
                return
            if (doc := read(executor)) is not None:
                lane_store.add_analysis(run_id, kind, doc, key=key)
            progress.advance(f"explain  {key}")
        return run
    return [item(*t) for t in todo]


def count_instructions(plan: Plan, store: Store, targets: list[Target], ran: list[ProcessTarget],
                        site: Site, tsc_hz: float | None, progress: Progress, workers: int = 2,
                        stop: threading.Event | None = None) -> None:
    """Each measured native result of an experiment that asks for it gets its
    instructions per unit (measure/instructions.py) in its notes, or why it has none: a
    kernel's per unit of its timed work (a memory kernel's with its simulated cache
    misses), a program's per whole run, with the functions executing the most."""
    def uncounted(rid: int, experiment: str) -> dict | None:  # the result's notes, if it is to be counted
        if not plan.counts_instructions(experiment):
            return None
        notes = store.result(rid).notes or {}
        return None if "instructions_per_unit" in notes or "instructions_why" in notes else notes
    jobs = {}
    for t in targets:
        if (notes := uncounted(t.result_id, t.experiment)) is not None:
            w = workloads.get(t.workload)
            jobs[t.result_id] = (f"{t.workload} {t.variant}", functools.partial(
                instructions.count, t.artifact.path, site.prepare(w, t.params), notes, tsc_hz, w.simulate_caches))
    for t in ran:
        if uncounted(t.result_id, t.point[0]) is not None:
            jobs[t.result_id] = (t.label, functools.partial(instructions.count_process, t.command, t.env))
    if not jobs:
        return
    progress.phase("instructions", len(jobs))
    for (rid, (label, _)), c in zip(jobs.items(), instructions.count_all([job for _, job in jobs.values()],
                                                                         workers, stop)):
        if c is None:  # not counted: the run stopped first
            continue
        store.set_notes(rid, {"instructions_why": str(c)} if isinstance(c, instructions.CountError) else c.notes())
        progress.advance(f"instructions  {label}")
