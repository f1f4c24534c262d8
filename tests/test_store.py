"""The SQLite store: schema version, round trips, concurrent writers, locked and foreign
files, and runs whose owner is gone."""
import multiprocessing as mp
import os
import socket
import sqlite3
import subprocess
from pathlib import Path

import pytest

from cpulab.spec.record import RunRecord
from cpulab.store.db import MIGRATIONS, Store, StoreError

HARNESS_OUT = {"ns": [1.0, 2.0], "cycles": [3.0, None], "instructions": [None, None], "work": 10.0, "reps": 2,
               "user_s": [0.0, 0.0], "sys_s": [0.0, 0.0], "timer": "tsc", "tsc_hz": 2e9, "core_per_tsc": 1.2,
               "notes": {"working_set_bytes": 64}}

PROBE = RunRecord.make("probe", {"name": "probe"})


def new_run(store):
    return store.start_run({"cpu_model": "x"}, "m1", PROBE, {}, {"timer": "tsc"}, ["cpulab"])


def test_schema_version_and_round_trip(tmp_path):
    s = Store(tmp_path / "db.sqlite")
    assert s.schema_version() == len(MIGRATIONS)
    run = new_run(s)
    rid = s.add_result(run, "sha256", "O2", {"size": "64"}, "bytes", "pending")
    s.add_process(rid, 0, HARNESS_OUT, layout_pad=17)
    [r] = s.results(run)
    assert r.status == "ok" and r.params == {"size": "64"} and r.notes["working_set_bytes"] == 64
    samples = s.samples(rid)
    assert [x.ns for x in samples] == [1.0, 2.0] and samples[1].cycles is None
    assert samples[0].layout_pad == 17 and samples[0].reps == 2 and samples[0].result_id == rid
    assert samples[1].idx == 1 and samples[1].excluded == "" and samples[1].follows is None
    # A variant reads back typed, and writes out (export, --json) with the keys it was given.
    definition = {"name": "O2", "compiler": "gcc", "cflags": ["-O2"], "env": {}}
    s.add_variant(run, definition, "gcc 12")
    [v] = s.variants(run)
    assert (v.name, v.definition, v.compiler_version) == ("O2", definition, "gcc 12")
    assert v.to_dict() == {**definition, "compiler_version": "gcc 12"} and type(v).from_dict(v.to_dict()) == v
    # Reopening keeps everything and does not migrate again.
    assert Store(tmp_path / "db.sqlite").results(run)[0].id == rid


def test_signals_and_exclusions_round_trip(tmp_path):
    s = Store(tmp_path / "db.sqlite")
    run = new_run(s)
    rid = s.add_result(run, "sha256", "O2", {"size": "64"}, "bytes", "pending")
    out = {**HARNESS_OUT, "invol_switches": [0, 3], "offcpu_ns": [0.0, 1.5], "migrated": [0, 0],
           "steal_ticks": [0, 0], "ratio_before": [1.3, 1.31], "ratio_after": [1.3, 1.3],
           "canary_before": [3.9, 2.0], "canary_after": [3.9, 3.8], "vol_switches": [0, 0]}
    s.add_process(rid, 0, out, 0, ["", "off-cpu 75% (3 switches)"])
    a, b = s.samples(rid)
    assert (a.invol_switches, b.invol_switches, b.offcpu_ns, b.canary_before) == (0, 3, 1.5, 2.0)
    assert a.excluded == "" and b.excluded.startswith("off-cpu")


def test_every_declared_signal_is_printed_stored_exported_and_read_back(tmp_path):
    """A signal is declared once in Python (spec/signals.py) and once in C (harness.c's
    sample_columns): the harness prints each harness signal, a fresh store has its column,
    the run file its field, and a stored sample reads it back; a signal with a rule leaves
    its sample out, said in its own words."""
    import re
    from cpulab import stats
    from cpulab.spec.signals import SIGNALS, contamination
    from cpulab.store.exchange import SampleRecord
    harness = (Path(stats.__file__).parent / "native" / "harness.c").read_text()
    printed = set(re.findall(r'\{"(\w+)", (?:offsetof|CYCLES)', harness))
    assert {x.name for x in SIGNALS if x.by == "harness"} <= printed
    assert printed - {x.name for x in SIGNALS} == {"ns", "t_ns", "cycles", "instructions", "user_s", "sys_s"}
    s = Store(tmp_path / "db.sqlite")
    columns = {r[1] for r in s.con.execute("PRAGMA table_info(samples)")}
    run = new_run(s)
    rid = s.add_result(run, "sha256", "O2", {"size": "64"}, "bytes", "pending")
    s.add_process(rid, 0, {**HARNESS_OUT, **{x.name: [i + 1.0, 0.0] for i, x in enumerate(SIGNALS)}}, 0)
    first, second = s.samples(rid)
    for i, x in enumerate(SIGNALS):
        assert x.name in columns and x.name in SampleRecord.model_fields, x.name
        assert (getattr(first, x.name), getattr(second, x.name)) == (i + 1.0, 0.0), x.name
        if x.leaves_out:
            assert contamination({"ns": 1e6, x.name: 2.0}) == x.leaves_out.format(2.0)
            assert contamination({"ns": 1e6, x.name: 0.0}) == ""


def test_not_a_database(tmp_path):
    bad = tmp_path / "junk.sqlite"
    bad.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError, match="junk.sqlite is not a cpulab database"):
        Store(bad)


def _writer(path, n):
    s = Store(path)
    run = new_run(s)
    for i in range(n):
        rid = s.add_result(run, "w", f"v{i}", {"i": str(i)}, "bytes", "pending")
        s.add_process(rid, 0, HARNESS_OUT, 0)


def test_two_processes_write_at_once(tmp_path):
    path = tmp_path / "db.sqlite"
    Store(path)
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(path, 150)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    con = sqlite3.connect(path)
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert con.execute("SELECT count(*) FROM results").fetchone()[0] == 300
    assert con.execute("SELECT count(*) FROM samples").fetchone()[0] == 600
    assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 2


def test_locked_store_says_locked(tmp_path):
    path = tmp_path / "db.sqlite"
    s = Store(path, timeout=0.2)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process's writer, past our timeout
    with pytest.raises(StoreError, match=r"store .*db\.sqlite is locked by another process"):
        new_run(s)
    holder.execute("ROLLBACK")
    assert new_run(s) == 1  # the failed write left nothing half-done
    # A new store whose file another process holds exclusively cannot even be set up.
    fresh = tmp_path / "fresh.sqlite"
    holder = sqlite3.connect(fresh, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    with pytest.raises(StoreError, match="is locked by another process"):
        Store(fresh, timeout=0.2)
    holder.execute("ROLLBACK")


def test_foreign_sqlite_file_is_refused_untouched(tmp_path):
    path = tmp_path / "theirs.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE people (name TEXT)")
    con.execute("INSERT INTO people VALUES ('ada')")
    con.commit()
    con.close()
    before = path.read_bytes()
    with pytest.raises(StoreError, match="theirs.sqlite is an SQLite database of something else") as e:
        Store(path)
    assert "\n" not in str(e.value)
    assert path.read_bytes() == before  # no cpulab tables, no WAL conversion
    assert not (tmp_path / "theirs.sqlite-wal").exists()


def test_empty_file_becomes_a_store(tmp_path):
    path = tmp_path / "empty.sqlite"
    path.touch()
    assert Store(path).schema_version() == len(MIGRATIONS)


def _set_owner(path, **cols):
    con = sqlite3.connect(path)
    con.execute("UPDATE runs SET " + ", ".join(f"{k} = ?" for k in cols), tuple(cols.values()))
    con.commit()


def test_run_of_a_dead_owner_reads_interrupted(tmp_path):
    path = tmp_path / "db.sqlite"
    s = Store(path)
    run = new_run(s)
    assert s.run(run).status == "running" and s.runs()[0].status == "running"
    with pytest.raises(StoreError, match="still running"):
        s.claim_run(run)  # its owner (this process) is alive
    gone = subprocess.Popen(["true"])
    gone.wait()
    _set_owner(path, owner_pid=gone.pid)
    assert s.run(run).status == "interrupted" and s.runs()[0].status == "interrupted"
    _set_owner(path, owner_pid=os.getpid(), owner_boot_id="an-earlier-boot")
    assert s.run(run).status == "interrupted"  # the machine restarted since
    _set_owner(path, owner_pid=os.getpid(), owner_boot_id="", owner_started=1)
    assert s.run(run).status == "interrupted"  # the pid was reused by a later process
    _set_owner(path, owner_host="another-host")
    assert s.run(run).status == "running"  # no way to tell from here
    _set_owner(path, owner_host=socket.gethostname(), owner_pid=gone.pid)
    s.claim_run(run)  # resuming makes this process the owner again
    assert s.run(run).status == "running" and s.con.execute("SELECT owner_pid FROM runs").fetchone()[0] == os.getpid()


def test_a_store_of_schema_1_is_migrated_and_stays_readable(tmp_path):
    """A store written by the first release opens with every migration applied: its run
    (owner unknown, so not known to be gone), its samples (no signals, all used), and it
    takes new runs, cluster runs among them."""
    path = tmp_path / "old.sqlite"
    con = sqlite3.connect(path)
    con.executescript(MIGRATIONS[0] + "; CREATE TABLE schema_version (version INTEGER NOT NULL);"
                      " INSERT INTO schema_version VALUES (1);"
                      " INSERT INTO machines VALUES ('m1', '{}', 0);"
                      " INSERT INTO runs (machine_id, started, status, plan, conditions, timing, argv)"
                      "  VALUES ('m1', 0, 'running', '{\"experiments\": []}', '{}', '{}', '[]');"
                      " INSERT INTO results (id, run_id, workload, variant, params, unit, status)"
                      "  VALUES (1, 1, 'sha256', 'O2', '{}', 'bytes', 'ok');"
                      " INSERT INTO samples (result_id, invocation, idx, ns, work, reps, timer)"
                      "  VALUES (1, 0, 0, 5.0, 10.0, 1, 'tsc');")
    con.close()
    s = Store(path)
    assert s.schema_version() == len(MIGRATIONS)
    old = s.run(1)
    assert old.status == "running"  # an owner from before migration 2 is not known to be gone
    assert old.machine == "" and old.parent is None and s.machine_runs(1) == []
    assert old.record.kind == "plan" and old.record.experiments == []  # a record of schema 1 reads (record.upgraded)
    [x] = s.samples(1)
    assert x.ns == 5.0 and x.excluded == "" and x.invol_switches is None
    assert x.process == 0  # migration 7: the column `invocation` is now `process`
    assert new_run(s) == 2 and s.con.execute("SELECT owner_pid FROM runs WHERE id = 2").fetchone()[0] == os.getpid()
    child = s.start_run({}, "m2", PROBE, {}, {}, [], parent=1, machine="alpha")
    assert s.machine_runs(1) == [child] and s.run(child).machine == "alpha"
    assert s.latest_run() == 2  # a machine's part of a cluster run is not a run of its own


def test_runs_carry_their_label_and_origin_and_filter_on_them(tmp_path):
    s = Store(tmp_path / "db.sqlite")
    a = s.start_run({"cpu_model": "Zen 4"}, "aaaa", PROBE, {}, {}, [], label="v1", origin={"commit": "abc123", "dirty": True})
    b = s.start_run({"cpu_model": "Ice Lake"}, "bbbb", PROBE, {}, {}, [], label="v2")
    assert s.run(a).label == "v1" and s.run(a).origin == {"commit": "abc123", "dirty": True}
    assert s.run(b).origin == {}
    assert [r.id for r in s.runs(label="v2")] == [b]
    assert [r.id for r in s.runs(commit="abc")] == [a] and s.runs(commit="abd") == []
    assert [r.id for r in s.runs(machine="Ice")] == [b] and [r.id for r in s.runs(machine="aa")] == [a]
