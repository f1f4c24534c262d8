"""The command line as a user meets it: JSON documents, one-line errors, exit 2."""
import json
from pathlib import Path

import pytest

from conftest import cpulab
from cpulab import paths


def test_run_json_document(tmp_path):
    db = tmp_path / "db.sqlite"
    # 3 samples a process: with 2, a loaded machine sometimes left two of a result's three
    # processes without a sample kept (off the CPU), and its interval undefined
    p = cpulab("run", "-w", "sha256", "-v", "O0", "-v", "O2", "-p", "size=1K,4KiB", "--runs", "3",
               "--samples", "3", "--min-sample-time", "0.002", "--json", db=db)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["run_id"] == 1 and doc["machine"]["cpu_model"]
    assert len(doc["results"]) == 4
    assert sorted({r["params"]["size"] for r in doc["results"]}) == ["1024", "4096"]  # stored canonical
    for r in doc["results"]:
        assert {"workload", "variant", "params", "unit", "median", "ci", "cycles_per_unit", "samples", "status",
                "error"} <= set(r)
        assert r["status"] == "ok"
        if r["excluded_processes"] < 2:  # a loaded machine may leave a process no sample (off the CPU): no interval
            assert r["ci"][0] <= r["median"] <= r["ci"][1]
        assert len(r["samples"]) == 3 * 3
    assert len(doc["comparisons"]) == 2
    left_out = {(r["variant"], r["params"]["size"]): r["excluded_processes"] == 3 for r in doc["results"]}
    for c in doc["comparisons"]:
        assert {"workload", "params", "baseline", "variant", "ratio", "ci", "p", "verdict"} <= set(c)
        # 3 processes against 3 can never reach p < 0.05: the verdict must say so; where the
        # host left every baseline process out (steal time in each sample), there is none
        assert c["baseline"] == "O2"
        assert c["verdict"] == ("no baseline" if left_out[("O2", c["params"]["size"])] else "inconclusive"), c
    # The compare command reads the same run back, against another baseline.
    again = json.loads(cpulab("compare", "--baseline", "O0", "--json", db=db).stdout)
    assert {c["variant"] for c in again["comparisons"]} == {"O2"}
    table = cpulab("compare", db=db)
    assert table.returncode == 0 and "sha256" in table.stdout and "baseline" in table.stdout


def test_list_and_doctor_json():
    doc = json.loads(cpulab("list", "--json").stdout)
    assert "sha256" in {w["name"] for w in doc["workloads"]}
    variants = {v["name"]: v for v in doc["variants"]}
    assert variants["O2"]["available"]
    for v in variants.values():
        assert v["available"] or "install" in v["reason"]
    doc = json.loads(cpulab("doctor", "--json").stdout)
    assert doc["timing"]["timer"] in ("perf", "tsc", "clock")
    assert {"governor", "turbo", "aslr", "loadavg", "isolated_cpus"} <= set(doc["conditions"])
    assert isinstance(doc["warnings"], list)


@pytest.mark.parametrize("args, words", [
    (["run", "-v", "O9"], "unknown variant 'O9'"),
    (["run", "-w", "nope"], "unknown workload 'nope'"),
    (["run", "--runs", "0"], "--runs"),
    (["run", "-w", "sha256", "-p", "size"], "key=value"),
    (["run", "-w", "sha256", "-p", "size=1e6"], "--param size: '1e6' is not a size"),
    (["run", "-w", "sha256", "-p", "size=16K", "-p", "size=1K"], "given twice"),
    (["run", "-w", "sha256", "-p", "size=4096T"], "of memory"),
    (["run", "-w", "sha256-file", "-p", "size=4096T"], "is free there"),
    (["run", "-v", "O2", "-v", "O2"], "'O2' is listed twice"),
    (["run", "-w", "sha256", "-w", "sha256"], "'sha256' is listed twice"),
    (["run", "--runs", "1000000000"], "--runs"),
    (["run", "--min-sample-time", "nan"], "--min-sample-time"),
    (["memlat", "--max-size", "1.5G"], "--max-size: '1.5G'"),
    (["run", "/no/such/plan.toml"], "/no/such/plan.toml"),
    (["compare", "99"], "no run 99"),
    (["frobnicate"], "frobnicate"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, words):
    db = tmp_path / "db.sqlite"
    if args[0] == "compare":
        cpulab("run", "-w", "sha256", "-v", "O2", "-p", "size=64", "--runs", "1", "--samples", "1",
               "--min-sample-time", "0.001", db=db)
    p = cpulab(*args, db=db)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], p.stderr
    assert not list((paths.cache_dir() / "files").glob("sha256-4503599627370496*"))  # nothing written


def test_dry_run_prints_the_canonical_plan_and_measures_nothing(tmp_path):
    db = tmp_path / "db.sqlite"
    p = cpulab("run", "-w", "sha256", "-v", "O2", "-p", "size=16K..64K", "--dry-run", "--json", db=db)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["experiments"][0]["params"] == {"sha256": {"size": ["16384", "32768", "65536"]}}
    assert not db.exists()


def test_probe_json_and_bad_assembly(tmp_path):
    db = tmp_path / "db.sqlite"
    p = cpulab("probe", "add rax, rbx", "--repeats", "2", "--json", db=db)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert {"cycles_per_iteration", "ipc", "ns_per_iteration", "timer"} <= set(doc)
    assert 0.5 < doc["cycles_per_iteration"] < 2.0  # a dependent add chain: about 1 cycle
    bad = cpulab("probe", "frobnicate rax", db=db)
    assert bad.returncode == 2 and "frobnicate" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


def test_store_problems_are_one_line_and_exit_2(tmp_path):
    import sqlite3
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"not sqlite at all" * 100)
    foreign = tmp_path / "theirs.sqlite"
    con = sqlite3.connect(foreign)
    con.execute("CREATE TABLE notes (text TEXT)")
    con.commit()
    con.close()
    for db, words in ((junk, "is not a cpulab database"), (foreign, "is an SQLite database of something else")):
        p = cpulab("runs", db=db)
        lines = p.stderr.strip().splitlines()
        assert p.returncode == 2 and len(lines) == 1 and words in lines[0], p.stderr
    assert [r[0] for r in sqlite3.connect(foreign).execute("SELECT name FROM sqlite_master")] == ["notes"]


def test_resume_and_report_refusals(tmp_path):
    db = tmp_path / "db.sqlite"
    assert cpulab("run", "-w", "sha256", "-v", "O2", "-p", "size=64", "--runs", "1", "--samples", "1",
                  "--min-sample-time", "0.001", db=db).returncode == 0
    for args, words in ((["run", "--resume", "1", "--runs", "3"], "drop --processes"),
                        (["run", "--resume", "1"], "the run is done"),
                        (["run", "--resume", "7"], "no run 7"),
                        (["report", "1", "-o", str(tmp_path / "file" / "r.html")], "cannot be drawn")):
        if args[0] == "report":
            (tmp_path / "file").write_text("a file where a directory should be")
        p = cpulab(*args, db=db)
        lines = p.stderr.strip().splitlines()
        assert p.returncode == 2 and len(lines) == 1 and words in lines[0], (args, p.stderr)
    assert json.loads(cpulab("runs", "--json", db=db).stdout)[0]["status"] == "done"


@pytest.mark.parametrize("words, want, not_want", [
    ("cpulab ru", {"run", "runs"}, {"time"}),
    ("cpulab run -w sha", {"sha256", "sha256-file"}, {"dot"}),
    ("cpulab run -v clang", {"clang-O2", "clang-O3"}, {"O2"}),
    ("cpulab run se", {"seeds"}, {"core"}),
    ("cpulab explain O2 O3", {"O3", "O3-native"}, {"clang-O2"}),
    ("cpulab history d", {"des", "dot"}, {"sha256"}),
    ("cpulab run --gr", {"--grid"}, {"--json"}),
])
def test_the_shell_completes_commands_options_and_names(words, want, not_want):
    """Click's completion protocol (README, Shell completion): what bash would be offered."""
    cword = len(words.split()) - 1
    r = cpulab(env={"_CPULAB_COMPLETE": "bash_complete", "COMP_WORDS": words, "COMP_CWORD": str(cword)})
    offered = {line.split(",", 1)[1] for line in r.stdout.splitlines() if "," in line}
    assert want <= offered and not offered & not_want, (r.stdout, r.stderr)


def test_the_shell_completes_stored_run_ids(cli, tmp_path):
    assert cli("import", str(Path(__file__).parent / "fixtures" / "foreign" / "pyperf-timeit.json")).returncode == 0
    r = cli(env={"_CPULAB_COMPLETE": "bash_complete", "COMP_WORDS": "cpulab compare ", "COMP_CWORD": "2"})
    assert r.stdout.splitlines() == ["plain,1"], r.stdout
    r = cpulab(env={"_CPULAB_COMPLETE": "zsh_source"})
    assert "compdef" in r.stdout and "_CPULAB_COMPLETE" in r.stdout


def test_a_cluster_without_dask_is_one_line(monkeypatch, capsys, tmp_path):
    """`run --cluster` with dask missing says what to install, as `cpulab scheduler` does.
    In this process (dask hidden from its imports), not a new one: two took 4.8 s."""
    import sys
    from cpulab.cli.main import main
    monkeypatch.setitem(sys.modules, "distributed", None)
    monkeypatch.setitem(sys.modules, "dask", None)
    monkeypatch.setenv("CPULAB_DB", str(tmp_path / "s.sqlite"))
    interval = sys.getswitchinterval()  # main sets the command's own
    for args in (["run", "-w", "sha256", "-v", "O2", "--cluster", "tcp://127.0.0.1:1"], ["scheduler"]):
        monkeypatch.setattr(sys, "argv", ["cpulab", *args])
        with pytest.raises(SystemExit) as e:
            main()
        sys.setswitchinterval(interval)
        err = capsys.readouterr().err
        assert e.value.code == 2 and "Traceback" not in err
        assert err.strip().splitlines() == ["cpulab: error: clusters need dask.distributed: "
                                            "pip install 'cpulab[distributed]'"]


def test_no_command_function_takes_more_than_six_values():
    """Options reach a command in groups (cli/flags.grouped) and run settings as one value
    (cli/flags.setting_options): a command's signature stays readable and two swapped
    options cannot pass unnoticed."""
    import inspect
    import click
    from cpulab.cli.main import cli

    def commands(group, prefix=""):
        for name, c in group.commands.items():
            yield from commands(c, f"{prefix}{name} ") if isinstance(c, click.Group) else [(prefix + name, c)]
    long = {}
    for name, c in commands(cli):
        f = inspect.unwrap(c.callback)
        if len(inspect.signature(f).parameters) > 6:
            long[name] = list(inspect.signature(f).parameters)
    assert not long, long
