"""Other tools' results in (hyperfine, Google Benchmark, pyperf) and cpulab's out
(github-action-benchmark, bencher, hyperfine).  The fixtures are files those tools wrote
(tests/fixtures/foreign); each test checks what the file itself says, not a timing."""
from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from cpulab import analysis
from cpulab.report import exports
from cpulab.store import foreign

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "foreign"


def load(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())


def imported(store, name: str, doc: dict | None = None, variant: str | None = None):
    doc = doc or load(name)
    run_id = foreign.import_parsed(store, foreign.parse(doc, foreign.detect(doc), Path(name), variant), [])
    return analysis.summarise(store, run_id)


@pytest.mark.parametrize("name,tool", [("hyperfine-sha256-md5.json", "hyperfine"), ("pyperf-timeit.json", "pyperf"),
                                       ("gbench-repetitions.json", "gbench"), ("gbench-aggregates.json", "gbench")])
def test_each_file_is_told_apart(name, tool):
    assert foreign.detect(load(name)) == tool


def test_hyperfine_times_become_processes_and_come_back_out(store):
    doc = load("hyperfine-sha256-md5.json")
    summary = imported(store, "hf.json", doc)
    by_command = {r.variant: r for r in summary.results}
    assert set(by_command) == {r["command"] for r in doc["results"]}
    for r in doc["results"]:
        mine = by_command[r["command"]]
        assert mine.processes == len(r["times"]) and mine.notes["estimator"] == "mean"
        assert mine.median == pytest.approx(1 / statistics.median(r["times"]), rel=1e-9)
    # the faster command by hyperfine's own mean is the faster one here too, with a verdict
    fast, slow = sorted(doc["results"], key=lambda r: r["mean"])
    c = next(c for c in summary.comparisons if {c.variant, c.baseline} == {fast["command"], slow["command"]})
    assert c.verdict == ("faster" if c.variant == fast["command"] else "slower")
    back = exports.hyperfine(summary)["results"]
    for r in doc["results"]:
        out = next(b for b in back if b["command"] == r["command"])
        assert sorted(out["times"]) == pytest.approx(sorted(r["times"]), rel=1e-9)
        assert out["mean"] == pytest.approx(statistics.fmean(r["times"]), rel=1e-9)


def test_a_failed_hyperfine_run_is_left_out_saying_why(store):
    doc = load("hyperfine-sha256-md5.json")
    doc["results"][0]["exit_codes"] = [1] + [0] * (len(doc["results"][0]["times"]) - 1)
    summary = imported(store, "hf.json", doc)
    r = next(r for r in summary.results if r.variant == doc["results"][0]["command"])
    assert r.processes == len(doc["results"][0]["times"]) - 1 and r.excluded_why == {"exit": 1}


def test_google_benchmark_repetitions_are_processes(store):
    doc = load("gbench-repetitions.json")
    summary = imported(store, "gb.json", doc)
    for r in summary.results:
        entries = [b for b in doc["benchmarks"] if b["run_name"] == r.workload and b["run_type"] == "iteration"]
        assert r.processes == len(entries) == entries[0]["repetitions"] and r.variant == "gbench"
        # iterations per second of each repetition: 1 / real_time (ns)
        assert r.median == pytest.approx(statistics.median(1e9 / b["real_time"] for b in entries) / 1e6, rel=1e-9)


def test_google_benchmark_aggregates_only_keep_n_and_cv_and_no_verdict(store):
    doc = load("gbench-aggregates.json")
    summary = imported(store, "agg.json", doc, variant="agg")
    for r in summary.results:
        agg = {b["aggregate_name"]: b for b in doc["benchmarks"] if b["run_name"] == r.workload}
        assert r.processes == 1 and r.ci is None and r.variant == "agg"
        assert r.notes["n"] == agg["median"]["repetitions"] and r.notes["cv"] == agg["cv"]["real_time"]
        assert "aggregates only" in r.notes["no_verdict"]


def test_pyperf_runs_are_processes_and_warmups_are_dropped(store):
    doc = load("pyperf-timeit.json")
    summary = imported(store, "pp.json", doc)
    runs = [r for r in doc["benchmarks"][0]["runs"] if r.get("values")]
    (r,) = summary.results
    assert r.workload == doc["metadata"]["name"] and r.processes == len(runs)
    samples = [s for rid in [r.id] for s in store.samples(rid)]
    assert len(samples) == sum(len(x["values"]) for x in runs)


def test_exports_have_exactly_the_published_fields(store):
    summary = imported(store, "hf.json", load("hyperfine-sha256-md5.json"))
    for e in exports.github_action_benchmark(summary):  # the action's custom format
        assert set(e) == {"name", "unit", "value", "range", "extra"}
        assert isinstance(e["value"], float) and all(isinstance(e[k], str) for k in ("name", "unit", "range", "extra"))
    bmf = exports.bencher(summary)  # Bencher Metric Format
    for measures in bmf.values():
        for m in measures.values():
            assert set(m) <= {"value", "lower_value", "upper_value"}
            assert m["lower_value"] <= m["value"] <= m["upper_value"]
    for r in exports.hyperfine(summary)["results"]:  # hyperfine --export-json
        assert set(r) == {"command", "mean", "stddev", "median", "user", "system", "min", "max", "times",
                          "exit_codes", "parameters"}
        assert r["min"] <= r["median"] <= r["max"] and len(r["exit_codes"]) == len(r["times"])


BROKEN = {
    "not json": "{",
    "no times": json.dumps({"results": [{"command": "a", "mean": 1.0}]}),
    "negative time": json.dumps({"results": [{"command": "a", "mean": 1.0, "times": [0.1, -2.0]}]}),
    "empty results": json.dumps({"results": []}),
    "gbench unit": json.dumps({"context": {}, "benchmarks": [{"name": "b", "iterations": 1, "real_time": 1.0,
                                                               "time_unit": "fortnights"}]}),
    "pyperf nameless": json.dumps({"version": "1.0", "benchmarks": [{"runs": [{"values": [1.0]}]}]}),
    "unknown": json.dumps({"hello": 1}),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_a_malformed_file_is_one_line_exit_2_and_writes_nothing(case, cli, tmp_path):
    ok = FIXTURES / "pyperf-timeit.json"
    assert cli("import", str(ok)).returncode == 0
    before = cli("runs", "--json").stdout
    bad = tmp_path / "bad.json"
    bad.write_text(BROKEN[case])
    p = cli("import", str(bad))
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and "bad.json" in p.stderr, p.stderr
    assert cli("runs", "--json").stdout == before


def test_hyperfine_format_needs_whole_commands(cli):
    assert cli("import", str(FIXTURES / "gbench-repetitions.json")).returncode == 0
    p = cli("export", "--format", "hyperfine")
    assert p.returncode == 2 and "no whole-command results" in p.stderr
