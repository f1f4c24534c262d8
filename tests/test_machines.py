"""Machines side by side: any number of runs ranked by rate and per clock, seed 004's
table 1 with processors as rows, and their report; built from scripted stored runs."""
from __future__ import annotations

import pytest

from cpulab.analysis import between_runs
from cpulab.model import Status
from cpulab.report import html
from cpulab.report.views import machine_tables

# machine -> (rate of work per second, core GHz): b is fastest by rate, c per clock
MACHINES = {"a": (100.0, 2.0), "b": (200.0, 4.0), "c": (150.0, 2.0)}


def add_machine(store, name: str, rate: float, ghz: float, workloads=("des", "rc5-72")) -> int:
    fp = {"cpu_model": f"cpu {name}", "cpus": 2, "hostname": name, "caches": []}
    plan = {"name": "p", "experiments": [{"name": "per-clock", "variants": ["O2"], "baseline": "O2"}]}
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
    rank = {r["machine"]: r for r in doc["ranking"]}
    assert [r["machine"] for r in doc["ranking"]] == ["b", "c", "a"]
    assert rank["b"]["pct_of_best_rate"] == pytest.approx(100, rel=1e-3)
    assert rank["a"]["pct_of_best_rate"] == pytest.approx(50, rel=1e-3)
    # per clock: cycles per unit = GHz / rate; c (75 units per GHz) is the best, a and b 50
    assert rank["c"]["pct_of_best_per_clock"] == pytest.approx(100, rel=1e-3)
    assert rank["a"]["pct_of_best_per_clock"] == pytest.approx(100 * 50 / 75, rel=1e-3)
    assert all(r["points"] == 2 for r in doc["ranking"])


def test_processors_are_rows_of_seed_004s_table(doc):
    tables = {t.name: t for t in machine_tables(doc)}
    t = tables["processors"]
    assert [row[0].value for row in t.rows] == ["a", "b", "c"] and len(t.columns) == 1 + 2 * 2
    assert [str(row[2]) for row in t.rows] == ["67%", "67%", "100%"]


def test_verdicts_across_machines_clear_their_drift(doc):
    # 1.5x apart clears the default 10% drift; every row has a verdict or is the reference
    rows = [r for r in doc["machine_table"] if r["machine"] != r["reference"]]
    assert rows and all(r["verdict"] == "slower" for r in rows)


def test_the_report_of_several_runs_shows_them_ranked(doc, tmp_path):
    text = html.write(doc, tmp_path / "m.html").read_text()
    assert "machines ranked" in text and "cpu c" in text and "seed 004" in text
