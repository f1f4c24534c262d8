"""Running a plan at a site: build its targets (targets.py), measure its kernels in rounds
(kernel_rounds.py; experiments that share the machine two at a time in lanes, lanes.py),
time its programs (programs.py), measure its probe tables, then count and explain
(afterwards.py).  The site is this machine (LocalSite) or a dask worker
(cluster.MachineSite); the run is recorded before anything runs and keeps whatever was
measured when it stops (session.py).
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import random
import threading
import time
from typing import Callable

from cpulab import time_split, workloads
from cpulab.compile.artifacts import place, remove_placements
from cpulab.compile.inputs import input_file
from cpulab.compile.programs import built_here
from cpulab.machine import events, toolchains
from cpulab.measure import probes, randomness
from cpulab.measure.execute.executor import Executor, LocalExecutor, shared_pages
from cpulab.measure.execute.processes import evict
from cpulab.measure.schedule import programs
from cpulab.measure.schedule.afterwards import Afterwards
from cpulab.measure.schedule.kernel_rounds import KernelRounds, points_of
from cpulab.measure.schedule.lanes import TRAILS, LaneProgress, TrailingProgress, lanes
from cpulab.measure.schedule.rounds import Looks, Progress, QuietProgress
from cpulab.measure.schedule.session import machine_identity, recorded_run
from cpulab.measure.schedule.site import Site
from cpulab.measure.schedule.targets import (
    Target, build_targets, build_variant, first_look, link_placement, linking_ahead, resumed_targets
)
from cpulab.plan.plan import Plan
from cpulab.spec.schedule import Schedule
from cpulab.store.db import Store
from cpulab.time_split import TimeSplit


def _prepare_params(w: workloads.Workload, params: dict[str, str]) -> dict[str, str]:
    return {**params, **w.prepare(params)} if w.prepare else dict(params)


class LocalSite:
    """This machine as a Site: most of what it does is a function of this machine's."""
    build = staticmethod(build_variant)
    place = staticmethod(place)
    remove_placements = staticmethod(remove_placements)
    build_program = staticmethod(built_here)
    input_file = staticmethod(input_file)
    evict = staticmethod(evict)
    prepare = staticmethod(_prepare_params)

    def __init__(self, executor: Executor):
        self.executor = executor

    def identity(self, timer):
        return machine_identity(timer, self.executor)

    def compiler_version(self, v):
        return toolchains.compiler_version(v.compiler)

    def probe_table(self, name, timer):
        return probes.get(name).measure(timer=timer, executor=self.executor)

    def spare_executor(self):
        """A second CPU for experiments that share the machine, if one is free here."""
        return self.executor.spare() if isinstance(self.executor, LocalExecutor) else None


LINKS_AN_ITEM = 4  # placements a lane links as one item (about a second)


def run_plan(plan: Plan, store: Store, executor: Executor | None = None, progress: Progress | None = None,
             argv: list[str] | None = None, resume: int | None = None,
             site: Site | None = None, label: str = "", origin: dict | None = None) -> int:
    """Build and measure everything in the plan, then its probe tables; returns the run
    id.  On Ctrl-C, SIGTERM or SIGHUP the run is marked interrupted and everything
    measured stays.  resume: the id of a stopped run of this plan, to measure what it
    is missing.  site: where it runs (default: here, through `executor`)."""
    seed = randomness.new_seed() if plan.settings.seed is None else plan.settings.seed  # a resumed run's: its own
    plan = dataclasses.replace(plan, settings=plan.settings.given(seed=seed))
    site = site or LocalSite(executor or LocalExecutor(seed=randomness.derived(seed, "executor")))
    progress = progress or QuietProgress()
    if isinstance(site.executor, LocalExecutor):
        site.executor.on_wait = progress.note
    split = TimeSplit()
    with split.timing(time_split.RUN, "timing calibration"):
        identity = site.identity(plan.settings.timer) if resume is None else None
    with recorded_run(store, plan.record(), plan.settings.timer, argv, resume, site.executor, identity, label,
                      origin) as run_id:
        if resume is not None:  # the stopped part's time counts too
            split = TimeSplit(store.run(run_id).conditions.get("time_split"))
        try:
            with shared_pages():
                _measure_all(plan, store, run_id, site, progress, split, resume)
        finally:  # interrupted too: the time spent so far is kept with what it measured
            store.add_conditions(run_id, {"time_split": split.to_dict()})
            site.remove_placements()
    return run_id


def _measure_all(plan: Plan, store: Store, run_id: int, site: Site, progress: Progress,
                 split: TimeSplit, resume: int | None) -> None:
    # A stopped run's owed processes, and what it had not recorded (stopped in its builds)
    targets = resumed_targets(plan, store, run_id, progress) if resume is not None else []
    targets += build_targets(plan, store, run_id, progress, site, split)
    rng = randomness.stream(plan.settings.seed, "rounds")

    def unmeasured(names: list[str]) -> list[str]:  # the probe tables of `names` the run has not stored
        made = {(a.kind, a.key) for a in store.analyses(run_id)}
        return [name for name in names if (probes.get(name).kind, name) not in made]
    tables = unmeasured(plan.probe_tables)  # a resumed run's stored ones stay
    schedule = plan.schedule()
    tsc_hz = store.run(run_id).timing.get("tsc_hz")
    kernels = KernelRounds(plan, site, split, tsc_hz, points_of([t for t in targets if t.live]),
                           events.spec_of(plan.settings.events))
    after = Afterwards(plan, run_id, site, split, schedule, tsc_hz, targets)

    def table_in_lane(name: str):  # most probes measure one fact of the core: they may share the machine
        return lambda executor, lane_store, stop: _probe_table(  # a lane is this machine on its own CPU
            lane_store, run_id, name, LocalSite(executor).probe_table, plan.settings.timer, split, progress, stop)

    # The alone experiments' first round's placements, linked in the lanes beside the
    # shared experiments, a few a lane item (as one item, 7 s in one lane at the end of the
    # seeds' lanes, the other idle); the later ones by linking_ahead on the CPU that the
    # alone rounds leave idle (their second round's in the lanes took 6.5 s of the seeds')
    links = first_look(plan, targets, shared=False, rounds=1)

    def links_in_lane(few: list):
        def item(executor: Executor, lane_store: Store, stop: threading.Event) -> None:
            with split.timing(time_split.RUN, "build"):  # on the lane's CPU, as all of a lane's work
                for art, i in few:
                    if stop.is_set():
                        return
                    link_placement(site, art, i)
            progress.advance("placements linked")
        return item

    def tables_left():  # after the alone rounds, the machine theirs: those the lanes did not measure
        left = unmeasured(tables)
        progress.phase("tables", len(left))
        for name in left:
            _probe_table(store, run_id, name, site.probe_table, plan.settings.timer, split, progress)

    beside = [table_in_lane(name) for name in tables if not probes.get(name).alone]
    beside += [links_in_lane(links[k:k + LINKS_AN_ITEM]) for k in range(0, len(links), LINKS_AN_ITEM)]
    shared, explained = _measure(kernels, schedule, store, targets, progress, rng, beside, after, tables_left)
    if shared:
        store.add_conditions(run_id, {"shared_machine": shared})
    ran = []  # [program.NAME] workloads: built from their own source trees, timed whole
    if plan.programs:
        with split.timing(time_split.RUN, "programs"):
            ran = programs.run_in_plan(plan, schedule, store, run_id, site, progress, rng)
    spare = site.spare_executor()  # nothing is measured any more: both CPUs count and profile
    # the experiments the lanes left (deciding anew over all of a run's results took 0.6 s)
    rest = {r.experiment for r in store.results(run_id)} - explained
    after.analyse(rest, [site.executor] + ([spare] if spare else []), store, rng, progress, ran)


def _measure(kernels: KernelRounds, schedule: Schedule, store: Store, targets: list[Target], progress: Progress,
             rng: random.Random, beside: list[Callable[[Executor, Store, threading.Event], None]] = (),
             after: Afterwards | None = None,
             machine_alone: Callable[[], None] = lambda: None) -> tuple[list[str], set[str]]:
    """The kernels' rounds.  Experiments that share the machine (plan: share_machine) run
    first, two at a time, one per CPU when the site has a spare one (in_lanes): each one's
    first round, then the rest of them longest first (by that round), with their
    instruction counts, their explanations once their rounds end (`after`) and the work
    in `beside` (called with the lane's executor, store and stop event) in whichever lane
    comes free; the others then run alone, one after another, then machine_alone() (the
    probe tables that measure beyond a core), with the lanes' counts and explanations not
    yet done on the other CPU, and each alone experiment's beside the next one or
    machine_alone(), whose rest both CPUs finish after them.  Returns the experiments
    that ran in lanes (none: nothing did, `beside` neither), and those counted and
    explained there."""
    plan, site = kernels.plan, kernels.site
    sharing = [e.name for e in plan.experiments if e.share_machine and any(k[0] == e.name for k in kernels.points)]
    spare = site.spare_executor() if sharing and len(sharing) + len(beside) > 1 else None
    alone = {k[0] for k in kernels.points} - (set(sharing) if spare else set())
    two_lanes, explained_here = contextlib.nullcontext(), set()
    if spare is not None:
        progress.phase("measure (two CPUs)", len(beside))  # each lane adds its experiments' steps
        one_round = dataclasses.replace(schedule, first=dict.fromkeys(schedule.first, 1),
                                        budget=dict.fromkeys(schedule.first, 0.0))

        counts = {exp: threading.Lock() for exp in {*sharing, *alone}}  # held by the lane counting exp's instructions

        def count(exp: str):
            # Its instructions, which no round changes: counted in whichever lane comes free
            # first (link-format's 8 builds under valgrind took 22 s after its rounds, the
            # other lane idle; never the first lane where it hands over: it would hold up
            # the alone rounds), or at the latest after its rounds; the second comer waits.
            def item(executor, lane_store, lane_rng, stop):
                with counts[exp]:
                    if after is not None and not stop.is_set():
                        after.count({exp}, 1, lane_store, TrailingProgress(progress), stop=stop, measured=False)
            return item

        def shared_experiment(exp: str):
            # Its first round before the rest: what a round of it costs, so that the lanes take
            # the longest rest first (a sample of a 100 MB file's hash is a pass, 0.3 s, not
            # min_sample_time: file-hash, taken last, kept one lane busy 27 s after the other).
            # Then its looks, each an item whose seconds are the most the experiment may
            # still take (its budget left): the lanes take the looks of those that may go on
            # longest first, side by side (as one item each, the seeds' per-clock, its rest
            # estimated by its first round, started last and ran 26 s after the other lane).
            looks = Looks()

            def first(executor, lane_store, lane_rng, stop):
                t0 = time.perf_counter()
                kernels.measure({exp}, executor, lane_store, lane_rng, LaneProgress(progress), one_round, stop)
                return [((time.perf_counter() - t0) * (schedule.first[exp] - 1) + schedule.budget[exp], look)]

            def look(executor, lane_store, lane_rng, stop):
                if kernels.measure({exp}, executor, lane_store, lane_rng, LaneProgress(progress), schedule, stop,
                                   looks):
                    return [(schedule.budget[exp] - looks.spent[exp], look)]
                if after is not None and not stop.is_set():
                    return [(TRAILS, explained(exp))]
            return first

        def explained(exp: str):
            # After its rounds, its instructions counted (done, under way, or here), then its
            # largest differences explained: counts and profiles depend on nothing beside them
            def item(executor, lane_store, lane_rng, stop):
                count(exp)(executor, lane_store, lane_rng, stop)
                explained_here.add(exp)
                return [(TRAILS, w) for _, w in after.explanations({exp}, lane_store, TrailingProgress(progress), stop)]
            return item
        work = [(math.inf, shared_experiment(exp)) for exp in sharing]
        work += [(TRAILS, count(exp)) for exp in sharing if plan.counts_instructions(exp)]
        work += [(0.0, lambda executor, lane_store, lane_rng, stop, w=w: w(executor, lane_store, stop)) for w in beside]
        # What trails the lanes' rounds and links, their counts and explanations (15-20 s of
        # both lanes at the seeds' end), goes on beside the alone rounds, on the spare's CPU
        two_lanes = lanes(work, [site.executor, spare], store.path, rng, hand_over=bool(alone))
    # the other CPU (the lanes' spare: a second claim of it would fail) links what the rounds will need
    other = spare or (site.spare_executor() if alone else None)
    alone_targets = [t for t in targets if t.experiment in alone]
    with two_lanes as trail, linking_ahead(alone_targets, site, other.cpu if other else None, schedule):
        # One alone experiment after another, those that compare builds first: each one's
        # counts and explanations trail on the other CPU beside the next one's rounds, the
        # last one's beside the probes that need the machine (the roofline, 3 s in the
        # seeds), their rest on both CPUs after them.  (The seeds' float-abi explanations,
        # 6 CPU-s, had waited for memory-latency's rounds, and then the roofline's.)
        for exp in sorted(alone, key=lambda e: (len(plan.experiment(e).variants) == 1, e)):
            kernels.measure({exp}, site.executor, store, rng, progress, schedule)
            if trail is not None and after is not None:
                trail([(TRAILS, explained(exp))])
        machine_alone()
    return (sharing if spare is not None else []), explained_here


def _probe_table(store: Store, run_id: int, name: str, measure, timer: str, split: TimeSplit,
                 progress: Progress, stop: threading.Event | None = None) -> None:
    """One of the plan's probe tables, measured (measure(name, timer)) and stored, unless
    the run was stopped under it (its processes were killed, they did not fail)."""
    with split.timing(time_split.RUN, "tables"):
        try:
            data = measure(name, timer)
        except probes.ProbeError as e:  # a probe that crashes or hangs fails alone; the run is kept
            data = {"status": "failed", "error": str(e)}
    if stop is not None and stop.is_set():
        return
    store.add_analysis(run_id, probes.get(name).kind, data, key=name)
    progress.advance(name + (f": {data['error']}" if "error" in data else ""))
