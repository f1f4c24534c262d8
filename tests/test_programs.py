"""Your own programs and `cpulab time`: build from a source tree with a Makefile the test
writes, check before timing, failures recorded per variant, bad input caught up front."""
from __future__ import annotations

import json
import os
import shutil
import textwrap
from pathlib import Path

import pytest

from conftest import cpulab, program_source
from cpulab.spec.record import RunRecord
from cpulab.compile import inputs
from cpulab.compile.programs import build_program, run_argv
from cpulab.measure.execute import processes
from cpulab.measure.schedule import runner
from cpulab.measure.execute.executor import LocalExecutor
from cpulab.measure.execute.processes import ProcessJob
from cpulab.model import Status
from cpulab.plan import plan as plans
from cpulab.plan import toolchain
from cpulab.plan.programs import Check
from cpulab.spec.policy import DecisionPolicy
from cpulab.store.db import Store

# One C program, told by its first argument how to behave, reading the input file it is given.
PROGRAM_C = r"""
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "ok";
    unsigned long sum = 0, n = 0;
    if (argc > 2) {
        FILE *f = fopen(argv[2], "rb");
        if (!f) return 3;
        int c;
        while ((c = getc(f)) != EOF) { sum = sum * 31 + (unsigned)c; n++; }
        fclose(f);
    }
    if (!strcmp(mode, "crash")) raise(SIGSEGV);
    if (!strcmp(mode, "hang")) for (;;) pause();
    if (!strcmp(mode, "wrong")) { printf("nonsense\n"); return 0; }
    printf("%016lx %lu\n", sum, n);
    return 0;
}
"""
MAKEFILE = "prog: prog.c\n\t$(CC) $(CFLAGS) -o prog prog.c\n"


@pytest.fixture
def source(tmp_path):
    return program_source(tmp_path, {"prog.c": PROGRAM_C, "Makefile": MAKEFILE})


def program_table(src: Path, mode: str = "ok", **over) -> dict:
    return {"source": str(src), "build": ["make CC={cc} CFLAGS='{cflags}'"],
            "run": "{build}/prog " + mode + " {file}", "check": {"exit": 0, "stdout_regex": "^[0-9a-f]{16} [0-9]+$"},
            "inputs": {"file": {"random_file": ["4K", "64K"]}}, **over}


def plan_dict(progs: dict, variants=("O2", "O3"), **over) -> dict:
    # a budget for a few looks: it counts the programs' own time (about 2 ms a run), not
    # the round's layout links (about 11 ms a program): 2 s of it took 15 s
    return {"name": "progs", "processes": 3, "timeout": 5, "budget": 0.25,
            "experiment": [{"name": "p", "workloads": list(progs), "variants": list(variants), "baseline": variants[0]}],
            "program": progs, **over}


def test_program_built_per_variant_checked_and_timed(source, tmp_path):
    p = plans.from_dict(plan_dict({"good": program_table(source)}), "t.toml")
    store = Store(tmp_path / "s.sqlite")
    run_id = runner.run_plan(p.given(seed=1), store)
    results = store.results(run_id)
    assert {(r.variant, r.params["file"]) for r in results} == {(v, s) for v in ("O2", "O3") for s in ("4K", "64K")}
    assert all(r.status == "ok" and r.unit == "runs" for r in results), results
    for r in results:
        samples = store.samples(r.id)
        # one sample per timed process; 3 rounds at the first look, and budget mode's looks
        # give an undecided point 6, 12, ... while its 0.25 s last (programs share the kernels' rounds loop)
        assert len(samples) == len({s.process for s in samples}) >= 3
        assert all(0 < s.ns < 5e9 and s.user_s >= 0 for s in samples)
        assert r.notes["median_max_rss_kb"] > 0
    # each variant's copy was built with its own flags, and the exact commands are kept
    builds = {a.key: a.data for a in store.analyses(run_id, "program-build")}
    assert "-O3" in builds["good/O3"]["commands"][0] and "-O2" in builds["good/O2"]["commands"][0]
    assert Path(builds["good/O2"]["log"]).read_text().startswith("$ make")
    assert not (source / "prog").exists()  # the source tree is never modified
    # built once: a second build of the same inputs is the cached one
    again = build_program(p.programs["good"], toolchain.BUILTIN["O2"])
    assert again.tree == builds["good/O2"]["tree"]


def test_build_failure_check_failure_crash_and_hang_are_recorded(source, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(source, broken)
    (broken / "prog.c").write_text("int main( { syntax error here\n")
    progs = {"broken": program_table(broken), "wrong": program_table(source, "wrong"),
             "crash": program_table(source, "crash"), "hang": program_table(source, "hang"),
             "good": program_table(source)}
    d = plan_dict(progs, variants=("O2",))
    d["timeout"] = 1
    p = plans.from_dict(d, "t.toml")
    store = Store(tmp_path / "s.sqlite")
    run_id = runner.run_plan(p.given(seed=2), store)
    by = {}
    for r in store.results(run_id):
        by.setdefault(r.workload, set()).add(r.status)
        if r.workload != "good":
            assert not store.samples(r.id), f"{r['workload']} was timed"  # failed the check: never timed
    assert by == {"broken": {"build-failed"}, "wrong": {"verify-failed"}, "crash": {"crash"},
                  "hang": {"timeout"}, "good": {"ok"}}
    err = next(r.error for r in store.results(run_id) if r.workload == "broken")
    assert "make" in err and "error" in err  # the failing step and the last lines of its log


def test_process_job_reads_the_launcher_report():
    job = ProcessJob(["sh", "-c", "echo 0123456789abcdef 5; exit 0"], processes.launcher(),
                     Check(0, "^[0-9a-f]{16} "), capture_stdout=True, timeout=10)
    out = LocalExecutor().execute(job)
    assert out.status == Status.OK, out.error
    assert 0 < out.data["wall_s"] < 10 and out.data["max_rss_kb"] > 0
    wrong = LocalExecutor().execute(ProcessJob(["sh", "-c", "exit 3"], processes.launcher(), Check(0), timeout=10))
    assert wrong.status == Status.VERIFY_FAILED and "exit status 3" in wrong.error
    missing = LocalExecutor().execute(ProcessJob(["/nonexistent/cmd"], processes.launcher(), timeout=10))
    assert missing.status == Status.ERROR and "No such file" in missing.error


def test_launcher_wall_time_covers_the_command():
    """A physical property with a wide margin: a 50 ms sleep takes 50 ms to 2 s."""
    out = LocalExecutor().execute(ProcessJob(["sleep", "0.05"], processes.launcher(), timeout=10))
    assert 0.05 <= out.data["wall_s"] < 2.0
    assert out.data["user_s"] + out.data["sys_s"] < out.data["wall_s"]  # sleeping costs no CPU


def test_random_inputs_are_made_once_and_sized(tmp_path):
    f = inputs.random_file(12345)
    assert f.stat().st_size == 12345
    mtime = f.stat().st_mtime_ns
    assert inputs.random_file(12345).stat().st_mtime_ns == mtime  # cached, not rewritten
    # not drop_caches here: as root that would empty the page cache of the whole machine
    assert processes.evict([str(f)], drop_caches=False) == "posix_fadvise"


@pytest.mark.parametrize("change, message", [
    ({"run": "{build}/prog ok {nofile}"}, "unknown template field {nofile}"),
    ({"build": ["make CC={compiler}"]}, "unknown template field {compiler}"),
    ({"source": "/no/such/source"}, "does not exist"),
    ({"check": {"stdout_regex": "([unclosed"}}, "not a valid regular expression"),
    ({"inputs": {"file": {"random_file": ["1024G"]}}}, "GiB free"),
    ({"inputs": {"file": {"random_file": ["ten"]}}}, "'ten' is not a size"),
    ({"frobnicate": 1}, "unknown key 'frobnicate'"),
])
def test_bad_program_input_is_one_line_exit_2_before_building(source, tmp_path, change, message):
    plan_file = tmp_path / "bad.toml"
    plan_file.write_text(_toml(plan_dict({"x": program_table(source, **change)})))
    r = cpulab("run", str(plan_file), db=tmp_path / "s.sqlite")
    assert r.returncode == 2, r.stderr
    assert message in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not any((Path(os.environ["CPULAB_CACHE_DIR"]) / "programs").glob("x-*"))  # nothing was built


def _toml(d: dict, prefix: str = "") -> str:
    """Just enough TOML for these plans: scalars and lists at top, tables below."""
    lines, tables = [], []
    for k, v in d.items():
        if isinstance(v, dict):
            tables.append((k, v))
        elif isinstance(v, list) and v and isinstance(v[0], dict):
            for item in v:
                lines.append(f"[[{prefix}{k}]]\n" + _toml(item))
        else:
            lines.append(f"{k} = {json.dumps(v)}")
    out = "\n".join(ln for ln in lines if not ln.startswith("[[")) + "\n"
    out += "\n".join(ln for ln in lines if ln.startswith("[[")) + "\n"
    for k, v in tables:
        if all(isinstance(x, dict) for x in v.values()) and k == "program":
            for name, body in v.items():
                inline = {kk: vv for kk, vv in body.items()}
                out += f"[program.{name}]\n" + "\n".join(f"{kk} = {_inline(vv)}" for kk, vv in inline.items()) + "\n"
        else:
            out += f"{k} = {_inline(v)}\n"
    return out


def _inline(v) -> str:
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {_inline(x)}" for k, x in v.items()) + " }"
    if isinstance(v, list):
        return "[" + ", ".join(_inline(x) for x in v) + "]"
    return json.dumps(v)


def test_time_commands_gives_verdicts_and_exports(tmp_path):
    export = tmp_path / "out.csv"
    r = cpulab("time", "--runs", "6", "--warmup", "1", "true", "sleep 0.05", "--export-csv", str(export), "--json",
            db=tmp_path / "s.sqlite")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    res = {x["variant"]: x for x in doc["results"]}
    assert set(res) == {"true", "sleep 0.05"} and all(x["status"] == "ok" and x["processes"] == 6
                                                       for x in res.values())
    assert res["sleep 0.05"]["real_s"] >= 0.05  # physical: it cannot finish sooner
    assert doc["time_split"][""]["programs"] >= 6 * 0.05  # the time split holds the timed runs
    (c,) = doc["comparisons"]
    assert c["baseline"] == "true" and c["variant"] == "sleep 0.05"
    assert c["verdict"] == "slower"  # 50 ms of sleep against a few ms: far beyond noise
    assert "sleep 0.05" in export.read_text()
    html = tmp_path / "r.html"
    r = cpulab("report", "-o", str(html), db=tmp_path / "s.sqlite")  # the report reads a time run unchanged
    assert r.returncode == 0, r.stderr
    assert "sleep 0.05" in html.read_text() and "real s" in html.read_text()


def test_time_decides_as_run_does_and_runs_alone_is_a_fixed_count(tmp_path):
    """Without --runs, `cpulab time` takes a plan's first look (the fewest rounds that can
    be significant) and budget; --runs alone is exactly that many rounds.  On x86 each
    run's core cycles are read around it; `sleep` waits most of its time, so the two are
    compared in wall time, which counts all of it."""
    import platform
    r = cpulab("time", "--warmup", "0", "true", "sleep 0.001", "--json", db=tmp_path / "s.sqlite")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    first = DecisionPolicy.of_settings(1.0, 0.01, "paired").first_look(1)
    assert doc["plan"]["budget"] > 0 and doc["plan"]["processes"] == first
    assert all(x["processes"] >= first for x in doc["results"])
    if platform.machine() in ("x86_64", "i686"):
        assert doc["comparisons"][0]["basis"] == "time"
        assert all(x["cycles_per_unit"] > 0 for x in doc["results"])
    r = cpulab("time", "--runs", "3", "--warmup", "0", "true", "true", "-n", "a", "-n", "b", "--json",
               db=tmp_path / "s.sqlite")
    doc = json.loads(r.stdout)
    assert doc["plan"]["budget"] == 0 and [x["processes"] for x in doc["results"]] == [3, 3]


def test_time_scans_prepare_and_no_shell(tmp_path):
    marker = tmp_path / "prepared"
    r = cpulab("time", "--runs", "2", "--warmup", "0", "-L", "n", "1,2", "-P", "k", "0", "1",
            "--prepare", f"touch {marker}", "echo {n} {k} $HOME", "--json", db=tmp_path / "s.sqlite")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert sorted((x["params"]["n"], x["params"]["k"]) for x in doc["results"]) == \
        [("1", "0"), ("1", "1"), ("2", "0"), ("2", "1")]
    assert marker.exists()
    # no shell: a shell operator is an argument, so `false || true` runs false and fails its check
    r = cpulab("time", "--runs", "2", "false || true", "--json", db=tmp_path / "s.sqlite")
    assert r.returncode == 0, r.stderr
    (res,) = json.loads(r.stdout)["results"]
    assert res["status"] == "verify-failed"
    r = cpulab("time", "--runs", "2", "--shell", "false || true", "--json", db=tmp_path / "s.sqlite")
    assert json.loads(r.stdout)["results"][0]["status"] == "ok"


@pytest.mark.parametrize("args, message", [
    (["-P", "n", "a", "3", "true"], "-P n"),
    (["true", "echo 'unclosed"], "No closing quotation"),
    (["-n", "a", "true", "false"], "--name given 1 times"),
    (["--cpu", "999", "true"], "--cpu 999"),
])
def test_time_bad_input_is_one_line_exit_2(tmp_path, args, message):
    r = cpulab("time", *args, db=tmp_path / "s.sqlite")
    assert r.returncode == 2 and message in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_seed002_example_plan_parses(tmp_path):
    text = (Path(__file__).resolve().parents[1] / "examples" / "seed002-hashdeep.toml").read_text()
    src = tmp_path / "hashdeep"
    src.mkdir()
    plan_file = tmp_path / "seed002.toml"
    plan_file.write_text(text.replace('"~/src/hashdeep"', json.dumps(str(src))))
    if shutil.disk_usage(tmp_path).free < (3 << 30):  # its 1.1 GiB of inputs plus the margin
        pytest.skip("needs 3 GiB free disk for the inputs check")
    p = plans.load(str(plan_file))
    prog = p.programs["hashdeep"]
    assert [pt["file"] for pt in prog.grid()] == ["10M", "100M", "1G"]
    assert run_argv(prog, {"build": "/b", "file": "/f"}) == ["/b/src/sha256deep", "/f"]


def test_explain_a_program_under_two_variants(source, tmp_path):
    plan = tmp_path / "p.toml"
    plan.write_text(textwrap.dedent(f"""\
        [program.good]
        source = "{source}"
        build = ["make CC={{cc}} CFLAGS='{{cflags}}'"]
        run = "{{build}}/prog ok {{file}}"
        [program.good.inputs]
        file = {{ random_file = ["32M"] }}
        [[experiment]]
        name = "p"
        workloads = ["good"]
        variants = ["O0", "O2"]
        """))
    r = cpulab("explain", "O0", "O2", "--program", "good", "--plan", str(plan), "--json", db=tmp_path / "s.sqlite")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["program"] == "good" and doc["a"]["functions"] and doc["b"]["functions"]
    assert any(d["function"] == "main" for d in doc["differences"])  # -O0 and -O2 main differ
    r = cpulab("explain", "O0", "O2", "--program", "nosuch", "--plan", str(plan), db=tmp_path / "s.sqlite")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "nosuch" in r.stderr


def test_memory_is_a_metric_judged_like_time(tmp_path):
    """Each run's peak RSS is stored per process (the launcher's report, through the
    store), and under the memory metric the same paired test reads it: B 5% above A,
    with a few pages of jitter, is `larger`; two runs of A are `same`."""
    import random
    from cpulab.estimates import compare_results, result_summary
    store = Store(tmp_path / "s.sqlite")
    run = store.start_run({}, "m", RunRecord.make("time", {"name": "t", "method": "paired", "metric": "memory"}), {},
                          {"timer": "wait4"}, [])
    rng = random.Random(4)
    report = {"wall_s": 0.01, "user_s": 0.01, "sys_s": 0.0, "max_rss_kb": 0, "page_faults": 120}
    results = []
    for variant, rss in (("A", 100_000), ("B", 105_000), ("A2", 100_000)):
        rid = store.add_result(run, "time", variant, {}, processes.UNIT, Status.PENDING, experiment="time")
        for i in range(10):
            store.add_process(rid, i, processes.process_record({**report, "max_rss_kb": rss + rng.randrange(32)}), 0)
        samples = store.samples(rid)
        assert all(s.max_rss_kb >= rss and s.page_faults == 120 for s in samples)
        results.append(result_summary(store.result(rid), samples))
    policy = DecisionPolicy.of_settings(0.0, 0.01, "paired", "memory")
    more, aa = compare_results(results, {"time": "A"}, policy)
    assert more.basis == "peak memory" and more.verdict == "larger" and more.ratio == pytest.approx(1 / 1.05, rel=0.002)
    assert aa.variant == "A2" and aa.verdict == "same"
    assert compare_results(results, {"time": "A"}, DecisionPolicy.of_settings(0.0, 0.01, "paired"))[0].basis == "time"
