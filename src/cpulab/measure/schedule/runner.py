"""Running a plan's kernels at a site: build its targets (targets.py), then measure in rounds.

Every process is one job run by an executor (execute/executor.py): one artifact at one parameter
point, pinned, with the layout pad, its failure recorded if it fails.  In each round a
point's variants run as one group taking samples in turns (a fresh random order each
turn), so a drifting machine hits all variants alike; a job that fails is recorded with
its reason and dropped from later rounds while the others go on.  The site is this
machine (LocalSite) or a dask worker (cluster.MachineSite).
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import random
import threading
import time
from collections import defaultdict
from typing import Callable, Sequence

from cpulab import stats, workloads
from cpulab.compile.artifacts import BuildError, place, remove_placements
from cpulab.compile.inputs import input_file
from cpulab.compile.programs import built_here
from cpulab.machine import toolchains
from cpulab import time_split
from cpulab.measure import instructions, probes, randomness
from cpulab.measure.schedule import programs
from cpulab.measure.schedule.auto_check import checked
from cpulab.measure.execute.executor import Executor, HarnessJob, LocalExecutor, on_cpu, shared_pages
from cpulab.measure.explain.largest import (
    decided, decided_builds, explain_difference, largest_differences, read_code
)
from cpulab.measure.schedule.lanes import LaneProgress, in_lanes
from cpulab.measure.execute.processes import evict
from cpulab.measure.schedule.rounds import (
    Progress, QuietProgress, Schedule, measure_rounds, turn_order, turns_in_pairs
)
from cpulab.measure.schedule.session import Stopped, machine_identity, recorded_run
from cpulab.measure.schedule.site import Site
from cpulab.measure.schedule.targets import (
    AHEAD, Target, build_targets, build_variant, first_look, link_placement, linking_ahead, resumed_targets
)
from cpulab.time_split import TimeSplit
from cpulab.model import Status, params_key
from cpulab.plan.plan import Plan
from cpulab.store.db import SIGNALS, Store


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
    targets = build_targets(plan, store, run_id, progress, site, split) if resume is None else \
        resumed_targets(plan, store, run_id, progress)
    seed = plan.settings.seed
    for t in targets:
        t.seed = seed
    rng = randomness.stream(seed, "rounds")
    made = {(a.kind, a.key) for a in store.analyses(run_id)}
    tables = [name for name in plan.probe_tables if (probes.get(name).kind, name) not in made]
    schedule = Schedule.of_plan(plan)
    tsc_hz = store.run(run_id).timing.get("tsc_hz")

    def table_in_lane(name: str):  # most probes measure one fact of the core: they may share the machine
        return lambda executor, lane_store, stop: _probe_table(  # a lane is this machine on its own CPU
            lane_store, run_id, name, LocalSite(executor).probe_table, plan.settings.timer, split, progress, stop)

    # The alone experiments' first AHEAD rounds' placements, linked in a lane beside the
    # shared experiments; the later ones by linking_ahead on the CPU that the alone rounds
    # leave idle (all of their first look took 7 s at the end of the seeds' longest lane)
    links = first_look(plan, targets, shared=False, rounds=AHEAD)

    def links_in_lane(executor: Executor, lane_store: Store, stop: threading.Event) -> None:
        with split.timing(time_split.RUN, "build"):  # on the lane's CPU, as all of a lane's work
            for art, i in links:
                if stop.is_set():
                    return
                link_placement(site, art, i)
        progress.advance("placements linked")

    def prepared(name: str, params: dict) -> dict:
        """A kernel's parameters made ready (input files); a program's as they are."""
        return site.prepare(w, params) if (w := workloads.registry().get(name)) else params

    def analyse(experiments: set[str] | None, executors: list[Executor], a_store: Store, a_rng: random.Random,
                a_progress: Progress, ran: Sequence[programs.ProcessTarget] = (),
                stop: threading.Event | None = None) -> None:
        """The experiments' (None: all) instructions counted, then (explain shows them
        by function) their largest differences explained, on the executors' CPUs."""
        if not isinstance(site.executor, LocalExecutor):  # the builds' files are elsewhere
            return
        with split.timing(time_split.RUN, "instructions"):
            _count_instructions(plan, a_store, [t for t in targets if t.live and t.rounds and not t.emulator and
                                                (experiments is None or t.experiment in experiments)],
                                [t for t in ran if t.live and t.rounds], site, tsc_hz, a_progress, len(executors), stop)
        with split.timing(time_split.RUN, "explain"):
            _explain(a_store, run_id, schedule, executors, a_rng, a_progress, prepared, experiments, stop)

    def analyse_in_lane(exp: str, executor: Executor, lane_store: Store, lane_rng: random.Random,
                        stop: threading.Event) -> None:
        # As soon as the experiment is measured, on its lane's CPU (with what it starts),
        # while the other lane measures: counts and profiles depend on nothing beside them.
        analyse({exp}, [executor], lane_store, lane_rng, LaneProgress(progress), stop=stop)

    shared = _measure(plan, schedule, store, targets, site, progress, rng, split, tsc_hz,
                      [table_in_lane(name) for name in tables if not probes.get(name).alone]
                      + ([links_in_lane] if links else []), analyse_in_lane)
    if shared:
        store.add_conditions(run_id, {"shared_machine": shared})
        tables = [name for name in tables if probes.get(name).alone]  # the others were measured in the lanes
    ran = []  # [program.NAME] workloads: built from their own source trees, timed whole
    if plan.programs:
        with split.timing(time_split.RUN, "programs"):
            ran = programs.run_in_plan(plan, schedule, store, run_id, site, progress, rng)
    progress.phase("tables", len(tables))
    for name in tables:
        _probe_table(store, run_id, name, site.probe_table, plan.settings.timer, split, progress)
    spare = site.spare_executor()  # nothing is measured any more: both CPUs count and profile
    analyse(None, [site.executor] + ([spare] if spare else []), store, rng, progress, ran)


def _explain(store: Store, run_id: int, schedule: Schedule, executors: list[Executor], rng: random.Random,
             progress: Progress, prepare: Callable[[str, dict], dict],
             experiments: set[str] | None = None, stop: threading.Event | None = None) -> None:
    """Of each experiment's (of `experiments`) workload, the largest difference explained
    (both builds profiled, their code side by side, at its parameters as the site
    prepares them: input files), and every build in a decided comparison read (its hot
    loop, whence analysis/why.py words each comparison's cause); stored, one per executor
    at a time: a profile gives the shares of a kernel's time by instruction, which work
    on the other CPU hardly moves."""
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
    in_lanes([(0.0, item(*t)) for t in todo], executors, store.path, rng)


def _count_instructions(plan: Plan, store: Store, targets: list[Target], ran: list[programs.ProcessTarget],
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


def _measure(plan: Plan, schedule: Schedule, store: Store, targets: list[Target], site: Site, progress: Progress,
             rng: random.Random, split: TimeSplit, tsc_hz: float | None = None,
             beside: list[Callable[[Executor, Store, threading.Event], None]] = (),
             after: Callable[[str, Executor, Store, random.Random, threading.Event], None] | None = None) -> list[str]:
    """The kernels' rounds (rounds.measure_rounds).  With the method "turns" a point's
    targets run as one group: processes alive together on one CPU taking their samples
    in turns, in a fresh random order each turn, so sample j of a variant and of its
    baseline are milliseconds apart and share the host's state.  Otherwise they run back
    to back in the round's random order.

    Experiments that share the machine (plan: share_machine) run first, two at a time,
    one per CPU when the site has a spare one (in_lanes): each one's first round, then the
    rest of them longest first (by that round), each followed in its lane by `after`
    (called with its name and the lane's executor, store, rng and stop event), with the
    work in `beside` (called with the lane's executor, store and stop event) after them;
    the others then run alone.  Returns the experiments that ran in lanes
    (none: nothing did, `beside` neither)."""
    prepared: dict[int, dict[str, str]] = {}
    points = _points([t for t in targets if t.live])

    def rounds(exps: set[str], executor: Executor, store: Store, rng: random.Random, progress: Progress,
               stop: threading.Event | None = None, looks: Schedule = schedule) -> None:
        def run_round(k: tuple, order: list[Target]) -> float:
            t0, waited0 = time.perf_counter(), getattr(executor, "waited_s", 0.0)
            # A placement not linked yet is linked on this lane's CPU, which is idle until
            # the round starts (the other may be measuring)
            with on_cpu(executor.cpu) if isinstance(executor, LocalExecutor) else contextlib.nullcontext():
                jobs = [(t, job) for t in order if (job := _job(plan, store, t, site, progress, prepared, tsc_hz))]
            orders: list[list[tuple[int, str]] | None] = [None] * len(jobs)
            if plan.settings.method == "turns" and len(jobs) > 1:
                for _, job in jobs:
                    job.turns = True
                cycles = turns_in_pairs(len(jobs), plan.samples_of(k[0]), rng)
                outs = executor.execute_group([job for _, job in jobs], cycles)
                seconds = max((o.process.wall_s for o in outs if o.process), default=0.0)
                orders = turn_order(cycles, [t.variant for t, _ in jobs])
            else:
                outs = [executor.execute(job) for _, job in jobs]
                seconds = sum(o.process.wall_s for o in outs if o.process)
            if stop is not None and stop.is_set():  # stopped under it: its processes were killed, not failed
                return seconds
            split.add_round(k[0], time.perf_counter() - t0, getattr(executor, "waited_s", 0.0) - waited0, outs)
            outs = checked(plan.experiment(k[0]).baseline, [t.variant for t, _ in jobs], k[1], outs)
            for (t, _), out, turns in zip(jobs, outs, orders):
                _record(store, t, out, progress, turns)
            return seconds

        measure_rounds(store, {k: ts for k, ts in points.items() if k[0] in exps}, looks, run_round, progress,
                       rng, stop)

    sharing = [e.name for e in plan.experiments if e.share_machine and any(k[0] == e.name for k in points)]
    spare = site.spare_executor() if sharing and len(sharing) + len(beside) > 1 else None
    if spare is not None:
        progress.phase("measure (two CPUs)", len(beside))  # each lane adds its experiments' steps
        one_round = dataclasses.replace(schedule, first=dict.fromkeys(schedule.first, 1), budget=0)

        def shared_experiment(exp: str):
            # Its first round before the rest: what a round of it costs, so that the lanes take
            # the longest rest first (a sample of a 100 MB file's hash is a pass, 0.3 s, not
            # min_sample_time: file-hash, taken last, kept one lane busy 27 s after the other).
            def first(executor, lane_store, lane_rng, stop):
                t0 = time.perf_counter()
                rounds({exp}, executor, lane_store, lane_rng, LaneProgress(progress), stop, one_round)
                return [((time.perf_counter() - t0) * (schedule.first[exp] - 1), rest)]

            def rest(executor, lane_store, lane_rng, stop):
                rounds({exp}, executor, lane_store, lane_rng, LaneProgress(progress), stop)
                if after is not None and not stop.is_set():
                    after(exp, executor, lane_store, lane_rng, stop)
            return first
        work = [(math.inf, shared_experiment(exp)) for exp in sharing]
        work += [(0.0, lambda executor, lane_store, lane_rng, stop, w=w: w(executor, lane_store, stop)) for w in beside]
        in_lanes(work, [site.executor, spare], store.path, rng)
    alone = {k[0] for k in points} - (set(sharing) if spare else set())
    # the other CPU (the lanes' spare: a second claim of it would fail) links what the rounds will need
    other = spare or (site.spare_executor() if alone else None)
    with linking_ahead([t for t in targets if t.experiment in alone], site, other.cpu if other else None):
        rounds(alone, site.executor, store, rng, progress)
    return sharing if spare is not None else []


def _points(live: list[Target]) -> dict[tuple, list[Target]]:
    """The live targets grouped by comparison point: (experiment, workload, params)."""
    points: dict[tuple, list[Target]] = defaultdict(list)
    for t in live:
        points[(t.experiment, t.workload, params_key(t.params))].append(t)
    return points


def _job(plan: Plan, store: Store, t: Target, site: Site, progress: Progress,
         prepared: dict[int, dict[str, str]], tsc_hz: float | None = None) -> HarnessJob | None:
    """The next process of one target, or None when its point cannot be prepared (then
    the target is setup-failed).  tsc_hz: the run's TSC rate, handed to native processes
    so that none spins 30 ms to measure it again; after the target's first process, its
    repetitions and its passed known-answer test are handed on too."""
    w = workloads.get(t.workload)
    if t.result_id not in prepared:
        try:
            prepared[t.result_id] = site.prepare(w, t.params)
        except Stopped:  # not this point's failure: the whole run stops
            raise
        except Exception as e:  # a data file that cannot be made fails this point only
            t.live = False
            store.set_status(t.result_id, "setup-failed", f"preparing {t.workload}: {e}")
            progress.advance(f"{t.workload} {t.variant}: setup-failed")
            return None
    v = plan.variant(t.variant)
    p = t.placement()
    try:
        exe = t.artifact.path if p is None else site.place(t.artifact, p)
    except BuildError as e:  # this build's placements cannot be linked: it fails alone
        t.live = False
        store.set_status(t.result_id, Status.BUILD_FAILED, f"linking placement {p}: {e}")
        progress.advance(f"{t.workload} {t.variant}: build-failed")
        return None
    return HarnessJob(exe, prepared[t.result_id], plan.samples_of(t.experiment), plan.settings.min_sample_time,
                      plan.settings.warmup, plan.settings.timer, plan.settings.timeout, dict(v.env), emulator=t.emulator,
                      tsc_hz=None if t.emulator else tsc_hz, reps=t.reps, verified=t.reps is not None,
                      # io-bound: the other member leaves nothing it would reuse.  qemu-user:
                      # carry-over -1.0% without the whole call, -0.5% with it, which took 6 s
                      # of 8 s of samples (model 167, float-abi-arm at 16 Ki elements)
                      rewarm_calls=0 if w.io_bound or t.emulator else 1)


def _record(store: Store, t: Target, out, progress: Progress, turns: list[tuple[int, str]] | None = None) -> None:
    """Store one process of a target (its round: t.rounds): its samples, each with why it
    is left out if the signals around it say it was disturbed (stats.contamination), its
    placement and turns, or the failure, which ends the target."""
    round_ = t.rounds
    if out.status == Status.OK and out.data.get("ns"):
        d = out.data
        io = workloads.get(t.workload).io_bound
        excluded = [stats.contamination({"ns": ns, **{k: d[k][i] for k in SIGNALS if k in d}}, io)
                    for i, ns in enumerate(d["ns"])]
        store.add_process(t.result_id, round_, d, out.layout_pad, excluded, t.placement(), turns)
        t.rounds += 1
        t.reps = t.reps or d.get("reps")
    else:
        t.live = False
        store.set_status(t.result_id, out.status if out.status != Status.OK else Status.ERROR, out.error or "no samples")
    progress.advance(f"round {round_ + 1}  {t.workload} {t.variant}"
                     + (f"  {out.status}: {out.error[:60]}" if out.status != Status.OK else ""))
