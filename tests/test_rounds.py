"""The one rounds loop and its looks, on scripted samples: a FakeExecutor times nothing, so
the logic is tested without spawning a process and whatever the machine's load."""
from __future__ import annotations

import random

from conftest import FakeExecutor
from cpulab.spec.record import RunRecord
from cpulab.measure.execute.processes import UNIT
from cpulab.measure.schedule import process_rounds
from cpulab.measure.schedule.process_rounds import ProcessTarget, Rounds
from cpulab.spec.schedule import Schedule
from cpulab.model import Status
from cpulab.spec.policy import DecisionPolicy

FIRST = 8  # rounds at the first look


def timed(slower: float, noise: float, seed: int = 1):
    """Seconds of each run: A takes 10 ms, B `slower` times that; both jitter by `noise`."""
    rng = random.Random(seed)
    return lambda job: 0.010 * (slower if job.command == ["b"] else 1.0) * (1 + noise * rng.uniform(-1, 1))


def measure(store, wall, budget: float) -> tuple[FakeExecutor, dict[str, int]]:
    """`cpulab time a b` as the loop sees it; returns the executor and each command's processes."""
    plan = {"name": "t", "processes": FIRST, "budget": budget, "method": "paired",
            "experiments": [{"name": "t", "workloads": ["time"], "variants": ["a", "b"], "baseline": "a"}]}
    run_id = store.start_run({}, "m", RunRecord.make("time", plan), {}, {}, [])
    targets = [ProcessTarget(store.add_result(run_id, "time", v, {}, UNIT, Status.PENDING, experiment="t"),
                             v, ("t",), [v]) for v in ("a", "b")]
    schedule = Schedule(first={"t": FIRST}, budget={"t": budget}, policy=DecisionPolicy(budgeted=bool(budget), method="paired"),
                        baselines={"t": "a"})
    ex = FakeExecutor(wall)
    process_rounds.measure(store, targets, Rounds(warmup=0), schedule, ex, rng=random.Random(2))
    return ex, {t.label: len({s.process for s in store.samples(t.result_id)}) for t in targets}


def test_one_look_at_a_time_measures_what_the_whole_loop_does(tmp_path):
    """Given a Looks, measure_rounds stops at each look that asks for more, saying so,
    and the next call goes on from there: a lane takes an experiment's looks one by one
    (runner), and they add up to the rounds and samples of the whole loop."""
    from types import SimpleNamespace
    from cpulab.measure.execute.processes import process_record
    from cpulab.measure.schedule.rounds import Looks, QuietProgress, measure_rounds
    from cpulab.store.db import Store

    def run(looks):
        store = Store(tmp_path / f"{looks is not None}.sqlite")
        plan = {"name": "t", "processes": FIRST, "budget": 1.0, "method": "paired",
                "experiments": [{"name": "t", "workloads": ["time"], "variants": ["a", "b"], "baseline": "a"}]}
        run_id = store.start_run({}, "m", RunRecord.make("time", plan), {}, {}, [])
        targets = [ProcessTarget(store.add_result(run_id, "time", v, {}, UNIT, Status.PENDING, experiment="t"),
                                 v, ("t",), [v]) for v in ("a", "b")]
        wall = timed(1.0, 0.3)  # no difference in 30% jitter: undecided look after look

        def run_round(k, order):
            for t in order:
                took = wall(SimpleNamespace(command=t.command))
                store.add_process(t.result_id, t.rounds, process_record({"wall_s": took, "user_s": took,
                                                                        "sys_s": 0.0, "exit": 0}), 0)
                t.rounds += 1
            return 0.02
        schedule = Schedule(first={"t": FIRST}, budget={"t": 1.0}, baselines={"t": "a"},
                            policy=DecisionPolicy(budgeted=True, method="paired"))
        rng, calls = random.Random(2), 0
        while measure_rounds(store, {("t",): targets}, schedule, run_round, QuietProgress(), rng, looks=looks):
            calls += 1
            assert looks.goal[("t",)] == 2 * looks.done[("t",)]  # the next look set, none of it run
        samples = {t.label: [s.ns for s in store.samples(t.result_id)] for t in targets}
        return calls, samples
    calls, one_by_one = run(Looks())
    _, whole = run(None)
    assert calls >= 2 and one_by_one == whole and len(whole["a"]) > FIRST * 4


def test_a_fixed_count_gives_every_command_its_rounds_each_round_whole(store):
    ex, done = measure(store, timed(1.0, 0.2), budget=0.0)
    assert done == {"a": FIRST, "b": FIRST}
    timed_runs = [j.command[0] for j in ex.jobs[2:]]  # after each command's one checked run
    for i in range(FIRST):  # each round runs both, back to back, in its own order
        assert sorted(timed_runs[2 * i:2 * i + 2]) == ["a", "b"]


def test_a_clear_difference_is_decided_at_the_first_look(store):
    _, done = measure(store, timed(1.05, 0.002), budget=60.0)
    assert done == {"a": FIRST, "b": FIRST}


def test_an_undecided_point_gets_looks_while_its_budget_lasts(store):
    """30% jitter and no difference: never within 1%, so the looks go on (8, 16, 32, 64
    rounds: more than three) until the budget is spent, about 50 rounds of 20 ms."""
    _, done = measure(store, timed(1.0, 0.3), budget=1.0)
    assert FIRST * 4 < done["a"] == done["b"] < FIRST * 8


def test_rounds_after_a_look_run_only_the_undecided_comparisons(store):
    """`cpulab time a b c`: b 5% slower than a with 0.2% noise is decided at the first
    look; c, a's twin in 30% jitter, is not.  The later rounds run a and c alone, and b
    keeps the first look's rounds, its verdict the one they gave."""
    from cpulab import analysis
    rng = random.Random(1)
    noise = {"a": 0.002, "b": 0.002, "c": 0.3}
    plan = {"name": "t", "processes": FIRST, "budget": 1.0, "method": "paired",
            "experiments": [{"name": "t", "workloads": ["time"], "variants": ["a", "b", "c"], "baseline": "a"}]}
    run_id = store.start_run({}, "m", RunRecord.make("time", plan), {}, {}, [])
    targets = [ProcessTarget(store.add_result(run_id, "time", v, {}, UNIT, Status.PENDING, experiment="t"),
                             v, ("t",), [v]) for v in ("a", "b", "c")]
    schedule = Schedule(first={"t": FIRST}, budget={"t": 1.0}, policy=DecisionPolicy(budgeted=True, method="paired"),
                        baselines={"t": "a"})
    ex = FakeExecutor(lambda job: 0.010 * (1.05 if job.command == ["b"] else 1.0)
                      * (1 + noise[job.command[0]] * rng.uniform(-1, 1)))
    process_rounds.measure(store, targets, Rounds(warmup=0), schedule, ex, rng=random.Random(2))
    rounds = {t.label: sorted({s.process for s in store.samples(t.result_id)}) for t in targets}
    assert rounds["b"] == list(range(FIRST)) and rounds["a"] == rounds["c"] == list(range(len(rounds["a"])))
    assert len(rounds["a"]) > 2 * FIRST
    verdicts = {c.variant: c.verdict for c in analysis.summarise(store, run_id).comparisons}
    assert verdicts["b"] == "slower" and verdicts["c"] != "slower"


def test_no_round_is_added_once_the_budget_is_spent(store):
    _, done = measure(store, timed(1.0, 0.3), budget=0.05)  # the first look alone takes about 0.16 s
    assert done == {"a": FIRST, "b": FIRST}


def test_kernels_in_turns_without_processes(store):
    """The default path (kernels of a point in turns) on a fake site and executor: every
    round is one group whose members take their samples in pairs in the turn orders drawn, the
    turns and the member before each sample are stored, and a 3% difference with 0.2%
    noise is decided at the first look."""
    from conftest import FakeSite
    from cpulab import analysis
    from cpulab.measure.schedule import runner
    from cpulab.plan import plan as plans
    from cpulab.spec.settings import Settings
    rng = random.Random(3)
    wall = lambda job: 0.001 * (0.97 if "-O3" in job.artifact_path else 1.0) * (1 + 0.002 * rng.random())  # noqa: E731
    p = plans.validate(plans.Plan("t", [plans.Experiment("t", ["sha256"], ["O2", "O3"], "O2",
                                                         params={"sha256": {"size": ["256"]}})], Settings(processes=FIRST, samples=6, budget=30.0)))
    ex = FakeExecutor(wall)
    run_id = runner.run_plan(p.given(seed=4), store, site=FakeSite(ex))
    s = analysis.summarise(store, run_id)
    (c,) = s.comparisons
    assert c.verdict == "faster" and c.rounds == FIRST and abs(c.ratio - 1 / 0.97) < 0.005
    by_process: dict[int, list[tuple]] = {}
    for r in store.results(run_id):
        for smp in store.samples(r.id):
            by_process.setdefault(smp.process, []).append((smp, r.variant))
    assert sorted(by_process) == list(range(FIRST)) and all(j.turns for j in ex.jobs)
    for samples in by_process.values():  # one round: 3 turns, each member taking two samples in a row
        order = sorted(samples, key=lambda x: x[0].start_ns)
        assert [smp.turn for smp, _ in order] == [0, 1, 2, 3] * 3
        assert all(a[1] == b[1] for a, b in zip(order[::2], order[1::2]))
        assert [smp.follows for smp, _ in order[1:]] == [variant for _, variant in order[:-1]]


def test_the_rounds_sure_to_run_end_at_the_look_under_way():
    """Looks end at n, 2n, 4n rounds: a point is sure of the rounds to the end of the look
    it is in, and at a look's end of none more (the look decides); without a budget, of
    the first look's alone."""
    policy = DecisionPolicy(budgeted=True, method="paired")
    looks = Schedule(first={"t": 5}, budget={"t": 20.0}, policy=policy, baselines={"t": "a"})
    fixed = Schedule(first={"t": 5}, budget={"t": 0.0}, policy=policy, baselines={"t": "a"})
    assert [looks.sure_rounds("t", done) for done in range(22)] == [5] * 6 + [10] * 5 + [20] * 10 + [40]
    assert {fixed.sure_rounds("t", done) for done in range(22)} == {5}


def test_the_linker_links_ahead_no_round_past_the_look_under_way():
    """Two rounds ahead of a target's next, but none its look may not run: a target at
    its first look's end has every placement of that look and no more."""
    import threading
    import time
    from cpulab.compile.artifacts import Artifact
    from cpulab.measure.schedule.targets import Target, linking_ahead
    linked, lock = set(), threading.Lock()

    class Site:
        def place(self, art, i):
            with lock:
                linked.add(i)

    art = Artifact("/fake/k", "k", "k", 1, "fake", (), placeable=True)
    t = Target("t", "sha256", "O2", {}, artifact=art, seed=9)
    schedule = Schedule(first={"t": 3}, budget={"t": 20.0}, policy=DecisionPolicy(budgeted=True, method="paired"),
                        baselines={"t": "O2"})
    with linking_ahead([t], Site(), 0, schedule):
        for done in range(4):  # rounds 0, 1 and 2 run, then the look
            t.rounds = done
            until = time.monotonic() + 10
            while time.monotonic() < until and {t.placement_at(r) for r in range(done, min(done + 2, 3))} - linked:
                time.sleep(0.01)
        time.sleep(0.2)  # the linker looks every 50 ms: time to link round 3, were it to
    assert linked == {t.placement_at(r) for r in range(3)}
