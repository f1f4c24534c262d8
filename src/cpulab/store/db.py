"""The SQLite store: machines, runs, variants, results, every raw sample, and analyses,
and the results' estimates kept for histories.

WAL mode and a busy timeout let several `cpulab run` processes write at once; each
write is one short IMMEDIATE transaction, so nothing measured is lost on Ctrl-C.
Schema changes are numbered migrations applied in order from `schema_version`.
A run row names its owner (pid, process start time, boot id, host): a run left
`running` by an owner that no longer exists (SIGKILL, power loss) reads as `interrupted`.
"""
from __future__ import annotations

import json
import os
import sqlite3
import time
from contextlib import contextmanager
from pathlib import Path

from cpulab.model import Analysis
from cpulab.params import INT64_MAX
from cpulab.spec import signals
from cpulab.spec.record import RunRecord, StoredResult, StoredSample, StoredVariant
from cpulab.store.rows import RunListing, StoredArtifact, StoredRun, owner, shown_status
from cpulab.store.schema import MIGRATIONS, missing_signal_columns

# Per-sample signals the harness prints as arrays (older harness output lacks them), and
# a whole process's peak memory and page faults as the launcher saw them: their columns.
SIGNALS = tuple(s.name for s in signals.SIGNALS)
# Where and when each sample ran (migration 6; NULL in older runs).
PLACED = ("placement", "code_offset", "start_ns", "turn", "follows")


def _insert_artifact(c: sqlite3.Connection, art: dict, imported: bool = False) -> None:
    """A build's row.  A build made here is the authority on its hash: it replaces a row an
    import left.  An imported one never names an executable (its path is kept empty: a file
    from elsewhere must not point cpulab at anything to run) and never replaces a row."""
    row = (art["hash"], art["code_hash"], "" if imported else art["path"], art["size_bytes"], art["compiler_version"],
           json.dumps(art["commands"]), json.dumps(list(art.get("placements") or ())),
           int(bool(art.get("placeable") or art.get("placements"))))
    c.execute(f"INSERT OR {'IGNORE' if imported else 'REPLACE'} INTO artifacts (hash, code_hash, path, size_bytes,"
              " compiler_version, commands, placements, placeable) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", row)


class StoreError(Exception):
    pass


def _is_locked(e: sqlite3.Error) -> bool:
    """Another connection holds the lock this one waited for (busy_timeout ran out)."""
    code = (getattr(e, "sqlite_errorcode", 0) or 0) & 0xFF  # the primary code of an extended one
    return code in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


def _locked(path: Path, timeout: float) -> StoreError:
    return StoreError(f"store {path} is locked by another process (waited {timeout:g} s)")


def _store_error(path: Path, e: sqlite3.Error, timeout: float) -> StoreError:
    """One line saying what is wrong with the store on opening: locked, unopenable, not SQLite."""
    if _is_locked(e):
        return _locked(path, timeout)
    if getattr(e, "sqlite_errorcode", 0) & 0xFF == sqlite3.SQLITE_READONLY or not os.access(path.parent, os.W_OK) \
            or path.exists() and not os.access(path, os.W_OK):
        return StoreError(f"store {path} cannot be written (its file or its directory is read-only)")
    if getattr(e, "sqlite_errorcode", 0) == sqlite3.SQLITE_CANTOPEN:
        return StoreError(f"store {path} cannot be opened ({e})")
    return StoreError(f"store {path} is not a cpulab database ({e})")


class Store:
    def __init__(self, path: Path | str, timeout: float = 60.0, create: bool = True):
        """Open a cpulab store, creating it if new (create=False: a store that is not there is
        a StoreError, and nothing is made: commands that only read); timeout: seconds to
        wait for another writer's lock before saying the store is locked."""
        self.path, self.timeout = Path(path), timeout
        if self.path.is_dir():
            raise StoreError(f"store {self.path} is a directory: give a file")
        if not create and not self.path.is_file():
            raise StoreError(f"no store at {self.path} (cpulab run or cpulab import makes one)")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StoreError(f"store {self.path} cannot be created ({e.strerror})") from None
        try:
            self.con = sqlite3.connect(str(self.path), timeout=timeout, isolation_level=None)
            self.con.row_factory = sqlite3.Row
            self.con.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
            self._migrate()
            self.con.execute("PRAGMA foreign_keys = ON")
            if self.con.execute("PRAGMA journal_mode").fetchone()[0] == "wal":
                # unsynced commits: an OS crash may lose the last, never consistency (a sync: 0.26 ms)
                self.con.execute("PRAGMA synchronous = NORMAL")
        except sqlite3.Error as e:
            raise _store_error(self.path, e, timeout) from None

    def close(self) -> None:
        self.con.close()

    @contextmanager
    def tx(self):
        """One write transaction; taken IMMEDIATE so concurrent writers queue, not fail.
        A lock held by another process past the timeout is a StoreError saying so."""
        try:
            self.con.execute("BEGIN IMMEDIATE")
            yield self.con
            self.con.execute("COMMIT")
        except BaseException as e:
            if self.con.in_transaction:
                self.con.execute("ROLLBACK")
            if isinstance(e, sqlite3.Error) and _is_locked(e):
                raise _locked(self.path, self.timeout) from None
            if isinstance(e, sqlite3.OperationalError):  # full, read-only, gone: the store's, said as such
                raise StoreError(f"store {self.path}: {e}") from None
            raise

    def _stored_version(self) -> int:
        """The schema version; 0 for an empty database.  A database of something else (tables,
        but no cpulab schema_version) is refused before anything in it is changed."""
        tables = {r[0] for r in self.con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "schema_version" in tables:
            row = self.con.execute("SELECT version FROM schema_version").fetchone()
            if row is not None:
                return row[0]
        if tables - {"schema_version"}:
            raise StoreError(f"store {self.path} is an SQLite database of something else (tables but no cpulab "
                             "schema_version); cpulab leaves it alone: give another --db")
        return 0

    def _migrate(self) -> None:
        """Bring the schema up to date.  An up-to-date store takes no write lock, so reading
        it never waits behind a long writer."""
        version = self._stored_version()
        if version > len(MIGRATIONS):
            raise StoreError(f"{self.path}: schema version {version} is newer than this cpulab "
                             f"({len(MIGRATIONS)}); upgrade cpulab")
        if version == len(MIGRATIONS) and not missing_signal_columns(self._sample_columns()):
            return
        self.con.execute("PRAGMA journal_mode = WAL")  # only on a store that is ours (or empty)
        with self.tx() as c:
            version = self._stored_version()  # again, under the lock: another process may have migrated
            for sql in MIGRATIONS[version:]:
                for stmt in sql.split(";"):
                    if stmt.strip():
                        c.execute(stmt)
            for stmt in missing_signal_columns(self._sample_columns()):
                c.execute(stmt)
            c.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
            c.execute("DELETE FROM schema_version")
            c.execute("INSERT INTO schema_version VALUES (?)", (len(MIGRATIONS),))

    def _sample_columns(self) -> set[str]:
        return {r[1] for r in self.con.execute("PRAGMA table_info(samples)")}

    def schema_version(self) -> int:
        return self.con.execute("SELECT version FROM schema_version").fetchone()[0]

    # ---- writing -------------------------------------------------------------------

    def start_run(self, fingerprint: dict, machine_id: str, record: RunRecord, conditions: dict,
                  timing: dict, argv: list[str], parent: int | None = None, machine: str = "",
                  label: str = "", origin: dict | None = None) -> int:
        """A new run; `parent` and `machine` make it one machine's part of a cluster run;
        `label` and `origin` (plan.origin.origin_of) say where its code came from."""
        with self.tx() as c:
            c.execute("INSERT OR IGNORE INTO machines VALUES (?, ?, ?)",
                      (machine_id, json.dumps(fingerprint), time.time()))
            cur = c.execute(
                "INSERT INTO runs (machine_id, started, status, plan, conditions, timing, argv, owner_pid,"
                " owner_started, owner_boot_id, owner_host, parent, machine, label, origin) VALUES (:machine_id, :started,"
                " 'running', :plan, :conditions, :timing, :argv, :owner_pid, :owner_started, :owner_boot_id,"
                " :owner_host, :parent, :machine, :label, :origin)",
                {"machine_id": machine_id, "started": time.time(), "plan": json.dumps(record.stored),
                 "conditions": json.dumps(conditions), "timing": json.dumps(timing), "argv": json.dumps(argv),
                 "parent": parent, "machine": machine, "label": label, "origin": json.dumps(origin or {}),
                 **owner()})
            return int(cur.lastrowid)

    def claim_run(self, run_id: int) -> None:
        """Make this process the owner of a stopped run, to finish it (cpulab run --resume).
        Refused while its owner is still measuring it."""
        with self.tx() as c:
            row = c.execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone()
            if row is None:
                raise StoreError(f"no run {run_id} in {self.path}")
            if shown_status(dict(row)) == "running":
                raise StoreError(f"run {run_id} is still running (pid {row['owner_pid']} on "
                                 f"{row['owner_host'] or 'an unknown host'})")
            c.execute("UPDATE runs SET status = 'running', finished = NULL, owner_pid = :owner_pid,"
                      " owner_started = :owner_started, owner_boot_id = :owner_boot_id, owner_host = :owner_host"
                      " WHERE id = :id", {**owner(), "id": run_id})

    def finish_run(self, run_id: int, status: str) -> None:
        with self.tx() as c:
            c.execute("UPDATE runs SET finished = ?, status = ? WHERE id = ?", (time.time(), status, run_id))

    def add_variant(self, run_id: int, definition: dict, compiler_version: str) -> None:
        with self.tx() as c:
            c.execute("INSERT OR REPLACE INTO variants VALUES (?, ?, ?, ?)",
                      (run_id, definition["name"], json.dumps(definition), compiler_version))

    def add_artifact(self, art: dict) -> None:
        with self.tx() as c:
            _insert_artifact(c, art)

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

    def add_process(self, result_id: int, process: int, out: dict, layout_pad: int,
                    excluded: list[str] | None = None, placement: int | None = None,
                    order: list[tuple[int, str]] | None = None) -> None:
        """Store one harness JSON result's samples (with the signals seen around each and,
        in `excluded`, why a sample is left out of estimates), and its notes.  placement:
        which placement of the artifact ran; order: each sample's (turn, the variant
        just before it) when it ran in turns."""
        rows = []
        events = out.get("events") or {}
        for i, ns in enumerate(out["ns"]):
            signals = [out[k][i] if k in out else None for k in SIGNALS]
            counted = json.dumps({k: v[i] for k, v in events.items()}) if events else None
            turn, follows = order[i] if order else (None, None)
            start = out["t_ns"][i] if "t_ns" in out else None
            rows.append((result_id, process, i, ns, out["cycles"][i], out["instructions"][i], out["work"], out["reps"],
                         out["user_s"][i], out["sys_s"][i], out["timer"], out.get("tsc_hz"),
                         out.get("core_per_tsc"), layout_pad, *signals, excluded[i] if excluded else "",
                         placement, out.get("code_offset"), start, turn, follows, counted))
        cols = ("result_id, process, idx, ns, cycles, instructions, work, reps, user_s, sys_s, timer, tsc_hz,"
                " core_per_tsc, layout_pad, " + ", ".join(SIGNALS) + ", excluded, " + ", ".join(PLACED) + ", events")
        with self.tx() as c:
            c.executemany(f"INSERT INTO samples ({cols}) VALUES ({', '.join('?' * len(rows[0]))})", rows)
            c.execute("UPDATE results SET notes = ?, status = 'ok' WHERE id = ? AND status = 'pending'",
                      (json.dumps(out.get("notes", {})), result_id))
            c.execute("DELETE FROM estimates WHERE result_id = ?", (result_id,))  # made without these samples

    def estimates(self, run_id: int, estimator: str) -> dict[int, tuple[float, list[float] | None, str]]:
        """The run's kept rate estimates by this estimator: result id -> (median, [ci low,
        high] or None, rate unit)."""
        rows = self.con.execute("SELECT e.* FROM estimates e JOIN results r ON r.id = e.result_id"
                                " WHERE r.run_id = ? AND e.estimator = ?", (run_id, estimator))
        return {r["result_id"]: (r["median"], None if r["ci_low"] is None else [r["ci_low"], r["ci_high"]],
                                 r["rate_unit"]) for r in rows}

    def keep_estimates(self, estimator: str, rows: list[tuple[int, float, list[float] | None, str]]) -> None:
        """Keep (result id, median, ci or None, rate unit) rows as this estimator's."""
        with self.tx() as c:
            c.executemany("INSERT OR REPLACE INTO estimates VALUES (?, ?, ?, ?, ?, ?)",
                          [(rid, estimator, m, ci[0] if ci else None, ci[1] if ci else None, unit)
                           for rid, m, ci, unit in rows])

    def add_conditions(self, run_id: int, conditions: dict) -> None:
        """Add to a run's conditions what is known only once it has measured (its CPU's wait)."""
        with self.tx() as c:
            row = c.execute("SELECT conditions FROM runs WHERE id = ?", (run_id,)).fetchone()
            c.execute("UPDATE runs SET conditions = ? WHERE id = ?",
                      (json.dumps({**json.loads(row[0]), **conditions}), run_id))

    def set_notes(self, result_id: int, notes: dict) -> None:
        """Add to a result's notes (e.g. medians over its processes of peak RSS)."""
        with self.tx() as c:
            row = c.execute("SELECT notes FROM results WHERE id = ?", (result_id,)).fetchone()
            c.execute("UPDATE results SET notes = ? WHERE id = ?",
                      (json.dumps({**json.loads(row[0]), **notes}), result_id))

    def add_analysis(self, run_id: int, kind: str, data, key: str = "") -> None:
        with self.tx() as c:
            c.execute("INSERT OR REPLACE INTO analyses VALUES (?, ?, ?, ?)", (run_id, kind, key, json.dumps(data)))

    def import_runs(self, runs: list[dict], source: str) -> list[tuple[int, bool]]:
        """Copy checked runs (exchange.ExportedRun documents, parents before children) in one
        transaction: all or nothing.  source: what they came from ("cpulab", or another
        tool's name and its file's digest), kept with each run.  A run already here (a
        cpulab run: the same machine id, start time and worker name; another tool's: the
        same source) is kept as it is; returns (run id, newly added) per run."""
        ids: list[tuple[int, bool]] = []
        with self.tx() as c:
            for r in runs:
                parent = ids[r["parent"]][0] if r["parent"] is not None else None
                row = c.execute("SELECT id FROM runs WHERE imported = ?", (source,)).fetchone() \
                    if source != "cpulab" else \
                    c.execute("SELECT id FROM runs WHERE machine_id = ? AND started = ? AND machine = ?",
                              (r["machine_id"], r["started"], r["machine"])).fetchone()
                if row:
                    ids.append((row[0], False))
                    continue
                c.execute("INSERT OR IGNORE INTO machines VALUES (?, ?, ?)",
                          (r["machine_id"], json.dumps(r["fingerprint"]), r["started"]))
                run_id = c.execute(
                    "INSERT INTO runs (machine_id, started, finished, status, plan, conditions, timing, argv,"
                    " parent, machine, label, origin, imported) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (r["machine_id"], r["started"], r["finished"], r["status"], json.dumps(r["plan"]),
                     json.dumps(r["conditions"]), json.dumps(r["timing"]), json.dumps(r["argv"]), parent,
                     r["machine"], r["label"], json.dumps(r["origin"]), source)).lastrowid
                ids.append((run_id, True))
                for v in map(StoredVariant.from_dict, r["variants"]):
                    c.execute("INSERT INTO variants VALUES (?, ?, ?, ?)",
                              (run_id, v.name, json.dumps(v.definition), v.compiler_version))
                for a in r["artifacts"]:
                    _insert_artifact(c, a, imported=True)
                for x in r["results"]:
                    rid = c.execute(
                        "INSERT INTO results (run_id, experiment, workload, variant, params, unit, status, error,"
                        " artifact_hash, same_as, notes) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (run_id, x["experiment"], x["workload"], x["variant"], json.dumps(x["params"], sort_keys=True),
                         x["unit"], x["status"], x["error"], x["artifact_hash"], x["same_as"],
                         json.dumps(x["notes"]))).lastrowid
                    cols = ["process", "idx", "ns", "cycles", "instructions", "work", "reps", "user_s", "sys_s",
                            "timer", "tsc_hz", "core_per_tsc", "layout_pad", *SIGNALS, "excluded", *PLACED]
                    c.executemany(f"INSERT INTO samples (result_id, {', '.join(cols)}, events)"
                                  f" VALUES ({', '.join('?' * (len(cols) + 2))})",
                                  [(rid, *(s.get(k) for k in cols), json.dumps(s["events"]) if s.get("events") else None)
                                   for s in x["samples"]])
                for a in r["analyses"]:
                    c.execute("INSERT INTO analyses VALUES (?, ?, ?, ?)",
                              (run_id, a["kind"], a["key"], json.dumps(a["data"])))
        return ids

    # ---- reading -------------------------------------------------------------------

    def latest_run(self) -> int | None:
        row = self.con.execute("SELECT max(id) FROM runs WHERE parent IS NULL").fetchone()
        return row[0]

    def machine_runs(self, run_id: int) -> list[int]:
        """The per-machine runs of a cluster run, in the order they started."""
        return [r[0] for r in self.con.execute("SELECT id FROM runs WHERE parent = ? ORDER BY id", (run_id,))]

    def run(self, run_id: int) -> StoredRun:
        if not 0 < run_id <= INT64_MAX:  # SQLite's largest row id
            raise StoreError(f"no run {run_id} in {self.path}")
        row = self.con.execute("SELECT r.*, m.fingerprint FROM runs r JOIN machines m ON m.id = r.machine_id"
                               " WHERE r.id = ?", (run_id,)).fetchone()
        if row is None:
            raise StoreError(f"no run {run_id} in {self.path}")
        return StoredRun.of_row(row)

    def runs(self, label: str | None = None, commit: str | None = None, machine: str | None = None) -> list[RunListing]:
        """Every run, or those with this label, at this commit (a prefix) and on this machine (its
        id's prefix, its worker name, or a part of its CPU model)."""
        where, args = [], []
        if label is not None:
            where.append("r.label = ?")
            args.append(label)
        if commit:
            where.append("json_extract(r.origin, '$.commit') LIKE ? || '%'")
            args.append(commit)
        if machine:
            where.append("(r.machine_id LIKE ? || '%' OR r.machine = ?"
                         " OR json_extract(m.fingerprint, '$.cpu_model') LIKE '%' || ? || '%')")
            args += [machine, machine, machine]
        return [RunListing.of_row(r) for r in self.con.execute(
            "SELECT r.id, r.started, r.finished, r.status, r.machine_id, r.parent, r.machine, r.label, r.origin,"
            " count(x.id) AS results, r.imported, r.owner_pid, r.owner_started, r.owner_boot_id, r.owner_host"
            " FROM runs r JOIN machines m ON m.id = r.machine_id LEFT JOIN results x ON x.run_id = r.id"
            + (" WHERE " + " AND ".join(where) if where else "") + " GROUP BY r.id ORDER BY r.id", args)]

    def variants(self, run_id: int) -> list[StoredVariant]:
        return [StoredVariant.of_row(r)
                for r in self.con.execute("SELECT * FROM variants WHERE run_id = ? ORDER BY rowid", (run_id,))]

    def results(self, run_id: int) -> list[StoredResult]:
        return [StoredResult.of_row(r)
                for r in self.con.execute("SELECT * FROM results WHERE run_id = ? ORDER BY id", (run_id,))]

    def result(self, result_id: int) -> StoredResult:
        return StoredResult.of_row(self.con.execute("SELECT * FROM results WHERE id = ?", (result_id,)).fetchone())

    def processes_measured(self, run_id: int) -> dict[int, int]:
        """Result id -> the next process number (processes measured so far) of a run's
        results that have samples."""
        return {r[0]: r[1] for r in self.con.execute(
            "SELECT s.result_id, max(s.process) + 1 FROM samples s JOIN results x ON x.id = s.result_id"
            " WHERE x.run_id = ? GROUP BY s.result_id", (run_id,))}

    def samples(self, result_id: int) -> list[StoredSample]:
        return [StoredSample.of_row(r) for r in self.con.execute(
            "SELECT * FROM samples WHERE result_id = ? ORDER BY process, idx", (result_id,))]

    def artifact(self, hash_: str) -> StoredArtifact | None:
        r = self.con.execute("SELECT * FROM artifacts WHERE hash = ?", (hash_,)).fetchone()
        return None if r is None else StoredArtifact.of_row(r)

    def analyses(self, run_id: int, kind: str | None = None) -> list[Analysis]:
        q = "SELECT * FROM analyses WHERE run_id = ?" + (" AND kind = ?" if kind else "")
        args = (run_id, kind) if kind else (run_id,)
        return [Analysis(r["kind"], r["key"], json.loads(r["data"])) for r in self.con.execute(q, args)]
