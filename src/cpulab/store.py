"""The SQLite store: machines, runs, variants, results, every raw sample, and analyses.

WAL mode and a busy timeout let several `cpulab run` processes write at once; each
write is one short IMMEDIATE transaction, so nothing measured is lost on Ctrl-C.
Schema changes are numbered migrations applied in order from `schema_version`.
"""
from __future__ import annotations

import json
import sqlite3
import time
from contextlib import contextmanager
from pathlib import Path

MIGRATIONS: list[str] = [
    # 1: the first schema
    """
    CREATE TABLE machines (
        id TEXT PRIMARY KEY,            -- machine.fingerprint_id
        fingerprint TEXT NOT NULL,      -- JSON
        first_seen REAL NOT NULL
    );
    CREATE TABLE runs (
        id INTEGER PRIMARY KEY,
        machine_id TEXT NOT NULL REFERENCES machines(id),
        started REAL NOT NULL,
        finished REAL,
        status TEXT NOT NULL,           -- running | done | interrupted | failed
        plan TEXT NOT NULL,             -- JSON of the plan as run
        conditions TEXT NOT NULL,       -- JSON: governor, turbo, ASLR, load, ...
        timing TEXT NOT NULL,           -- JSON: timer, tsc_hz, core_per_tsc at start
        argv TEXT NOT NULL
    );
    CREATE TABLE variants (
        run_id INTEGER NOT NULL REFERENCES runs(id),
        name TEXT NOT NULL,
        definition TEXT NOT NULL,       -- JSON: compiler, cflags, ldflags, abi_flags, env
        compiler_version TEXT,
        PRIMARY KEY (run_id, name)
    );
    CREATE TABLE artifacts (
        hash TEXT PRIMARY KEY,          -- of the inputs
        code_hash TEXT NOT NULL,        -- of the executable
        path TEXT NOT NULL,
        size_bytes INTEGER NOT NULL,
        compiler_version TEXT,
        commands TEXT NOT NULL          -- JSON list of exact command lines
    );
    CREATE TABLE results (
        id INTEGER PRIMARY KEY,
        run_id INTEGER NOT NULL REFERENCES runs(id),
        experiment TEXT NOT NULL DEFAULT '',
        workload TEXT NOT NULL,
        variant TEXT NOT NULL,
        params TEXT NOT NULL,           -- JSON, sorted keys
        unit TEXT NOT NULL,
        status TEXT NOT NULL,           -- ok | identical | skipped | build-failed | verify-failed | setup-failed | crash | timeout | error | pending
        error TEXT NOT NULL DEFAULT '',
        artifact_hash TEXT REFERENCES artifacts(hash),
        same_as TEXT NOT NULL DEFAULT '', -- for status 'identical': the variant with the same code
        notes TEXT NOT NULL DEFAULT '{}', -- JSON from the kernel (working_set_bytes, ...)
        UNIQUE (run_id, experiment, workload, variant, params)
    );
    CREATE TABLE samples (
        result_id INTEGER NOT NULL REFERENCES results(id),
        invocation INTEGER NOT NULL,    -- which process: layout is fixed within one
        idx INTEGER NOT NULL,
        ns REAL NOT NULL,               -- wall time of one sample
        cycles REAL,                    -- core cycles (counters, or TSC x core_per_tsc)
        instructions REAL,
        work REAL NOT NULL,             -- units of work in the sample
        reps INTEGER NOT NULL,          -- k_run repetitions in the sample
        user_s REAL,
        sys_s REAL,
        timer TEXT NOT NULL,
        tsc_hz REAL,
        core_per_tsc REAL,
        layout_pad INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (result_id, invocation, idx)
    );
    CREATE TABLE analyses (
        run_id INTEGER NOT NULL REFERENCES runs(id),
        kind TEXT NOT NULL,             -- e.g. memlat-levels, probe, align-table
        key TEXT NOT NULL DEFAULT '',
        data TEXT NOT NULL,             -- JSON
        PRIMARY KEY (run_id, kind, key)
    );
    CREATE INDEX results_run ON results(run_id);
    """,
    # 2: what was seen around each sample (harness), and why a sample is left out of
    # estimates ('' = used).  Older samples have NULL signals and are all used.
    """
    ALTER TABLE samples ADD COLUMN invol_switches REAL;   -- of the thread, during the sample
    ALTER TABLE samples ADD COLUMN vol_switches REAL;
    ALTER TABLE samples ADD COLUMN offcpu_ns REAL;        -- wall minus thread CPU time
    ALTER TABLE samples ADD COLUMN migrated REAL;         -- 1: CPU differed before and after
    ALTER TABLE samples ADD COLUMN steal_ticks REAL;      -- /proc/stat steal of the CPU, USER_HZ
    ALTER TABLE samples ADD COLUMN ratio_before REAL;     -- core/TSC ratio just before
    ALTER TABLE samples ADD COLUMN ratio_after REAL;
    ALTER TABLE samples ADD COLUMN canary_before REAL;    -- independent adds per cycle
    ALTER TABLE samples ADD COLUMN canary_after REAL;
    ALTER TABLE samples ADD COLUMN excluded TEXT NOT NULL DEFAULT '';
    """,
]

# Per-sample signals the harness prints as arrays (older harness output lacks them).
SIGNALS = ("invol_switches", "vol_switches", "offcpu_ns", "migrated", "steal_ticks", "ratio_before", "ratio_after",
           "canary_before", "canary_after")


def _connect(path: Path) -> sqlite3.Connection:
    path.parent.mkdir(parents=True, exist_ok=True)
    con = sqlite3.connect(str(path), timeout=60, isolation_level=None)
    con.row_factory = sqlite3.Row
    con.execute("PRAGMA busy_timeout = 60000")
    con.execute("PRAGMA journal_mode = WAL")
    con.execute("PRAGMA foreign_keys = ON")
    return con


def _result_row(r: sqlite3.Row) -> dict:
    d = dict(r)
    d["params"] = json.loads(d["params"])
    d["notes"] = json.loads(d["notes"])
    return d


class StoreError(Exception):
    pass


class Store:
    def __init__(self, path: Path | str):
        self.path = Path(path)
        try:
            self.con = _connect(self.path)
            self._migrate()
        except sqlite3.DatabaseError as e:
            raise StoreError(f"{self.path}: not a cpulab database ({e})") from None

    @contextmanager
    def tx(self):
        """One write transaction; taken IMMEDIATE so concurrent writers queue, not fail."""
        self.con.execute("BEGIN IMMEDIATE")
        try:
            yield self.con
        except BaseException:
            self.con.execute("ROLLBACK")
            raise
        else:
            self.con.execute("COMMIT")

    def _migrate(self) -> None:
        with self.tx() as c:
            c.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
            row = c.execute("SELECT version FROM schema_version").fetchone()
            version = row[0] if row else 0
            if version > len(MIGRATIONS):
                raise StoreError(f"{self.path}: schema version {version} is newer than this cpulab "
                                 f"({len(MIGRATIONS)}); upgrade cpulab")
            for sql in MIGRATIONS[version:]:
                for stmt in sql.split(";"):
                    if stmt.strip():
                        c.execute(stmt)
            if row is None:
                c.execute("INSERT INTO schema_version VALUES (?)", (len(MIGRATIONS),))
            else:
                c.execute("UPDATE schema_version SET version = ?", (len(MIGRATIONS),))

    def schema_version(self) -> int:
        return self.con.execute("SELECT version FROM schema_version").fetchone()[0]

    # ---- writing -------------------------------------------------------------------

    def start_run(self, fingerprint: dict, machine_id: str, plan: dict, conditions: dict,
                  timing: dict, argv: list[str]) -> int:
        with self.tx() as c:
            c.execute("INSERT OR IGNORE INTO machines VALUES (?, ?, ?)",
                      (machine_id, json.dumps(fingerprint), time.time()))
            cur = c.execute(
                "INSERT INTO runs (machine_id, started, status, plan, conditions, timing, argv)"
                " VALUES (?, ?, 'running', ?, ?, ?, ?)",
                (machine_id, time.time(), json.dumps(plan), json.dumps(conditions),
                 json.dumps(timing), json.dumps(argv)))
            return int(cur.lastrowid)

    def finish_run(self, run_id: int, status: str) -> None:
        with self.tx() as c:
            c.execute("UPDATE runs SET finished = ?, status = ? WHERE id = ?", (time.time(), status, run_id))

    def add_variant(self, run_id: int, definition: dict, compiler_version: str) -> None:
        with self.tx() as c:
            c.execute("INSERT OR REPLACE INTO variants VALUES (?, ?, ?, ?)",
                      (run_id, definition["name"], json.dumps(definition), compiler_version))

    def add_artifact(self, art: dict) -> None:
        with self.tx() as c:
            c.execute("INSERT OR IGNORE INTO artifacts VALUES (?, ?, ?, ?, ?, ?)",
                      (art["hash"], art["code_hash"], art["path"], art["size_bytes"],
                       art["compiler_version"], json.dumps(art["commands"])))

    def add_result(self, run_id: int, workload: str, variant: str, params: dict, unit: str,
                   status: str, error: str = "", artifact_hash: str | None = None,
                   same_as: str = "", experiment: str = "") -> int:
        with self.tx() as c:
            cur = c.execute(
                "INSERT INTO results (run_id, experiment, workload, variant, params, unit, status, error,"
                " artifact_hash, same_as) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (run_id, experiment, workload, variant, json.dumps(params, sort_keys=True), unit, status,
                 error, artifact_hash, same_as))
            return int(cur.lastrowid)

    def set_status(self, result_id: int, status: str, error: str = "") -> None:
        with self.tx() as c:
            c.execute("UPDATE results SET status = ?, error = ? WHERE id = ?", (status, error, result_id))

    def mark_identical(self, result_id: int, same_as: str) -> None:
        with self.tx() as c:
            c.execute("UPDATE results SET status = 'identical', same_as = ? WHERE id = ?", (same_as, result_id))

    def add_invocation(self, result_id: int, invocation: int, out: dict, layout_pad: int,
                       excluded: list[str] | None = None) -> None:
        """Store one harness JSON result's samples (with the signals seen around each and,
        in `excluded`, why a sample is left out of estimates), and its notes."""
        rows = []
        for i, ns in enumerate(out["ns"]):
            signals = [out[k][i] if k in out else None for k in SIGNALS]
            rows.append((result_id, invocation, i, ns, out["cycles"][i], out["instructions"][i], out["work"], out["reps"],
                         out["user_s"][i], out["sys_s"][i], out["timer"], out.get("tsc_hz"),
                         out.get("core_per_tsc"), layout_pad, *signals, excluded[i] if excluded else ""))
        cols = ("result_id, invocation, idx, ns, cycles, instructions, work, reps, user_s, sys_s, timer, tsc_hz,"
                " core_per_tsc, layout_pad, " + ", ".join(SIGNALS) + ", excluded")
        with self.tx() as c:
            c.executemany(f"INSERT INTO samples ({cols}) VALUES ({', '.join('?' * len(rows[0]))})", rows)
            c.execute("UPDATE results SET notes = ?, status = 'ok' WHERE id = ? AND status = 'pending'",
                      (json.dumps(out.get("notes", {})), result_id))

    def add_analysis(self, run_id: int, kind: str, data, key: str = "") -> None:
        with self.tx() as c:
            c.execute("INSERT OR REPLACE INTO analyses VALUES (?, ?, ?, ?)", (run_id, kind, key, json.dumps(data)))

    # ---- reading -------------------------------------------------------------------

    def latest_run(self) -> int | None:
        row = self.con.execute("SELECT max(id) FROM runs").fetchone()
        return row[0]

    def run(self, run_id: int) -> dict:
        row = self.con.execute("SELECT r.*, m.fingerprint FROM runs r JOIN machines m ON m.id = r.machine_id"
                               " WHERE r.id = ?", (run_id,)).fetchone()
        if row is None:
            raise StoreError(f"no run {run_id} in {self.path}")
        d = dict(row)
        for k in ("plan", "conditions", "timing", "argv", "fingerprint"):
            d[k] = json.loads(d[k])
        return d

    def runs(self) -> list[dict]:
        return [dict(r) for r in self.con.execute(
            "SELECT r.id, r.started, r.finished, r.status, r.machine_id, count(x.id) AS results"
            " FROM runs r LEFT JOIN results x ON x.run_id = r.id GROUP BY r.id ORDER BY r.id")]

    def variants(self, run_id: int) -> list[dict]:
        return [{**json.loads(r["definition"]), "compiler_version": r["compiler_version"]}
                for r in self.con.execute("SELECT * FROM variants WHERE run_id = ? ORDER BY rowid", (run_id,))]

    def results(self, run_id: int) -> list[dict]:
        return [_result_row(r) for r in self.con.execute("SELECT * FROM results WHERE run_id = ? ORDER BY id", (run_id,))]

    def result(self, result_id: int) -> dict:
        return _result_row(self.con.execute("SELECT * FROM results WHERE id = ?", (result_id,)).fetchone())

    def samples(self, result_id: int) -> list[dict]:
        return [dict(r) for r in self.con.execute(
            "SELECT * FROM samples WHERE result_id = ? ORDER BY invocation, idx", (result_id,))]

    def artifact(self, hash_: str) -> dict | None:
        r = self.con.execute("SELECT * FROM artifacts WHERE hash = ?", (hash_,)).fetchone()
        if r is None:
            return None
        d = dict(r)
        d["commands"] = json.loads(d["commands"])
        return d

    def analyses(self, run_id: int, kind: str | None = None) -> list[dict]:
        q = "SELECT * FROM analyses WHERE run_id = ?" + (" AND kind = ?" if kind else "")
        args = (run_id, kind) if kind else (run_id,)
        return [{"kind": r["kind"], "key": r["key"], "data": json.loads(r["data"])} for r in self.con.execute(q, args)]
