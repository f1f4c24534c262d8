"""What the runner measures: one Target per (experiment, workload, variant, point), made
from a plan by building each (workload, variant) once, holding the choices of compiled
parameters its experiment's points run (build_targets), or from a stopped
run's owed results (resumed_targets).  Variants whose executable and settings are
byte-identical to an earlier one's are measured once (execution_key); `run --against RUN`
adds RUN's stored executables beside the new builds (against_targets).
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from cpulab import workloads
from cpulab.compile import artifacts, emulation
from cpulab.compile.artifacts import Built
from cpulab.estimates import against_name
from cpulab.machine import toolchains
from cpulab.measure.execute.executor import on_cpu
from cpulab.measure.schedule.rounds import Progress
from cpulab.measure.schedule.site import Site
from cpulab.measure import randomness
from cpulab.time_split import RUN, TimeSplit
from cpulab.model import Status, params_key
from cpulab.plan import toolchain
from cpulab.plan.plan import Experiment, Plan
from cpulab.spec.schedule import Schedule
from cpulab.store.db import Store


AHEAD = 2  # placements linked ahead of each target's next round (linking_ahead)


@dataclass
class Target:
    """One (experiment, workload, variant, params) point to measure."""
    experiment: str
    workload: str
    variant: str
    params: dict[str, str]
    result_id: int = 0
    artifact: artifacts.Artifact | None = None
    live: bool = True
    emulator: tuple[str, ...] = ()  # qemu-user prefix for a cross artifact
    rounds: int = 0  # rounds it has been measured in (one process each): its next process's number
    # Set by its first process that succeeds in this session: later ones take its
    # repetitions per sample and skip the known-answer test it passed (_job).
    reps: int | None = None
    # The run's (randomness.py): which placements its rounds run.  Given when it is made,
    # with no default: the first look's links drew seed 0's placements while it had one.
    seed: int = field(kw_only=True)

    @property
    def placed(self) -> bool:
        """Whether its processes run placements: not where qemu-user runs it, whose
        translated code sits where qemu puts it (the seeds' ARM builds' first look was
        168 static links of 47 ms, 4 s of their build on two CPUs)."""
        return self.artifact.placeable and not self.emulator

    def placement_at(self, round_: int) -> int | None:
        """The placement its `round_`th process runs, drawn from the run's seed, the point
        and the round: no two rounds, points or runs share one but by chance (None: it runs
        the artifact itself)."""
        point = f"{self.experiment}/{self.workload}/{self.variant}/{params_key(self.params)}"
        return randomness.placement(self.seed, point, round_) if self.placed else None

    def placement(self) -> int | None:
        """The placement the next process runs."""
        return self.placement_at(self.rounds)


def build_variant(w: workloads.Workload, v: toolchain.Variant) -> Built:
    """One workload under one variant on this machine."""
    if why := toolchains.unavailable_reason(v):
        return Built(Status.SKIPPED, why)
    if why := toolchains.libraries_reason(v, w.requires, w.libs):
        return Built(Status.SKIPPED, why)
    try:
        art = artifacts.build_artifact(w, v)
    except artifacts.BuildError as e:
        return Built(Status.BUILD_FAILED, str(e))
    try:
        return Built(Status.PENDING, "", art, emulation.emulator_for(art.path))
    except emulation.CannotRun as e:
        return Built(Status.SKIPPED, str(e), art)


def build_targets(plan: Plan, store: Store, run_id: int, progress: Progress, site: Site,
               split: TimeSplit) -> list[Target]:
    """The plan's results that the run has not recorded (a fresh run: all; a run stopped
    in its builds: all, for it records them once they are built), each (workload,
    variant) built once; record skips and build failures; mark variants whose executable
    is byte-identical to an earlier one's as 'identical'."""
    recorded = {(r.experiment, r.workload, r.variant, params_key(r.params)) for r in store.results(run_id)}

    def unrecorded(e: Experiment, wname: str, vname: str) -> list[dict[str, str]]:
        return [params for params in workloads.get(wname).grid(plan.settings.grid, e.params.get(wname))
                if (e.name, wname, vname, params_key(params)) not in recorded]
    # (experiment, build key, its points to record): a build is (workload, variant, the
    # flags of the choices it holds)
    todo = [(e, (w, v, held(plan, e, w)), points) for e in plan.experiments for w in e.workloads
            for v in e.variants if w not in plan.programs and (points := unrecorded(e, w, v))]
    if not todo:
        return []
    builds = _build_pairs(plan, [(e, key) for e, key, _ in todo], site, split, progress)
    recorded_variants: set[str] = set()
    targets: list[Target] = []
    for exp, key, points in todo:
        wname, vname, _ = key
        w, v = workloads.get(wname), plan.variant(vname)
        if vname not in recorded_variants:
            store.add_variant(run_id, v.as_dict(), site.compiler_version(v))
            recorded_variants.add(vname)
        built = builds[key]
        status, error, art = built.status, built.error, built.artifact
        if art:
            store.add_artifact(art.as_dict())
        for params in points:
            t = Target(exp.name, wname, vname, params, artifact=art, live=status == Status.PENDING,
                       emulator=built.emulator if status == Status.PENDING else (), seed=plan.settings.seed)
            t.result_id = store.add_result(run_id, wname, vname, params, w.unit, status, error,
                                           art.hash if art else None, experiment=exp.name)
            targets.append(t)

    if plan.settings.against is not None:
        targets += against_targets(plan, store, run_id, targets)

    # Identical code run the same way: measure the first such variant, point the rest at it.
    first_with: dict[tuple, str] = {}
    for t in targets:
        if not t.live:
            continue
        run_as = execution_key(plan.variant(t.variant), t.artifact)
        key = (t.experiment, t.workload, params_key(t.params), run_as)
        if key in first_with and first_with[key] != t.variant and not plan.settings.measure_identical:
            t.live = False
            store.mark_identical(t.result_id, first_with[key])
        else:
            first_with.setdefault(key, t.variant)
    # The first look's placements of the experiments that share the machine, which start
    # at once: two at a time while nothing is measured yet (they were 9 s of the seeds'
    # 22 s of builds).  The others' are linked beside them, in a lane (runner).
    t0 = time.perf_counter()
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda link: link_placement(site, *link), first_look(plan, targets, shared=True)))
    split.add(RUN, "build", time.perf_counter() - t0)
    return targets


def link_placement(site: Site, art: artifacts.Artifact, i: int) -> None:
    """Placement i of `art` linked ahead of its round, if it can be: one that cannot
    fails its round, which says why (kernel_rounds.KernelRounds._job)."""
    try:
        site.place(art, i)
    except artifacts.BuildError:
        pass


def first_look(plan: Plan, targets: list[Target], shared: bool,
               rounds: int | None = None) -> list[tuple[artifacts.Artifact, int]]:
    """(artifact, i) of every placement the first look of the live targets of experiments
    that share the machine (or, `shared` False, that run alone) will run; `rounds`: of
    its first rounds only."""
    exps = {e.name for e in plan.experiments if e.share_machine == shared}
    links = {}
    for t in targets:
        if t.live and t.placed and t.experiment in exps:
            look = plan.processes_of(t.experiment)
            for r in range(min(look, rounds) if rounds else look):
                i = t.placement_at(r)
                links[(t.artifact.hash, i)] = (r, t.artifact, i)
    return [(art, i) for _, art, i in sorted(links.values(), key=lambda link: link[0])]


@contextlib.contextmanager
def linking_ahead(targets: list[Target], site: Site, cpu: int | None, schedule: Schedule):
    """For the block, a thread linking on CPU `cpu` (one that measures nothing; None: no
    thread) the placements the targets' next AHEAD rounds will run, the earliest first, so
    that a round seldom links its own (16-36 ms each, before its processes start).  At the
    run's own priority: on that CPU it disturbs no measurement whatever its priority, and
    beside a busy cotenant there a nice-19 link got 1.5% of the CPU (a 30 ms link took
    seconds, and the block's end waited minutes for the one under way).  Only rounds a
    target is sure to run (Schedule.sure_rounds): the rounds past the looks' ends were 572
    of the seeds' 1,969 links, 20 s of that CPU, which the counts trailing there wait for;
    the first round of a look that goes on links its own."""
    done = threading.Event()
    # Each placement drawn once and tried once (linked, found linked, or failed: its round
    # says why): a scan of every target's stat and draw, 20 a second, took 10 s of CPU
    # over the seeds' alone rounds, and the GIL from the thread measuring.
    drawn: dict[tuple[int, int], int | None] = {}
    tried: set[tuple[str, int]] = set()

    def placement_at(t: Target, r: int) -> int | None:
        if (id(t), r) not in drawn:
            drawn[(id(t), r)] = t.placement_at(r)
        return drawn[(id(t), r)]

    def link():
        with on_cpu(cpu):
            while not done.is_set():
                owed = [(r, t.artifact, i) for t in targets if t.live and t.placed
                        for r in range(t.rounds, min(t.rounds + AHEAD, schedule.sure_rounds(t.experiment, t.rounds)))
                        if (i := placement_at(t, r)) is not None and (t.artifact.hash, i) not in tried]
                if not owed:
                    done.wait(0.05)
                    continue
                _, art, i = min(owed, key=lambda o: o[0])
                link_placement(site, art, i)
                tried.add((art.hash, i))
    thread = threading.Thread(target=link, name="cpulab-linker", daemon=True) if cpu is not None else None
    if thread:
        thread.start()
    try:
        yield
    finally:
        done.set()
        if thread:
            thread.join()


def held(plan: Plan, exp: Experiment, wname: str) -> tuple[str, ...]:
    """The flags by which the experiment's build of the workload holds only the choices
    its points run (Workload.held)."""
    w = workloads.get(wname)
    return w.held(w.grid(plan.settings.grid, exp.params.get(wname)))


def build_of(plan: Plan, wname: str, vname: str,
             flags: tuple[str, ...]) -> tuple[workloads.Workload, toolchain.Variant]:
    """The workload and the variant as one build of them compiles: the variant's tree (a
    commit's, `cpulab ci`), the choices held (`held`: the kernel's flags gain them)."""
    v = plan.variant(vname)
    return workloads.get(wname).for_variant(vname), dataclasses.replace(v, cflags=v.cflags + flags) if flags else v


def _build_pairs(plan: Plan, pairs: list[tuple], site: Site, split: TimeSplit,
                 progress: Progress) -> dict[tuple[str, str, tuple[str, ...]], Built]:
    """Each distinct (workload, variant, choices held) built once, two at a time: nothing
    is measured yet, so both CPUs compile.  The build phase's wall time goes to the
    experiments in proportion to their builds' own times."""
    first_of: dict[tuple[str, str, tuple[str, ...]], str] = {}
    for exp, key in pairs:
        first_of.setdefault(key, exp.name)
    as_built = {key: build_of(plan, *key) for key in first_of}

    def timed(key: tuple[str, str, tuple[str, ...]]) -> tuple[Built, float]:
        t0 = time.perf_counter()
        built = site.build(*as_built[key])
        progress.advance(f"{key[0]} / {key[1]}" + (f": {built.status}" if built.status != Status.PENDING else ""))
        return built, time.perf_counter() - t0

    # A build that compiles as an earlier one does (static links O2's object) is started
    # after every other: it then finds that object in the cache, where side by side both
    # compiled it (2 s of rc5-72 in the seeds)
    compiles = [(key[0], v.compiler, v.cflags) for key, (_, v) in as_built.items()]
    shared = [compiles.index(c) < i for i, c in enumerate(compiles)]
    order = [pair for pair, later in sorted(zip(first_of, shared), key=lambda ps: ps[1])]
    progress.phase("build", len(first_of))
    t0 = time.perf_counter()
    with ThreadPoolExecutor(2) as pool:
        done = dict(zip(order, pool.map(timed, order)))
    wall, own = time.perf_counter() - t0, sum(s for _, s in done.values())
    for pair, (_, s) in done.items():
        split.add(first_of[pair], "build", wall * s / own if own else 0.0)
    return {pair: built for pair, (built, _) in done.items()}


def stored_artifact(store: Store, hash_: str | None) -> artifacts.Artifact | None:
    """A stored run's artifact, if its executable is still in this machine's cache with
    the same bytes (built here, not evicted, not rebuilt since)."""
    art = store.artifact(hash_) if hash_ else None
    if not art or not os.path.isfile(art.path):
        return None
    with open(art.path, "rb") as f:
        if hashlib.sha256(f.read()).hexdigest() != art.code_hash:
            return None
    return artifacts.Artifact.from_dict(art.to_dict())


def against_targets(plan: Plan, store: Store, run_id: int, targets: list[Target]) -> list[Target]:
    """`run --against RUN`: for every point of this plan that RUN measured under the same
    variant, RUN's stored executable is measured beside the new build, in the same
    rounds, as that variant's baseline (`VARIANT@RUN`).  One whose executable is gone
    from the cache is recorded skipped, saying so."""
    old = {(r.workload, r.variant, params_key(r.params)): r
           for r in store.results(plan.settings.against) if r.status in (Status.OK, Status.IDENTICAL)}
    out, named = [], set()
    for t in targets:
        r = old.get((t.workload, t.variant, params_key(t.params)))
        if r is None:
            continue
        if r.status == "identical":  # measured as its twin: the twin's build is the one
            r = old.get((t.workload, r.same_as, params_key(t.params))) or r
        name = against_name(t.variant, plan.settings.against)
        if name not in named:
            store.add_variant(run_id, {**plan.variant(t.variant).as_dict(), "name": name}, "")
            named.add(name)
        art = stored_artifact(store, r.artifact_hash)
        status = Status.PENDING if art else Status.SKIPPED
        error = "" if art else f"run {plan.settings.against}'s executable is no longer in this machine's artifact cache"
        a = Target(t.experiment, t.workload, name, t.params, artifact=art, live=art is not None and t.live,
                   emulator=t.emulator, seed=t.seed)
        a.result_id = store.add_result(run_id, t.workload, name, t.params, workloads.get(t.workload).unit, status,
                                       error, art.hash if art else None, experiment=t.experiment)
        out.append(a)
    return out


def execution_key(v: toolchain.Variant, art: artifacts.Artifact) -> tuple:
    """What decides how a measured process behaves: the executable's bytes, and what the
    variant sets around it (environment; ABI flags).  Equal keys need one measurement."""
    return art.code_hash, tuple(sorted(v.env)), tuple(v.abi_flags)


def resumed_targets(plan: Plan, store: Store, run_id: int, progress: Progress) -> list[Target]:
    """The results of a stopped run that are owed processes (pending, or ok with fewer
    than the plan's processes), with their artifacts (from the cache).  A result whose build
    now differs from the measured one (compiler or sources changed) becomes an error
    rather than mixing two executables under one name; its samples stay."""
    done = store.processes_measured(run_id)
    rounds = {e.name: plan.processes_of(e.name) for e in plan.experiments}  # each its family's first look
    owed = [r for r in store.results(run_id)
            if r.status in (Status.PENDING, Status.OK) and done.get(r.id, 0) < rounds[r.experiment]]
    progress.phase("build", len(owed))
    experiments = {e.name: e for e in plan.experiments}
    built: dict[tuple[str, str, tuple[str, ...]], Built] = {}
    targets = []
    for r in owed:
        key = (r.workload, r.variant, held(plan, experiments[r.experiment], r.workload))
        if key not in built:
            built[key] = build_variant(*build_of(plan, *key))
        b = built[key]
        why = f"not resumed: {b.status} now: {b.error}" if b.status != Status.PENDING else ""
        if b.artifact is not None and b.artifact.hash != r.artifact_hash:
            why = "not resumed: the build differs from the one measured (compiler or sources changed)"
        if why:
            store.set_status(r.id, Status.ERROR, why)
        else:
            targets.append(Target(r.experiment, r.workload, r.variant, r.params, r.id, b.artifact,
                                  rounds=done.get(r.id, 0), emulator=b.emulator, seed=plan.settings.seed))
        progress.advance(f"{r.workload} / {r.variant}" + (f": {why}" if why else ""))
    return targets
