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

A `[program]`'s unit is one whole run, so its count is the whole process's, counted
twice (a program that is not deterministic to REPEATABLE gets no count, saying by how
much it moved), with the functions that executed most of it named.

Valgrind 3.19 cannot execute AVX-512 and hides it from CPUID, so a build that uses it
fails to count (said so), and a kernel that picks its path at run time may take another
one under valgrind: the notes by which a kernel says which path it took (PATH_NOTES)
must equal the timed run's, else the result says which differed and gets no count.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import tempfile
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

VALGRIND = ("valgrind", "--tool=cachegrind", "--cache-sim=no")
EXTRA_INSTRUCTIONS = 20_000_000  # what the last run adds over the first (about 0.4 s under valgrind)
# The notes by which a kernel reports the code path it chose at run time (rc5-72, DES).
PATH_NOTES = ("lanes", "simd_lanes", "keys_per_batch")
TIMEOUT_S = 600.0
REPEATABLE = 0.001  # two counts of one whole process further apart than this: not deterministic
FUNCTIONS = 8  # a count names its functions executing the most instructions
# ... of at least this share of the timed work: below it, a kernel's extra repetitions
# move the harness's own printing (its numbers grow a digit), not the work.
SHOWN = 0.001


class CountError(Exception):
    """Why a result's instructions cannot be counted (one line)."""


def unavailable_reason() -> str | None:
    return None if shutil.which("valgrind") else "valgrind is not installed (Debian package valgrind)"


def count(executable: str, params: dict[str, str], timed_notes: dict | None = None,
          tsc_hz: float | None = None) -> tuple[float, list[tuple[str, float]]]:
    """The instructions per unit of one executable's timed work at `params`, and per unit
    of each of the FUNCTIONS functions executing most of it; raises CountError saying why
    when it cannot be had.  timed_notes: the notes of the timed run, whose path notes the
    counted run must repeat."""
    if why := unavailable_reason():
        raise CountError(why)
    i1, f1, d1 = _run(executable, params, 1, tsc_hz)
    for key in PATH_NOTES:
        timed, counted = (timed_notes or {}).get(key), d1.get("notes", {}).get(key)
        if timed is not None and counted != timed:
            raise CountError(f"under valgrind the kernel took another path ({key} {counted} where timed "
                             f"{timed}: valgrind hides AVX-512)")
    i2, f2, d2 = _run(executable, params, 2, tsc_hz)
    if i2 - i1 < EXTRA_INSTRUCTIONS:  # a short repetition: enough of them to drown the run-to-run wobble
        i2, f2, d2 = _run(executable, params, 1 + math.ceil(EXTRA_INSTRUCTIONS / max(i2 - i1, 1)), tsc_hz)
    extra = d2["work"] - d1["work"]
    if extra <= 0:
        raise CountError("the extra repetitions did no work")
    f2.subtract(f1)
    per_unit = (i2 - i1) / extra
    return per_unit, [(fn, n / extra) for fn, n in f2.most_common(FUNCTIONS) if n / extra >= SHOWN * per_unit]


def count_process(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, list[tuple[str, float]]]:
    """The instructions of one whole run of a command (its mean over two runs) and its
    FUNCTIONS most executed functions with their counts; raises CountError saying why
    when it cannot be had or is not deterministic."""
    if why := unavailable_reason():
        raise CountError(why)
    (a, functions), (b, _) = _run_process(argv, env), _run_process(argv, env)
    if abs(a - b) > REPEATABLE * max(a, b):
        raise CountError(f"the count moved by {abs(a - b) / max(a, b):.2%} between two runs "
                         "(the program is not deterministic)")
    return (a + b) / 2, [(fn, float(n)) for fn, n in functions.most_common(FUNCTIONS)]


def count_all(jobs: list[Callable[[], object]], workers: int = 2) -> list:
    """job() of every count job, `workers` at a time (counts do not depend on what else
    runs); a job that raises CountError gives the error in its place."""
    def one(job):
        try:
            return job()
        except CountError as e:
            return e
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(one, jobs))


def _valgrind(argv: list[str], **kw) -> tuple[subprocess.CompletedProcess, str]:
    """argv under valgrind: the finished process and the text of cachegrind's out file
    (events per source line, grouped by file and function)."""
    with tempfile.NamedTemporaryFile(prefix="cpulab-", suffix=".cg") as out:
        try:
            p = subprocess.run([*VALGRIND, f"--cachegrind-out-file={out.name}", *argv], text=True,
                               timeout=TIMEOUT_S, **kw)
        except subprocess.TimeoutExpired:
            raise CountError(f"valgrind took over {TIMEOUT_S:.0f} s") from None
        except OSError as e:
            raise CountError(f"cannot run valgrind: {e}") from None
        if "unhandled instruction" in (p.stderr or ""):
            raise CountError("valgrind 3.19 cannot execute this build's instructions (AVX-512?)")
        return p, out.read().decode(errors="replace")


def _run_process(argv: list[str], env: dict[str, str] | None) -> tuple[int, Counter]:
    p, profile = _valgrind(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           env={**os.environ, **env} if env else None)
    total, functions = function_counts(profile)
    if p.returncode != 0 or total is None:
        raise CountError(f"under valgrind: exit {p.returncode}: {(p.stderr.strip().splitlines() or ['no output'])[-1]}")
    return total, functions


def function_counts(profile: str) -> tuple[int | None, Counter]:
    """A cachegrind out file's total instructions and each function's, its lines summed
    over the files they came from."""
    per, fn, total = Counter(), "???", None
    for line in profile.splitlines():
        if line.startswith("fn="):
            fn = line[3:]
        elif line[:1].isdigit():
            fields = line.split()
            per[fn] += int(fields[1]) if len(fields) > 1 else 0
        elif line.startswith("summary:"):
            total = int(line.split()[1])
    return total, per


def _run(executable: str, params: dict[str, str], reps: int, tsc_hz: float | None) -> tuple[int, Counter, dict]:
    """One run under valgrind: the instructions of the whole process and of each
    function, and the harness's JSON.
    No warm-up, no calibration, no known-answer test (it passed when timed): one sample
    of exactly `reps` repetitions."""
    argv = [executable, "--samples", "1", "--warmup", "0", "--min-sample-time", "0",
            "--reps", str(reps), "--verified", "--timer", "clock"]
    if tsc_hz:  # without it the harness spins 30 ms, a count that depends on valgrind's speed
        argv += ["--tsc-hz", repr(float(tsc_hz))]
    for k, v in params.items():
        argv += ["--param", f"{k}={v}"]
    p, profile = _valgrind(argv, capture_output=True)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    refs, functions = function_counts(profile)
    try:
        data = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        data = {}
    if p.returncode != 0 or data.get("status") != "ok" or not refs:
        detail = data.get("error") or (p.stderr.strip().splitlines() or ["no output"])[-1]
        raise CountError(f"under valgrind: exit {p.returncode}: {detail}")
    return refs, functions, data
