"""Machines side by side: any number of runs ranked by rate and per clock, seed 004's
table 1 with processors as rows, and their report; built from scripted stored runs."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from cpulab.cli.kinds import VIEWS
from cpulab.spec.record import RunRecord
from cpulab.analysis import between_runs
from cpulab.model import Result, Status
from cpulab.report import html
from cpulab.report.machine_views import machine_tables

# machine -> (rate of work per second, core GHz): b is fastest by rate, c per clock
MACHINES = {"a": (100.0, 2.0), "b": (200.0, 4.0), "c": (150.0, 2.0)}


def add_machine(store, name: str, rate: float, ghz: float, workloads=("des", "rc5-72")) -> int:
    fp = {"cpu_model": f"cpu {name}", "cpus": 2, "hostname": name, "caches": []}
    plan = RunRecord.make("plan", {"name": "p", "method": "turns",
                                   "experiments": [{"name": "per-clock", "variants": ["O2"], "baseline": "O2"}]})
    run_id = store.start_run(fp, f"{ord(name):x}", plan, {}, {}, [], label=name)
    for i, w in enumerate(workloads):
        rid = store.add_result(run_id, w, "O2", {}, "keys", Status.PENDING, experiment="per-clock")
        for proc in range(6):
            ns = 1e9 / (rate * (i + 1)) * (1 + 0.001 * proc)  # one unit of work per sample
            store.add_process(rid, proc, {"ns": [ns], "cycles": [ns * ghz], "instructions": [None], "work": 1,
                                             "reps": 1, "user_s": [None], "sys_s": [None], "timer": "tsc"}, 0)
    store.finish_run(run_id, "done")
    return run_id


@pytest.fixture
def doc(store):
    ids = [add_machine(store, m, *spec) for m, spec in MACHINES.items()]
    return between_runs.machines_summary(store, ids)


def test_machines_are_ranked_by_rate_with_their_standing_per_clock(doc):
    rank = {r.machine: r for r in doc.ranking}
    assert [r.machine for r in doc.ranking] == ["b", "c", "a"] and [r.rank for r in doc.ranking] == [1, 2, 3]
    assert rank["b"].pct_of_best_rate == pytest.approx(100, rel=1e-3)
    assert rank["a"].pct_of_best_rate == pytest.approx(50, rel=1e-3)
    # per clock: cycles per unit = GHz / rate; c (75 units per GHz) is the best, a and b 50
    assert rank["c"].pct_of_best_per_clock == pytest.approx(100, rel=1e-3)
    assert rank["a"].pct_of_best_per_clock == pytest.approx(100 * 50 / 75, rel=1e-3)
    assert all(r.points == 2 for r in doc.ranking)


def test_processors_are_rows_of_seed_004s_table(doc):
    tables = {t.name: t for t in machine_tables(doc)}
    t = tables["processors"]
    assert [row[0].value for row in t.rows] == ["a", "b", "c"] and len(t.columns) == 1 + 2 * 2
    assert [str(row[2]) for row in t.rows] == ["67%", "67%", "100%"]


def test_no_verdict_across_machines_until_their_drift_is_known(doc):
    # 1.5x apart, but no machine has pairs of runs of the same code: nothing can be called
    rows = [r for r in doc.machine_table if r.machine != r.reference]
    assert rows and all(r.verdict == "unclear" for r in rows)
    assert doc.drift == {"fraction": None, "pairs": 0, "needed": between_runs.DRIFT_MIN_PAIRS}


def test_cross_run_a_a_with_a_busy_loop_in_half_the_runs_gives_few_false_verdicts():
    """One machine's runs of the same code, half of them 30% slow (a busy loop beside
    them) and each with 2% of noise of its own: the drift from 20 earlier pairs of runs
    keeps false verdicts between two later runs at or below 5%; with 4 pairs there is
    no verdict at all."""
    rng = np.random.default_rng(3)

    def run_shift():
        return math.log(0.7 if rng.random() < 0.5 else 1.0) + rng.normal(0, 0.02)

    def result(shift):
        obs = {i: 100 * math.exp(shift + rng.normal(0, 0.01)) for i in range(12)}
        return Result(0, "e", "w", "O2", {}, "bytes", "MB/s", "cycles/byte", Status.OK, observations=obs)

    history = [run_shift() for _ in range(21)]
    drift = between_runs.drift_bound([b - a for a, b in zip(history, history[1:])])
    assert between_runs.drift_bound([0.1] * (between_runs.DRIFT_MIN_PAIRS - 1)) is None
    false = 0
    for _ in range(400):
        (_, _, verdict), = between_runs.apart_verdicts([(None, result(run_shift()), result(run_shift()))], drift)
        false += verdict in ("faster", "slower")
    assert false <= sps.binom.ppf(0.999, 400, 0.05)


def test_the_report_of_several_runs_shows_them_ranked(doc, tmp_path):
    text = html.write(doc, tmp_path / "m.html", VIEWS).read_text()
    assert "machines ranked" in text and "cpu c" in text and "seed 004" in text


def _family_false_rate(drift: float | None, runs: list, rng, pairs: int = 200) -> float:
    """How often an A/A family of a run's points against another's has any false verdict,
    the two runs drawn from `runs` (callables giving one run's log shift per point)."""
    false = 0
    for _ in range(pairs):
        a, b = (run() for run in runs)
        family = [(None, *(Result(0, "e", "w", "O2", {"n": str(p)}, "bytes", "MB/s", "cycles/byte", Status.OK,
                                  observations={i: 100 * math.exp(s[p] + rng.normal(0, 0.003)) for i in range(12)})
                           for s in (a, b))) for p in range(len(a))]
        false += any(v in ("faster", "slower") for _, _, v in between_runs.apart_verdicts(family, drift))
    return false / pairs


def test_cross_run_drift_holds_for_single_points_and_for_runs_far_apart():
    """Ten points, each moved 1.5% by every run on its own (a point-specific run effect):
    the drift calibrated on each point's own ratio keeps A/A families between two runs
    at about 5% false (a median over points hid it: 50%).  A slow drift of 0.7% per run:
    the first run against the twentieth clears the drift of runs that far apart."""
    rng = np.random.default_rng(11)

    def point_run():
        return [rng.normal(0, 0.015) for _ in range(10)]
    history = [{("w", "c", p): math.exp(s) for p, s in enumerate(point_run())} for _ in range(21)]
    drift, pairs = between_runs.drift_from(history)
    assert pairs == 20
    assert _family_false_rate(drift, [point_run, point_run], rng) <= 0.08

    slow = [{("w", "c", p): math.exp(0.007 * r + rng.normal(0, 0.001)) for p in range(10)} for r in range(21)]
    near, _ = between_runs.drift_from(slow, 1)
    far, _ = between_runs.drift_from(slow, 19)
    assert far > 19 * 0.007 > near  # runs 19 apart moved 13%: the bound for them covers it
    assert _family_false_rate(far, [lambda: [0.0] * 10, lambda: [19 * 0.007] * 10], rng, 50) == 0


def test_runs_far_apart_are_compared_at_their_true_distance(store):
    """Sixty runs of one build on one machine drifting 0.5% a run (a random walk): the first
    and the last are 59 runs apart, though only the latest 40 are read for the drift
    (runs outside them were once taken as neighbours), and their comparison clears the
    drift of runs that far apart."""
    rng = np.random.default_rng(5)
    plan = RunRecord.make("plan", {"name": "p", "method": "turns",
                                   "experiments": [{"name": "e", "variants": ["O2"], "baseline": "O2"}]})
    store.add_artifact({"hash": "h1", "code_hash": "c1", "path": "", "size_bytes": 1, "compiler_version": "",
                        "commands": []})
    walk, ids = 0.0, []
    for _ in range(60):
        walk += rng.normal(0, 0.005)
        run_id = store.start_run({"cpu_model": "cpu a"}, "aa", plan, {}, {}, [])
        for point in range(5):
            rid = store.add_result(run_id, "w", "O2", {"p": str(point)}, "keys", Status.PENDING, experiment="e",
                                   artifact_hash="h1")
            for proc in range(6):
                ns = 1e6 * math.exp(walk + rng.normal(0, 0.001))
                store.add_process(rid, proc, {"ns": [ns], "cycles": [None], "instructions": [None], "work": 1,
                                              "reps": 1, "user_s": [None], "sys_s": [None], "timer": "tsc"}, 0)
        store.finish_run(run_id, "done")
        ids.append(run_id)
    assert between_runs.run_distance(store, "aa", [ids[0], ids[-1]]) == 59
    assert between_runs.run_distance(store, "aa", [ids[-2], ids[-1]]) == 1
    far, _ = between_runs.machine_drift(store, "aa", 59)
    near, _ = between_runs.machine_drift(store, "aa", 1)
    pair = between_runs.compare_runs(store, ids[0], ids[-1])
    assert far > 2 * near and pair.drift["fraction"] == pytest.approx(math.expm1(far))
