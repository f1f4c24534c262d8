"""The second witness where no counters exist: each result's instructions per unit of
work, counted exactly, by valgrind (cachegrind without its cache model counts every
user-space instruction executed) or stepped on the core (below), beside a time that moves
by percents.

The artifact runs under valgrind with one sample of 1 repetition, then of 2, then (when
a repetition is short) of enough to add EXTRA_INSTRUCTIONS: set-up, the harness's own
timing and printing are alike in every run, so the difference over the extra
repetitions' work is the timed work alone (k_run and what it calls).  Alike to WOBBLE:
the loader, the environment and the floats printed move a process's count by hundreds of
instructions from run to run (0.005% of EXTRA_INSTRUCTIONS), more than a 4 KiB chase's
repetition (2 repetitions once counted 58 fewer than 1, beside a busy loop): how many to add
reads a repetition as at least WOBBLE.  Counting is not timing: it runs after the rounds,
two at a time.

A `[program]`'s unit is one whole run, so its count is the whole process's, counted
twice (a program that is not deterministic to REPEATABLE gets no count, saying by how
much it moved), with the functions that executed most of it named.

A memory kernel (Workload.simulate_caches) is counted with cachegrind's cache model on:
its D1 and last-level misses per unit come with the count, by the same difference.  The
model is a simulation with this machine's cache sizes, not the hardware's replacement,
prefetchers or TLBs: it says which level the work should miss, a witness beside the
measured latency.  Its D1 and last level are the ones the OS reports (sysfs), where
cachegrind accepts them (sets a power of two): valgrind's own reading of CPUID took a
KVM guest's 32 MiB L3 for the host's 256 MiB and saw no 64 MiB chase miss it.

Valgrind 3.19 cannot execute AVX-512 and hides it from CPUID, so a build that uses it
stops on an unhandled instruction, and a kernel that picks its path at run time takes
another one under valgrind: the notes by which a kernel says which path it took
(PATH_NOTES) must equal the timed run's.  Such a build is counted on the core itself
(`instructions_source` "branch-step"): the build's own harness counts its first k_run
call with a stop (a trap it handles itself, native/stepcount.h) at each branch
(measure/stepmap.py maps the instructions between two branches, which run freely), exact
and without the loader's or the set-up's instructions, so the difference of calls of 1
and 2 repetitions is one repetition's work to the instruction (one call alone would add
the call's own set-up: 1.8% of RC5's SIMD repetition).  A stop costs 2.5-3.3 us under KVM
(12.4 us as a ptrace stop, its first form), so a call is bounded by STEP_LIMIT stops.
Stepping is also tried first, up to QUICK_STOPS stops a repetition, on any build: there it
costs less than valgrind's runs.  Valgrind counts branchier calls (a stop every 4-5
instructions: DES's table core, 1.6 million a repetition), calls stepping cannot follow,
and whatever asks for the cache model.
"""
from __future__ import annotations

import bisect
import dataclasses
import functools
import hashlib
import json
import math
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from cpulab.machine import cpuinfo, os_cache_sizes
from cpulab.measure import stepmap
from cpulab.measure.symbols import symbols
from cpulab.params import data_caches

VALGRIND = ("valgrind", "--tool=cachegrind")
EXTRA_INSTRUCTIONS = 20_000_000  # what the last run adds over the first (about 0.4 s under valgrind)
WOBBLE = 1_000  # what a whole process's count may move by under valgrind, run to run
# The notes by which a kernel reports the code path it chose at run time (rc5-72, DES).
PATH_NOTES = ("lanes", "simd_lanes", "keys_per_batch")
TIMEOUT_S = 600.0
STEP_LIMIT = 1_000_000  # stops (branches) one stepped call may take (about 3.5 s under KVM)
# Stops a repetition may take to be stepped before valgrind is tried, the cheaper counter
# below it (RC5's portable core, 12,300 stops: 0.15 s of CPU against valgrind's 0.87 s).
QUICK_STOPS = 100_000
REPEATABLE = 0.001  # two counts of one whole process further apart than this: not deterministic
FUNCTIONS = 8  # a count names its functions executing the most instructions
# ... of at least this share of the timed work: below it, a kernel's extra repetitions
# move the harness's own printing (its numbers grow a digit), not the work.
SHOWN = 0.001


@dataclass
class Count:
    """Instructions per unit of work (a program's: per run), the functions executing the
    most of them (name, per unit), and with the cache model its misses per unit."""
    per_unit: float
    functions: list[tuple[str, float]]
    d1_misses: float | None = None
    ll_misses: float | None = None
    source: str = "valgrind"  # or "branch-step": counted on the core itself (stepcount.h)

    def notes(self) -> dict:
        return {"instructions_per_unit": self.per_unit, "instructions_source": self.source,
                "instructions_by_function": self.functions,
                **({"d1_misses_per_unit": self.d1_misses, "ll_misses_per_unit": self.ll_misses}
                   if self.d1_misses is not None else {})}


class CountError(Exception):
    """Why a result's instructions cannot be counted (one line)."""


class OtherPath(CountError):
    """Valgrind cannot run the timed path (AVX-512): the core itself must count it."""


def unavailable_reason() -> str | None:
    return None if shutil.which("valgrind") else "valgrind is not installed (Debian package valgrind)"


def count(executable: str, params: dict[str, str], timed_notes: dict | None = None,
          tsc_hz: float | None = None, caches: bool = False) -> Count:
    """The instructions per unit of one executable's timed work at `params` and of each
    of the FUNCTIONS functions executing most of it (with `caches`, the simulated D1 and
    last-level misses per unit too); raises CountError saying why when it cannot be had.
    timed_notes: the notes of the timed run, whose path notes the counted run must repeat.
    Counted under valgrind, or stepped on the core where valgrind cannot run the timed
    path.  A count is exact, so it is kept beside the executable (kept_count) and counted
    once per CPU model."""
    kept = kept_count(executable, params, timed_notes, caches)
    if kept.exists():
        doc = json.loads(kept.read_text())
        return Count(**{**doc, "functions": [tuple(f) for f in doc["functions"]]})
    c = _count(executable, params, timed_notes, tsc_hz, caches)
    kept.parent.mkdir(exist_ok=True)
    tmp = kept.with_suffix(f".{os.getpid()}.{threading.get_ident()}")
    tmp.write_text(json.dumps(dataclasses.asdict(c)))
    tmp.replace(kept)  # whole or not at all: two lanes may count one executable at once
    return c


def kept_count(executable: str, params: dict[str, str], timed_notes: dict | None, caches: bool) -> Path:
    """Where the count of `executable` at `params` is kept: beside it (the artifact cache),
    named by what decides it besides the bytes: the parameters, the code path the timed
    run took (PATH_NOTES), the cache model and the CPU (its model and features pick the
    path of a kernel that dispatches at run time, e.g. isa=auto)."""
    cpu = cpuinfo()
    what = {"params": params, "path": {k: (timed_notes or {}).get(k) for k in PATH_NOTES},
            "caches": cache_model(os_cache_sizes()) if caches else None,
            "cpu": [cpu.get("model name", ""), cpu.get("flags") or cpu.get("Features", "")]}
    digest = hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:24]
    return Path(executable).parent / "counts" / f"{digest}.json"


def _count(executable: str, params: dict[str, str], timed_notes: dict | None, tsc_hz: float | None,
           caches: bool) -> Count:
    """count() without its keeping: stepped where that is cheap (at most QUICK_STOPS a
    repetition) and no cache model is asked for, else under valgrind, else (valgrind cannot
    run the timed path) stepped to STEP_LIMIT."""
    if not caches and not step_unavailable_reason():
        try:
            return count_with(functools.partial(step_run, stops_a_rep=QUICK_STOPS), executable, params,
                              timed_notes, tsc_hz, False)
        except CountError:
            pass  # a branchy call (valgrind counts it faster), or one stepping cannot follow
    if why := unavailable_reason():
        raise CountError(why)
    try:
        return count_with(valgrind_run, executable, params, timed_notes, tsc_hz, caches)
    except OtherPath as e:
        if why := step_unavailable_reason():
            raise CountError(f"{e}; {why}") from None
        return count_with(step_run, executable, params, timed_notes, tsc_hz, False)


def count_with(run: Callable[..., _Profile], executable: str, params: dict[str, str], timed_notes: dict | None,
              tsc_hz: float | None, caches: bool) -> Count:
    """count() by one counter, `run` (valgrind_run or step_run): the difference of 1 and
    more repetitions (the module's doc) is their work; stepping counts the call alone."""
    r1 = run(executable, params, 1, tsc_hz, caches)
    for key in PATH_NOTES:
        timed, counted = (timed_notes or {}).get(key), r1.data.get("notes", {}).get(key)
        if timed is not None and counted != timed:
            raise OtherPath(f"counted by {r1.source}, the kernel took another path ({key} {counted} where timed "
                            f"{timed}{': valgrind hides AVX-512' if r1.source == 'valgrind' else ''})")
    reps = 2  # then enough to add EXTRA_INSTRUCTIONS, reading at least WOBBLE a repetition
    for _ in range(3):
        r2 = run(executable, params, reps, tsc_hz, caches)
        if r2.data["work"] <= r1.data["work"]:
            raise CountError("the extra repetitions did no work")
        grew = r2.events["Ir"] - r1.events["Ir"]
        if r1.call_alone or grew >= EXTRA_INSTRUCTIONS or reps > 2 and grew >= EXTRA_INSTRUCTIONS // 2:
            break
        reps = 1 + math.ceil(EXTRA_INSTRUCTIONS * (reps - 1) / max(grew, WOBBLE))
    if grew <= 0:  # without tsc_hz the harness's calibration spin varies more than a repetition
        raise CountError(f"more repetitions added {grew} instructions: the process's own work varies more")
    extra = r2.data["work"] - r1.data["work"]

    def added(*events: str) -> float:
        return sum(r2.events[e] - r1.events[e] for e in events) / extra
    per_unit = added("Ir")
    r2.functions.subtract(r1.functions)
    return Count(per_unit, [(fn, n / extra) for fn, n in r2.functions.most_common(FUNCTIONS)
                            if n / extra >= SHOWN * per_unit],
                 *((added("D1mr", "D1mw"), added("DLmr", "DLmw")) if caches else ()), source=r1.source)


def count_process(argv: list[str], env: dict[str, str] | None = None) -> Count:
    """The instructions of one whole run of a command (its mean over two runs) and its
    FUNCTIONS most executed functions with their counts; raises CountError saying why
    when it cannot be had or is not deterministic."""
    if why := unavailable_reason():
        raise CountError(why)
    first, second = _run_process(argv, env), _run_process(argv, env)
    a, b = first.events["Ir"], second.events["Ir"]
    if abs(a - b) > REPEATABLE * max(a, b):
        raise CountError(f"the count moved by {abs(a - b) / max(a, b):.2%} between two runs "
                         "(the program is not deterministic)")
    return Count((a + b) / 2, [(fn, float(n)) for fn, n in first.functions.most_common(FUNCTIONS)])


def count_all(jobs: list[Callable[[], object]], workers: int = 2, stop: threading.Event | None = None) -> list:
    """job() of every count job, `workers` at a time (counts do not depend on what else
    runs); a job that raises CountError gives the error in its place, a job not yet
    started when `stop` is set None.  Ctrl-C (or SIGTERM) starts no more: only the counts
    running end, not every one queued (a minute of stepping, once, in the seeds)."""
    stop = stop or threading.Event()

    def one(job):
        if stop.is_set():
            return None
        try:
            return job()
        except CountError as e:
            return e
    with ThreadPoolExecutor(workers) as pool:
        try:
            return list(pool.map(one, jobs))
        except BaseException:
            stop.set()
            raise


@dataclass
class _Profile:
    """One run under valgrind: the summary's event totals (Ir, and with the cache model
    D1mr, DLmr, D1mw, DLmw ...), each function's Ir, and the harness's JSON (kernels)."""
    events: dict[str, int]
    functions: Counter
    data: dict = field(default_factory=dict)
    source: str = "valgrind"
    call_alone: bool = False  # the count is of the k_run call alone (stepped): it does not wobble


def cache_model(caches: list[dict]) -> list[str]:
    """cachegrind's --D1 and --LL options for the OS's L1 data and last-level caches
    (os_cache_sizes), each where its geometry is whole and its sets a power of two."""
    args = []
    data = data_caches(caches)
    for flag, c in (("--D1", data[0] if data and data[0]["level"] == 1 else None),
                    ("--LL", data[-1] if len(data) > 1 else None)):
        if c and c.get("ways") and c.get("line_bytes"):
            sets = c["size_bytes"] // (c["ways"] * c["line_bytes"])
            if sets * c["ways"] * c["line_bytes"] == c["size_bytes"] and sets & (sets - 1) == 0:
                args.append(f"{flag}={c['size_bytes']},{c['ways']},{c['line_bytes']}")
    return args


def _valgrind(argv: list[str], caches: bool = False, **kw) -> tuple[subprocess.CompletedProcess, _Profile]:
    """argv under valgrind: the finished process and what its cachegrind out file says."""
    with tempfile.NamedTemporaryFile(prefix="cpulab-", suffix=".cg") as out:
        try:
            model = ["--cache-sim=yes", *cache_model(os_cache_sizes())] if caches else ["--cache-sim=no"]
            p = subprocess.run([*VALGRIND, *model,
                                f"--cachegrind-out-file={out.name}", *argv], text=True, timeout=TIMEOUT_S, **kw)
        except subprocess.TimeoutExpired:
            raise CountError(f"valgrind took over {TIMEOUT_S:.0f} s") from None
        except OSError as e:
            raise CountError(f"cannot run valgrind: {e}") from None
        if "unhandled instruction" in (p.stderr or ""):
            raise OtherPath("valgrind 3.19 cannot execute this build's instructions (AVX-512?)")
        return p, parse_profile(out.read().decode(errors="replace"))


def parse_profile(text: str) -> _Profile:
    """A cachegrind out file: the summary line's total of each event (named by the
    `events:` line) and each function's instructions, its lines summed over files."""
    names, per, fn, totals = ["Ir"], Counter(), "???", {}
    for line in text.splitlines():
        if line.startswith("events:"):
            names = line.split()[1:]
        elif line.startswith("fn="):
            fn = line[3:]
        elif line[:1].isdigit():
            fields = line.split()
            per[fn] += int(fields[1]) if len(fields) > 1 else 0
        elif line.startswith("summary:"):
            totals = dict(zip(names, map(int, line.split()[1:])))
    return _Profile(totals, per)


def _last_line(stderr: str | None) -> str:
    return ((stderr or "").strip().splitlines() or ["no output"])[-1]


def _run_process(argv: list[str], env: dict[str, str] | None) -> _Profile:
    p, profile = _valgrind(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           env={**os.environ, **env} if env else None)
    if p.returncode != 0 or "Ir" not in profile.events:
        raise CountError(f"under valgrind: exit {p.returncode}: {_last_line(p.stderr)}")
    return profile


def harness_argv(executable: str, params: dict[str, str], reps: int, tsc_hz: float | None) -> list[str]:
    """A kernel's command for counting: one sample of exactly `reps` repetitions, its first
    k_run call; no warm-up, calibration or known-answer test (it passed when timed)."""
    argv = [executable, "--samples", "1", "--warmup", "0", "--min-sample-time", "0",
            "--reps", str(reps), "--verified", "--timer", "clock"]
    if tsc_hz:  # without it the harness spins 30 ms, a count that depends on valgrind's speed
        argv += ["--tsc-hz", repr(float(tsc_hz))]
    for k, v in params.items():
        argv += ["--param", f"{k}={v}"]
    return argv


def _harness_data(p: subprocess.CompletedProcess, profile: _Profile, counted: bool) -> _Profile:
    """The counted run's harness JSON on `profile`; CountError unless both it and the
    counter (`counted`) finished well."""
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    try:
        profile.data = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        pass
    if p.returncode != 0 or profile.data.get("status") != "ok" or not counted:
        detail = profile.data.get("error") or _last_line(p.stderr)
        raise CountError(f"under {profile.source}: exit {p.returncode}: {detail}")
    return profile


def valgrind_run(executable: str, params: dict[str, str], reps: int, tsc_hz: float | None,
                  caches: bool) -> _Profile:
    """One run of a kernel under valgrind (harness_argv): the whole process's count."""
    p, profile = _valgrind(harness_argv(executable, params, reps, tsc_hz), caches, capture_output=True)
    return _harness_data(p, profile, "Ir" in profile.events)


STEP_MARK = "stepcount "


def step_unavailable_reason() -> str | None:
    return None if platform.machine() == "x86_64" and platform.system() == "Linux" else \
        "stepping counts x86-64 Linux only"


def step_argv(executable: str, params: dict[str, str], reps: int, tsc_hz: float | None, entry: int,
              map_file: str, limit: int | None = None) -> list[str]:
    """A kernel's command for counting (harness_argv) with its k_run call (at `entry` in
    the symbol table) stepped by the map in `map_file`, at most `limit` stops
    (STEP_LIMIT); address randomisation off, so that a call whose path depends on where
    its data lies (libc's copies) takes the same one every time."""
    return ["setarch", platform.machine(), "-R", *harness_argv(executable, params, reps, tsc_hz),
            "--step-count", f"{entry:x}:{limit or STEP_LIMIT}:{map_file}"]


def step_run(executable: str, params: dict[str, str], reps: int, tsc_hz: float | None,
              caches: bool = False, stops_a_rep: int | None = None) -> _Profile:
    """One run of a kernel with its first k_run call (the sample's `reps` repetitions)
    stepped on the core by its own harness (native/stepcount.h, a stop at each branch):
    exact, the call alone; at most stops_a_rep stops a repetition (default: STEP_LIMIT a call)."""
    entry, functions = _symbols(executable)
    if "k_run" not in entry:
        raise CountError("no k_run symbol to count from (a stripped build?)")
    with tempfile.NamedTemporaryFile("w", prefix="cpulab-", suffix=".map") as code:
        stepmap.write(executable, Path(code.name))
        try:
            limit = stops_a_rep * reps if stops_a_rep else None
            p = subprocess.run(step_argv(executable, params, reps, tsc_hz, entry["k_run"], code.name, limit),
                               capture_output=True, text=True, timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise CountError(f"stepping took over {TIMEOUT_S:.0f} s") from None
        except OSError as e:  # setarch missing
            raise CountError(f"cannot step: {e}") from None
    marked = [json.loads(ln[len(STEP_MARK):]) for ln in p.stdout.splitlines() if ln.startswith(STEP_MARK)]
    if not marked:  # the harness failed, saying why, or cannot step (a build older than the counter)
        _harness_data(p, _Profile({}, Counter(), source="branch-step"), True)
        raise CountError("stepping: the build's harness printed no count")
    steps = marked[-1]
    if "error" in steps:
        raise CountError(f"stepping: {steps['error']}")
    per_function = Counter()
    for pc, n in steps["pcs"].items():
        per_function[_function_of(int(pc, 16), functions)] += n
    profile = _Profile({"Ir": steps["instructions"]}, per_function, source="branch-step", call_alone=True)
    return _harness_data(p, profile, True)


def _symbols(executable: str) -> tuple[dict[str, int], list[tuple[int, int, str]]]:
    """An executable's function symbols: name -> address, and (start, end, name) by start."""
    funcs = sorted((s.value, s.value + s.size, s.name) for s in symbols(executable)
                   if s.type == "STT_FUNC" and s.value)
    return {name: start for start, _, name in funcs}, funcs


def _function_of(pc: int, functions: list[tuple[int, int, str]]) -> str:
    i = bisect.bisect_right(functions, (pc, float("inf"), "")) - 1
    return functions[i][2] if i >= 0 and functions[i][0] <= pc < functions[i][1] else "(outside the executable)"
