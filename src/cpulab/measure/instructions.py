"""The second witness where no counters exist: each result's instructions per unit of
work, counted exactly by valgrind (cachegrind without its cache model counts every
user-space instruction executed), beside a time that moves by percents.

The artifact runs under valgrind with one sample of 1 repetition, then of 2, then (when
a repetition is short) of enough to add EXTRA_INSTRUCTIONS: set-up, the harness's own
timing and printing are alike in every run, so the difference over the extra
repetitions' work is the timed work alone (k_run and what it calls).  Alike to a few
hundred instructions: the loader and the environment move a process's count by that
much from run to run, 0.005% of EXTRA_INSTRUCTIONS.  Counting is not timing: it runs
after the rounds, two at a time.

Valgrind 3.19 cannot execute AVX-512 and hides it from CPUID, so a build that uses it
fails to count (said so), and a kernel that picks its path at run time may take another
one under valgrind: the notes by which a kernel says which path it took (PATH_NOTES)
must equal the timed run's, else the result says which differed and gets no count.
"""
from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor

VALGRIND = ("valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null")
EXTRA_INSTRUCTIONS = 20_000_000  # what the last run adds over the first (about 0.4 s under valgrind)
# The notes by which a kernel reports the code path it chose at run time (rc5-72, DES).
PATH_NOTES = ("lanes", "simd_lanes", "keys_per_batch")
TIMEOUT_S = 600.0
_REFS = re.compile(r"I\s+refs:\s+([\d,]+)")


class CountError(Exception):
    """Why a result's instructions cannot be counted (one line)."""


def unavailable_reason() -> str | None:
    return None if shutil.which("valgrind") else "valgrind is not installed (Debian package valgrind)"


def count(executable: str, params: dict[str, str], timed_notes: dict | None = None,
          tsc_hz: float | None = None) -> float:
    """The instructions per unit of one executable's timed work at `params`; raises
    CountError saying why when it cannot be had.  timed_notes: the notes of the timed
    run, whose path notes the counted run must repeat."""
    if why := unavailable_reason():
        raise CountError(why)
    i1, d1 = _run(executable, params, 1, tsc_hz)
    for key in PATH_NOTES:
        timed, counted = (timed_notes or {}).get(key), d1.get("notes", {}).get(key)
        if timed is not None and counted != timed:
            raise CountError(f"under valgrind the kernel took another path ({key} {counted} where timed "
                             f"{timed}: valgrind hides AVX-512)")
    i2, d2 = _run(executable, params, 2, tsc_hz)
    if i2 - i1 < EXTRA_INSTRUCTIONS:  # a short repetition: enough of them to drown the run-to-run wobble
        i2, d2 = _run(executable, params, 1 + math.ceil(EXTRA_INSTRUCTIONS / max(i2 - i1, 1)), tsc_hz)
    extra = d2["work"] - d1["work"]
    if extra <= 0:
        raise CountError("the extra repetitions did no work")
    return (i2 - i1) / extra


def count_all(jobs: list[tuple], workers: int = 2) -> list[float | CountError]:
    """count(*job) of every job, `workers` at a time (counts do not depend on what else runs)."""
    def one(job):
        try:
            return count(*job)
        except CountError as e:
            return e
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(one, jobs))


def _run(executable: str, params: dict[str, str], reps: int, tsc_hz: float | None) -> tuple[int, dict]:
    """One run under valgrind: (instructions of the whole process, the harness's JSON).
    No warm-up, no calibration, no known-answer test (it passed when timed): one sample
    of exactly `reps` repetitions."""
    argv = [*VALGRIND, executable, "--samples", "1", "--warmup", "0", "--min-sample-time", "0",
            "--reps", str(reps), "--verified", "--timer", "clock"]
    if tsc_hz:  # without it the harness spins 30 ms, a count that depends on valgrind's speed
        argv += ["--tsc-hz", repr(float(tsc_hz))]
    for k, v in params.items():
        argv += ["--param", f"{k}={v}"]
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise CountError(f"valgrind took over {TIMEOUT_S:.0f} s") from None
    if "unhandled instruction" in p.stderr:
        raise CountError("valgrind 3.19 cannot execute this build's instructions (AVX-512?)")
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    refs = _REFS.search(p.stderr)
    try:
        data = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        data = {}
    if p.returncode != 0 or data.get("status") != "ok" or not refs:
        detail = data.get("error") or (p.stderr.strip().splitlines() or ["no output"])[-1]
        raise CountError(f"under valgrind: exit {p.returncode}: {detail}")
    return int(refs.group(1).replace(",", "")), data
