"""The store's schema: numbered migrations applied in order from `schema_version`, each
with why it was added.  A store of any earlier version is brought up to this one when it
is opened; one of a later version is refused (store/db.py)."""
from __future__ import annotations

from cpulab.spec.signals import SIGNALS

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
        invocation INTEGER NOT NULL,    -- which process (migration 7: `process`): layout is fixed within one
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
    # 2: who is measuring a run, so that a dead owner's run is known to be over
    """
    ALTER TABLE runs ADD COLUMN owner_pid INTEGER;
    ALTER TABLE runs ADD COLUMN owner_started INTEGER;  -- the owner's start, clock ticks after boot
    ALTER TABLE runs ADD COLUMN owner_boot_id TEXT;     -- /proc/sys/kernel/random/boot_id
    ALTER TABLE runs ADD COLUMN owner_host TEXT;
    """,
    # 3: a run across a cluster is a parent run with one child run per machine (worker name)
    """
    ALTER TABLE runs ADD COLUMN parent INTEGER REFERENCES runs(id);
    ALTER TABLE runs ADD COLUMN machine TEXT NOT NULL DEFAULT '';
    CREATE INDEX runs_parent ON runs(parent);
    """,
    # 4: what was seen around each sample (harness), and why a sample is left out of
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
    # 5: where the measured code came from: a label the user gave, and the git commit and
    # dirty state of the program's source or the plan's directory (JSON, {} when unknown)
    """
    ALTER TABLE runs ADD COLUMN label TEXT NOT NULL DEFAULT '';
    ALTER TABLE runs ADD COLUMN origin TEXT NOT NULL DEFAULT '{}';
    """,
    # 6: where each sample's code sat and when it ran among the other members of its group,
    # so placement is a measured effect and carry-over between members can be checked
    """
    ALTER TABLE samples ADD COLUMN placement INTEGER;     -- which placement of the artifact ran (NULL: not varied)
    ALTER TABLE samples ADD COLUMN code_offset INTEGER;   -- k_run's address modulo 4096, as the harness saw it
    ALTER TABLE samples ADD COLUMN start_ns REAL;         -- the sample's start, CLOCK_MONOTONIC ns
    ALTER TABLE samples ADD COLUMN turn INTEGER;          -- its position in its cycle (turns), NULL otherwise
    ALTER TABLE samples ADD COLUMN follows TEXT;          -- the variant that ran just before it ('' the first)
    ALTER TABLE artifacts ADD COLUMN placements TEXT NOT NULL DEFAULT '[]';  -- pad bytes of each placement
    """,
    # 7: one word per idea: a measured process is a process (it was an invocation)
    """
    ALTER TABLE samples RENAME COLUMN invocation TO process;
    """,
    # 8: each result's rate estimate as one estimator made it, kept so that a run's history
    # does not estimate every stored result of its points again (2.7 ms each); a result's
    # are dropped when it gets more samples
    """
    CREATE TABLE estimates (
        result_id INTEGER NOT NULL REFERENCES results(id),
        estimator TEXT NOT NULL,        -- estimates.ESTIMATOR: which code made it
        median REAL NOT NULL,
        ci_low REAL,                    -- NULL: no interval (one process)
        ci_high REAL,
        rate_unit TEXT NOT NULL,
        PRIMARY KEY (result_id, estimator)
    );
    """,
    # 9: an artifact's placements are drawn per round from its hash (compile/artifacts.py),
    # no longer a list of pads: whether it has them
    """
    ALTER TABLE artifacts ADD COLUMN placeable INTEGER NOT NULL DEFAULT 0;
    UPDATE artifacts SET placeable = 1 WHERE placements != '[]';
    """,
    # 10: a whole process's peak memory and page faults (wait4), so memory is a metric
    # compared like time (programs, cpulab time; NULL for kernels' samples)
    """
    ALTER TABLE samples ADD COLUMN max_rss_kb REAL;
    ALTER TABLE samples ADD COLUMN page_faults REAL;
    """,
    # 11: where an imported run came from ('' for a run measured by this cpulab): such a run
    # is data, never resumed or measured against; another tool's file is known by its digest,
    # so that importing it twice adds it once
    """
    ALTER TABLE runs ADD COLUMN imported TEXT NOT NULL DEFAULT '';
    """,
    # 12: named counters read around each sample (--events): {name: count} as JSON, NULL
    # where none was asked
    """
    ALTER TABLE samples ADD COLUMN events TEXT;
    """,
]


def missing_signal_columns(columns: set[str]) -> list[str]:
    """What makes a store's samples table hold every declared per-sample signal
    (spec/signals.py): a column for each one it lacks (Store._migrate adds them after the
    numbered migrations, on any store, whatever its version)."""
    return [f"ALTER TABLE samples ADD COLUMN {s.name} REAL" for s in SIGNALS if s.name not in columns]
