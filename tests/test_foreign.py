"""Other tools' results in (hyperfine, Google Benchmark, pyperf, criterion.rs, go test
-bench, JMH, BenchmarkDotNet) and cpulab's out (github-action-benchmark, bencher,
hyperfine).  The fixtures (tests/fixtures/foreign) are files those tools wrote, and for
the last four files written to each tool's documented layout (no Rust, Go, JVM or .NET
here); each test checks what the file itself says, not a timing."""
from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

import pytest

from cpulab import analysis
from cpulab.report import exports
from cpulab.store import foreign, harnesses
from cpulab.store.db import Store

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "foreign"


def load(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())


def imported(store, name: str, doc: dict | None = None, variant: str | None = None):
    doc = doc or load(name)
    run_id, _ = foreign.import_parsed(store, foreign.parse(doc, foreign.detect(doc), Path(name), variant), [])
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
    "jmh unit": json.dumps([{"jmhVersion": "1.37", "benchmark": "b", "mode": "avgt",
                             "primaryMetric": {"score": 1.0, "scoreUnit": "ops/s", "rawData": [[1.0]]}}]),
    "jmh sample mode": json.dumps([{"jmhVersion": "1.37", "benchmark": "b", "mode": "sample",
                                    "primaryMetric": {"score": 1.0, "scoreUnit": "us/op", "rawData": [[1.0]]}}]),
    "bdn no workload": json.dumps({"HostEnvironmentInfo": {}, "Benchmarks": [{"Type": "T", "Method": "M",
                                   "Measurements": [{"IterationMode": "Overhead", "IterationStage": "Actual",
                                                     "LaunchIndex": 1, "Operations": 1, "Nanoseconds": 1.0}]}]}),
    "criterion lengths": json.dumps({"sampling_mode": "Linear", "iters": [1.0, 2.0], "times": [5.0]}),
    "go bad line": "goos: linux\nBenchmarkX-2   100   fast ns/op\n",
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_a_malformed_file_is_one_line_exit_2_and_writes_nothing(case, cli, tmp_path):
    store = Store(cli.db)  # a good run first (through the API: one command a case keeps this quick)
    imported_path(store, FIXTURES / "pyperf-timeit.json")
    before = store.runs()
    bad = tmp_path / "bad.json"
    bad.write_text(BROKEN[case])
    p = cli("import", str(bad))
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and "bad.json" in p.stderr, p.stderr
    assert Store(cli.db).runs() == before


def test_hyperfine_format_needs_whole_commands(cli):
    assert cli("import", str(FIXTURES / "gbench-repetitions.json")).returncode == 0
    p = cli("export", "--format", "hyperfine")
    assert p.returncode == 2 and "no whole-command results" in p.stderr


def imported_path(store, path: Path, variant: str | None = None):
    run_id, _ = foreign.import_parsed(store, harnesses.parse(path, harnesses.detect(path), variant), [])
    return analysis.summarise(store, run_id)


@pytest.mark.parametrize("name,tool", [("criterion", "criterion"), ("criterion/sha256/1KiB/new/sample.json", "criterion"),
                                       ("go-bench-count3.txt", "gotest"), ("jmh-hash.json", "jmh"),
                                       ("bdn-hash-report-full.json", "bdn"), ("pyperf-timeit.json", "pyperf")])
def test_each_harness_file_is_told_apart_by_path(name, tool):
    assert harnesses.detect(FIXTURES / name) == tool


def test_criterion_samples_are_processes_named_by_their_benchmark(store):
    summary = imported_path(store, FIXTURES / "criterion", variant="rust")
    assert {r.workload for r in summary.results} == {"sha256/1KiB", "sha256/64KiB"}
    for r in summary.results:
        s = load(f"criterion/{r.workload}/new/sample.json")
        assert r.processes == len(s["iters"]) and r.variant == "rust"
        # iterations per second of each sample, in Miter/s
        assert r.median == pytest.approx(statistics.median(n / t * 1e3 for n, t in zip(s["iters"], s["times"])),
                                         rel=1e-9)


def test_go_bench_lines_with_count_are_processes(store):
    summary = imported_path(store, FIXTURES / "go-bench-count3.txt")
    by = {r.workload: r for r in summary.results}
    assert set(by) == {"SHA256/1KiB", "MD5/1KiB"} and all(r.processes == 3 for r in by.values())
    assert by["SHA256/1KiB"].median == pytest.approx(1e3 / 2431, rel=1e-9)  # Miter/s from the median ns/op
    assert by["MD5/1KiB"].notes["gomaxprocs"] == "2" and by["MD5/1KiB"].notes["median B/op"] == 0
    assert summary.machine["cpu_model"] == "Intel(R) Xeon(R) Processor"


def test_jmh_forks_are_processes_in_either_mode(store):
    doc = load("jmh-hash.json")
    summary = imported_path(store, FIXTURES / "jmh-hash.json")
    by = {(r.workload, r.params["size"]): r for r in summary.results}
    thrpt = by[("org.example.HashBench.sha256", "1024")]
    assert thrpt.processes == 2 and thrpt.rate_unit == "ops/s"
    # a process's estimate is the fastest of its first samples (of 3, the first 2: stats.keep_count)
    assert thrpt.median == pytest.approx(statistics.median(max(f[:2]) for f in doc[0]["primaryMetric"]["rawData"]),
                                         rel=1e-9)
    avgt = by[("org.example.HashBench.md5", "1024")]  # us/op: ops/s is 1e6 / us
    assert avgt.median == pytest.approx(statistics.median(1e6 / min(f[:2]) for f in doc[2]["primaryMetric"]["rawData"]),
                                        rel=1e-9)


def test_benchmarkdotnet_launches_are_processes_of_their_result_iterations(store):
    doc = load("bdn-hash-report-full.json")
    summary = imported_path(store, FIXTURES / "bdn-hash-report-full.json", variant="net8")
    by = {r.workload: r for r in summary.results}
    assert set(by) == {"HashBench.Sha256", "HashBench.Md5"} and by["HashBench.Md5"].params == {"N": "1000"}
    sha = by["HashBench.Sha256"]
    results = [m for m in doc["Benchmarks"][0]["Measurements"] if m["IterationStage"] == "Result"]
    assert sha.processes == 2  # the overhead-corrected iterations, not the Actual ones nor the warm-ups
    assert sorted(s.ns for s in store.samples(sha.id)) == pytest.approx(sorted(m["Nanoseconds"] for m in results))
    assert summary.machine["cpu_model"] == "Intel Xeon Processor"


def test_two_imports_of_one_harness_compare_run_against_run(tmp_path, cli):
    """The same go benchmarks imported twice (the second file's ns/op 10% higher) read
    1/1.1 against each other in `cpulab compare RUN_A RUN_B`, point by point."""
    slow = tmp_path / "slow.txt"
    slow.write_text(re.sub(r"(\d+) ns/op", lambda m: f"{int(m[1]) * 1.1:.1f} ns/op",
                           (FIXTURES / "go-bench-count3.txt").read_text()))
    for path in (FIXTURES / "go-bench-count3.txt", slow):
        assert cli("import", str(path)).returncode == 0
    r = cli("compare", "1", "2", "--json")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)["comparisons"]
    assert {row["workload"] for row in rows} == {"SHA256/1KiB", "MD5/1KiB"}
    assert all(row["ratio"] == pytest.approx(1 / 1.1, rel=1e-6) for row in rows), rows
