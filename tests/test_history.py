"""History over runs: change points on synthetic histories with known steps, and the
series read from a store whose runs carry labels and commits."""
from __future__ import annotations

import random

import pytest

from cpulab.spec.record import RunRecord
from cpulab.analysis import history
from cpulab.estimates import result_summary
from cpulab.model import Status


def noisy(n: int, seed: int, step_at: int | None = None, step: float = 1.0, noise: float = 0.02) -> list[float]:
    rng = random.Random(seed)
    return [100 * (1 + rng.gauss(0, noise)) * (step if step_at is not None and i >= step_at else 1) for i in range(n)]


def test_a_flat_history_rarely_has_a_change_point():
    false = sum(bool(history.change_points(noisy(30, seed))) for seed in range(100))
    assert false <= 5  # a penalty of 2 sigma^2 ln n gave 22 in 100: this bound catches a trigger-happy one


def test_a_five_percent_step_is_found_where_it_is():
    found = [history.change_points(noisy(24, seed, 12, 0.95)) for seed in range(100)]
    assert sum(any(abs(c - 12) <= 1 for c in cs) for cs in found) >= 70


def test_a_clear_step_is_found_every_time_and_alone_nearly_always():
    found = [history.change_points(noisy(20, seed, 8, 1.10, noise=0.005)) for seed in range(20)]
    assert all(8 in cs for cs in found) and sum(len(cs) > 1 for cs in found) <= 1


def test_noise_is_read_around_the_steps():
    flat = [0.0, 0.01, -0.01, 0.0, 0.01, -0.01, 0.0]
    stepped = flat[:4] + [x + 1.0 for x in flat[4:]]  # one jump of 1.0 among small differences
    assert history.noise(stepped) < 0.05


def add_run(store, label: str, commit_time: int, rate: float, machine: str = "m1", sizes=("1024",),
            experiments=("e",)) -> int:
    run_id = store.start_run({"cpu_model": machine}, machine, RunRecord.make("plan", {"name": "p"}), {}, {}, [], label=label,
                             origin={"commit": f"{commit_time:040x}", "dirty": False, "commit_time": commit_time})
    for experiment, size in ((e, size) for e in experiments for size in sizes):
        rid = store.add_result(run_id, "sha256", "O2", {"size": size}, "bytes", Status.PENDING,
                               experiment=experiment)
        for i in range(3):
            ns = 1e9 / rate * (1 + 0.001 * i)
            store.add_process(rid, i, {"ns": [ns], "cycles": [None], "instructions": [None], "work": 1, "reps": 1,
                                          "user_s": [None], "sys_s": [None], "timer": "clock"}, 0)
    store.finish_run(run_id, "done")
    return run_id


def test_series_follow_commit_order_and_find_the_inserted_step(store):
    commits = list(range(1000, 1012))
    random.Random(3).shuffle(commits)  # runs made in another order than their commits
    for t in commits:
        add_run(store, f"v{t - 999}", t, 1e6 * (0.9 if t >= 1006 else 1.0) * (1 + 0.002 * (t % 3)))
    add_run(store, "other machine", 2000, 5e5, machine="m2")
    (s,) = [x for x in history.series(store, "sha256", machine="m1")]
    assert [p["label"] for p in s["points"]] == [f"v{i}" for i in range(1, 13)] and s["order"] == "commit"
    s = history.with_changes(s)
    assert [c["at"] for c in s["changes"]] == [6] and abs(s["changes"][0]["change"] - 0.9) < 0.01
    assert history.series(store, "sha256", label="v3") == []  # one run is not a history


def test_a_runs_history_holds_its_results_series_on_its_machine_up_to_it(store):
    """run_history: each of the run's results, over the runs of its machine up to it (not
    later ones, not another machine's), with the step found; the store read once a run."""
    runs = [add_run(store, f"v{i}", 1000 + i, 1e6 * (0.9 if i >= 6 else 1.0) * (1 + 0.002 * (i % 3)),
                    sizes=("1024", "64")) for i in range(12)]
    add_run(store, "later", 2000, 5e5, sizes=("1024", "64"))
    add_run(store, "other machine", 1500, 5e5, machine="m2", sizes=("1024", "64"))
    reads = []
    results = store.results
    store.results = lambda run_id: reads.append(run_id) or results(run_id)
    found = history.run_history(store, runs[-1])
    assert sorted(s["params"]["size"] for s in found) == ["1024", "64"]
    for s in found:
        assert [p["run"] for p in s["points"]] == runs and [c["at"] for c in s["changes"]] == [6]
    assert sorted(reads) == sorted(runs + [runs[-1]])  # each earlier run once, and the run itself


def test_two_experiments_measuring_one_point_are_two_series(store):
    """A point measured by two experiments of each run (their own ways) is a series each,
    not one series with two points a run; --experiment picks one."""
    runs = [add_run(store, f"v{i}", 1000 + i, 1e6, experiments=("alone", "in-turns")) for i in range(4)]
    found = history.series(store, "sha256")
    assert sorted(s["experiment"] for s in found) == ["alone", "in-turns"]
    assert all([p["run"] for p in s["points"]] == runs for s in found)
    (s,) = history.series(store, "sha256", experiment="alone")
    assert s["experiment"] == "alone"
    assert sorted(s["experiment"] for s in history.run_history(store, runs[-1])) == ["alone", "in-turns"]


def test_a_result_is_estimated_once_per_estimator_and_again_after_new_samples(store, monkeypatch):
    """Histories keep each result's estimate (store: estimates) and read it back; a result
    that gets another process is estimated afresh, and so is every result under another
    estimator."""
    runs = [add_run(store, f"v{i}", 1000 + i, 1e6) for i in range(4)]
    first = history.series(store, "sha256")
    assert all(len(store.estimates(r, history.ESTIMATOR)) == 1 for r in runs)
    monkeypatch.setattr(history, "result_summary", lambda *a: pytest.fail("estimated again"))
    assert history.series(store, "sha256") == first
    (rid,) = store.estimates(runs[0], history.ESTIMATOR)
    store.add_process(rid, 3, {"ns": [500.0], "cycles": [None], "instructions": [None], "work": 1, "reps": 1,
                               "user_s": [None], "sys_s": [None], "timer": "clock"}, 0)
    assert store.estimates(runs[0], history.ESTIMATOR) == {}
    monkeypatch.setattr(history, "ESTIMATOR", "another")
    estimated = []
    monkeypatch.setattr(history, "result_summary", lambda r, s: estimated.append(r.id) or result_summary(r, s))
    (s,) = history.series(store, "sha256")
    assert len(estimated) == 4 and s["points"][0]["median"] > first[0]["points"][0]["median"]  # its new process twice as fast
