"""Trust boundaries (issue 58): an imported run file never runs anything, a file that fails
to import writes nothing, no value that can be stored crashes a reader, and what the
operating system refuses is one line, exit 2.  Each case here is one that once got
through: a traceback, a partial write, or a command that ran what a file named."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import cpulab, read_back, row_counts, run_file
from cpulab import machine
from cpulab.store import exchange
from cpulab.store.db import Store

FIXTURES = Path(__file__).resolve().parent / "fixtures"
def _one_line_exit_2(p: subprocess.CompletedProcess, *words: str) -> None:
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1 and all(w in lines[0] for w in words), (p.returncode, p.stderr)


def _write(tmp_path: Path, name: str, doc) -> Path:
    f = tmp_path / name
    f.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return f


def test_an_imported_run_file_never_runs_what_it_names(tmp_path, cli):
    """A run of this machine (its id), stopped, with a variant whose flags run a shell
    through the compiler and an artifact whose path is a script: imported, then --resume
    and --against refuse it, and neither file that a run would make exists."""
    by_flags, by_path = tmp_path / "by-flags", tmp_path / "by-path"
    script = _write(tmp_path, "evil.sh", f"#!/bin/sh\ntouch {by_path}\n")
    script.chmod(0o755)
    code = hashlib.sha256(script.read_bytes()).hexdigest()
    evil = {"name": "evil", "compiler": "gcc", "cflags": ["-O2", "-wrapper", f"sh,-c,touch {by_flags}; exec \"$0\" \"$@\""],
            "ldflags": [], "abi_flags": [], "env": {}, "package": "", "description": "", "isa": ""}
    sample = run_file()["runs"][0]["results"][0]["samples"][0]
    doc = run_file(machine_id=machine.fingerprint_id(machine.fingerprint()), status="interrupted",
                    plan={"kind": "plan", "method": "turns", "experiments": [
                        {"name": "e", "workloads": ["sha256"], "variants": ["evil"], "baseline": "evil"}],
                          "custom_variants": {"evil": evil}},
                    variants=[{**evil, "compiler_version": "gcc 12"}],
                    artifacts=[{"hash": "h" * 16, "code_hash": code, "path": str(script), "size_bytes": 10,
                                "compiler_version": "gcc 12", "commands": [["gcc"]], "placeable": True}],
                    results=[{"experiment": "e", "workload": "sha256", "variant": "evil", "params": {"size": "64"},
                              "unit": "bytes", "status": "pending", "error": "", "artifact_hash": "h" * 16,
                              "same_as": "", "notes": {}, "samples": [sample]}])
    assert cli("import", str(_write(tmp_path, "evil.json", doc))).stdout.strip() == "run 1: added"
    assert Store(cli.db).artifact("h" * 16).path == ""  # an imported build names no executable
    _one_line_exit_2(cli("run", "--resume", "1"), "--resume 1", "imported")
    _one_line_exit_2(cli("run", "-w", "sha256", "-v", "O2", "-p", "size=64", "--against", "1"), "--against 1", "imported")
    assert not by_flags.exists() and not by_path.exists()


def test_a_local_build_replaces_the_row_an_import_left(store):
    """An imported artifact cannot stand in for a build made here under its hash."""
    art = {"hash": "h1", "code_hash": "c", "path": "/tmp/theirs", "size_bytes": 1, "compiler_version": "x",
           "commands": [], "placements": [], "placeable": False}
    doc = run_file(artifacts=[art])
    doc["runs"][0]["results"][0]["artifact_hash"] = "h1"
    store.import_runs([exchange.ExportedRun.model_validate(doc["runs"][0]).model_dump()], "cpulab")
    assert store.artifact("h1").path == ""
    store.add_artifact({**art, "path": "/cache/mine"})
    assert store.artifact("h1").path == "/cache/mine"


def test_another_machines_run_is_not_measured_against(tmp_path, cli):
    _write(tmp_path, "r.json", run_file())
    assert cli("import", str(tmp_path / "r.json")).returncode == 0
    Store(cli.db).con.execute("UPDATE runs SET imported = ''")  # as if measured here, on machine ab12
    _one_line_exit_2(cli("run", "-w", "sha256", "-v", "O2", "--against", "1"), "machine ab12")


HYPERFINE_ALL_FAILED = {"results": [{"command": "a", "mean": 0.1, "times": [0.1, 0.1, 0.1], "exit_codes": [1, 1, 1]},
                                    {"command": "b", "mean": 0.1, "times": [0.1, 0.1, 0.1], "exit_codes": [0, 0, 0]}]}
HYPERFINE_TWICE = {"results": [{"command": "a", "mean": 0.1, "times": [0.1, 0.1, 0.1]},
                               {"command": "a", "mean": 0.1, "times": [0.1, 0.1, 0.1]}]}


def _jmh(score, raw, mode="avgt", unit="us/op") -> list:
    return [{"jmhVersion": "1.37", "benchmark": "b", "mode": mode,
             "primaryMetric": {"score": score, "scoreUnit": unit, "rawData": raw}}]


def _bdn(ops) -> dict:
    return {"HostEnvironmentInfo": {}, "Benchmarks": [{"Type": "T", "Method": "M", "Measurements": [
        {"IterationMode": "Workload", "IterationStage": "Result", "LaunchIndex": 1, "Operations": ops,
         "Nanoseconds": 1.0}]}]}


# Files that once failed with a traceback after writing, or wrote absurd values: each is
# refused in one line (exit 2, nothing written) or, where it is a fair file, imported whole
# and read back by every command.
REFUSED = {
    "gbench count 2^64": ("g.json", {"context": {}, "benchmarks": [{"name": "b", "iterations": 2**64, "real_time": 1.0}]}),
    "go count 10^20": ("g.txt", "BenchmarkX-2   99999999999999999999   5 ns/op\n"),
    "bdn count 2^64": ("b.json", _bdn(2**64)),
    "jmh huge average": ("j.json", _jmh(1e300, [[1e300, 1e300]])),
    "jmh tiny throughput": ("j.json", _jmh(1.0, [[5e-324, 5e-324]])),
    "jmh score 1e400": ("j.json", json.dumps(_jmh(1.0, [[1.0]])).replace('"score": 1.0', '"score": 1e400')),
    "jmh unit ops": ("j.json", _jmh(1.0, [[1.0]], "thrpt", "ops")),
    "go inf ns/op": ("g.txt", "BenchmarkX-2   100   inf ns/op\nBenchmarkX-2   100   5 ns/op\n"),
    "go 1e305 ns/op": ("g.txt", "BenchmarkX-2   100   1e305 ns/op\nBenchmarkX-2   100   5 ns/op\n"),
    "go nan B/op": ("g.txt", "BenchmarkX-2   100   5 ns/op   nan B/op\n"),
    "started 1e300": ("c.json", run_file(started=1e300)),
    "precision bogus": ("c.json", run_file(plan={"kind": "plan", "method": "turns", "precision": "bogus",
                                                              "experiments": [{"name": "e", "baseline": "O2"}]})),
    "method bogus": ("c.json", run_file(plan={"kind": "plan", "method": "bogus",
                                                           "experiments": [{"name": "e", "baseline": "O2"}]})),
    "experiments a string": ("c.json", run_file(plan={"kind": "plan", "method": "turns", "experiments": "x"})),
    "tsc_hz a word": ("c.json", run_file(timing={"tsc_hz": "fast"})),
    "compiler version a list": ("c.json", run_file(variants=[{"name": "O2", "compiler_version": [1]}])),
    "a variant twice": ("c.json", run_file(variants=[{"name": "O2"}, {"name": "O2"}])),
    "commit a number": ("c.json", run_file(origin={"commit": 5})),
    "time split a word": ("c.json", run_file(conditions={"time_split": "x"})),
    "not a regular file": ("/dev/zero", None),
}
IMPORTED = {
    "hyperfine, every run of the baseline failed": ("h.json", HYPERFINE_ALL_FAILED),
    "hyperfine, one command twice": ("h.json", HYPERFINE_TWICE),
    "criterion, one tiny sample": ("sample.json", {"iters": [1.0], "times": [1.0]}),
    "no fingerprint": ("c.json", run_file()),
    "jmh, benchmarks with parameters of their own": ("j.json", [
        {**_jmh(1.0, [[1.0, 1.1]])[0], "params": {"size": "1"}},
        {**_jmh(1.0, [[1.0, 1.2]])[0], "benchmark": "b", "params": {"phases": "2"}}]),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_file_that_fails_is_one_line_and_writes_nothing(case, tmp_path, cli):
    name, doc = REFUSED[case]
    f = Path(name) if doc is None else _write(tmp_path, name, doc)
    _one_line_exit_2(cli("import", str(f)), str(f))
    assert row_counts(cli.db) == {}  # not even a store was made


@pytest.mark.parametrize("case", sorted(IMPORTED))
def test_a_fair_file_imports_whole_and_every_reader_reads_it(case, tmp_path, cli):
    name, doc = IMPORTED[case]
    assert cli("import", str(_write(tmp_path, name, doc))).returncode == 0
    read_back(Store(cli.db), 1, tmp_path / "r.html")


def test_the_same_foreign_file_imported_twice_is_one_run(tmp_path, cli):
    f = _write(tmp_path, "h.json", HYPERFINE_TWICE)
    assert cli("import", str(f)).stdout.strip() == "run 1: added"
    assert cli("import", str(f)).stdout.strip() == "run 1: already in the store"
    assert cli("import", str(f), "--format", "hyperfine").returncode == 0 and len(Store(cli.db).runs()) == 1


@pytest.mark.parametrize("args, words", [
    (["compare", "99999999999999999999999"], "no run 99999999999999999999999"),
    (["run", "/dev/zero"], "not a regular file"),
    (["time", "--budget", "nan", "true", "false"], "'nan' is not a number"),
    (["time", "--timeout", "nan", "true", "false"], "'nan' is not a number"),
    (["time", "no-such-command-here", "true"], "no-such-command-here: no such command"),
    (["time", "true", "false", "--export-json", "/dev/null/x.json"], "/dev/null/x.json: cannot write"),
])
def test_bad_input_and_refused_files_are_one_line(args, words, cli):
    Store(cli.db)
    _one_line_exit_2(cli(*args), words)
    assert row_counts(cli.db)["runs"] == 0


def test_a_plan_nested_too_deeply_is_one_line(tmp_path, cli):
    f = _write(tmp_path, "deep.toml", "a = " + "[" * 100_000 + "]" * 100_000 + "\n")
    _one_line_exit_2(cli("run", str(f)), "nested too deeply")


def test_an_output_file_that_cannot_be_written_is_named(tmp_path, cli):
    assert cli("import", str(_write(tmp_path, "r.json", run_file()))).returncode == 0
    (tmp_path / "file").write_text("a file where a directory should be")
    _one_line_exit_2(cli("export", "-o", str(tmp_path / "file" / "x.json")), "file/x.json: cannot write")


def test_read_commands_make_no_store_and_no_directory(tmp_path):
    db = tmp_path / "no" / "such" / "dir" / "x.sqlite"
    for args in (["runs"], ["compare"], ["export"], ["history", "sha256"]):
        _one_line_exit_2(cpulab(*args, "--db", str(db)), "no store at")
    assert not (tmp_path / "no").exists()
    _one_line_exit_2(cpulab("runs", "--db", str(tmp_path)), "is a directory")


def test_completion_reads_the_store_given_not_the_default(tmp_path):
    default = tmp_path / "default.sqlite"
    assert cpulab("import", str(FIXTURES / "foreign" / "pyperf-timeit.json"), db=default).returncode == 0
    r = cpulab(env={"_CPULAB_COMPLETE": "bash_complete", "COMP_WORDS": f"cpulab compare --db {tmp_path} ",
                    "COMP_CWORD": "4", "CPULAB_DB": str(default)})
    assert "plain,1" not in r.stdout


@pytest.mark.skipif(os.geteuid() != 0 or not Path("/proc/filesystems").read_text().count("tmpfs"),
                    reason="a full file system is made by mounting a small tmpfs, which needs root")
def test_a_full_disk_is_one_line_naming_the_store(tmp_path, cli):
    full = tmp_path / "full"
    full.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=128k", "tmpfs", str(full)]).returncode != 0:
        pytest.skip("mount refused (no CAP_SYS_ADMIN here)")
    try:
        p = cpulab("import", str(FIXTURES / "cpulab-run-file-hash.json"), db=full / "s.sqlite")
        _one_line_exit_2(p, str(full / "s.sqlite"), "full")
        assert row_counts(full / "s.sqlite").get("runs", 0) == 0
    finally:
        subprocess.run(["umount", "--lazy", str(full)])
