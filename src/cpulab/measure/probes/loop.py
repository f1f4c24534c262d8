"""The loop probe: what a few instructions cost on this core (`cpulab probe`).

``measure_loop("add rax, rbx; imul rcx, rcx")`` writes the body as asm-string macros
and builds them into the kernel loop_probe.c beside this file (cached by content hash
under ``paths.cache_dir()/"probes"``), runs it and returns a plain dict.

What the body may assume (the generated code sets this up before the loop, every call):

* ``rsi`` points at a 4 KiB, 4 KiB-aligned scratch buffer, zeroed at setup; its first
  qword holds its own address, so ``mov rax, [rax]`` is an L1-hit pointer chase (the
  qword is stored and fenced before every call's loop: see loop_probe.c).
* ``rax`` = ``rsi`` (the scratch address); ``rbx rcx rdx rdi r8..r14`` = 0; xmm0..xmm15
  = 0.  Other registers (ymm/zmm upper halves, k masks) are neither set nor declared.
* Loop mode (default): ``r15`` is the loop counter and is reserved.  ``rsp``/``rbp``
  may not be named; balanced ``push``/``pop`` are fine (the code steps below the red
  zone first, and checks in k_verify that rsp came back).
* ``as_loop=True``: the body is the whole loop, with its own loop control, as in seed
  004 (``dec rax; jnz LOOP``).  The generator puts the local label ``1:`` at the top
  of the 64-byte-aligned loop; branch back with ``jnz 1b`` or the placeholder
  ``LOOP`` (an operand spelled LOOP is replaced by ``1b``).  The count register
  (``counter=``, default rcx) is loaded with the iteration count last, after the
  preloads above; the loop must leave it at 0 (k_verify checks that).

How loop and timer overhead cancel: every run gives cycles per body copy of one
k_run call, a = (fixed + n*c) / n.  We run two n: the body unrolled U and 2U times per
trip of an r15 loop (two artifacts, same trips), or, with as_loop, N and 2N passes of
the user's own loop (one artifact, the count is a run-time parameter).  Then
b = (fixed + 2n*c) / 2n and 2b - a = c exactly: the call, the harness, the r15 dec/jnz
and the loop-exit mispredict are all in `fixed` and drop out.

Each repeat is one run of each length; a run's figure is its fastest sample
(estimator="min", default) or its median sample.  On a shared machine a busy
hyperthread sibling or the host halves the throughput of whole runs at a time (seen
here: the same loop at 1.0 and 2.0 cycles per iteration in consecutive runs), so N and
2N often land in different modes and 2b - a comes out as nonsense (0 or 3x).  The
headline is therefore the median over every run of either length, per execution of
the body: not the fastest run, because cycles are TSC ticks x a core/TSC ratio
measured beside each sample, and the fastest of many such products picks the runs
whose ratio read low (on an Ice Lake host imul read 2.87 cycles and an L1 load 4.36
where their medians were 3 and 5).  Each run's figure first loses the call's fixed cost
spread over it, a - b = fixed / 2n, which comes off every 2N run and twice off every N
run (on a Zen 4 guest the fixed cost, an mfence among it, was ~70 cycles: an add read
1.035 and 1.015 at 2048 and 4096 executions a call, a median of 1.025, and 0.996
without it).  a - b is the smaller of two estimates: between the median runs of each
length, robust to a minority of runs (the median of the pairs' differences once read a
vpaddd loop at 2.25 a cycle from 3 pairs), and between the fastest runs, robust to a
majority of slowed N runs: on a Zen 4 guest, with two or three of three N runs of twelve
scalar FP chains 3-25% slow, the medians' a - b read 0.20-0.56 cycles where a quiet
probe reads 0.12, and the headline 2.71-2.92 cycles where the pipes need 3 (the likely
cause of a suite's 1.92 once); the fastest runs' a - b read 0.12-0.22.  2b - a over the
fastest runs is kept as cycles_difference, and the spread of the corrected runs as
cycles_median, cycles_min, cycles_max and cycles_runs.

Cycles are the harness's core cycles (perf counters where they work, else TSC ticks x
the core/TSC ratio the harness calibrates in every run).  With timer="clock" there are
no cycles and only ns are reported.
"""
from __future__ import annotations

import hashlib
import statistics
from pathlib import Path

from cpulab import paths
from cpulab.plan import toolchain
from cpulab.compile.artifacts import BuildError, build_executable
from cpulab.measure.execute.executor import Executor
from cpulab.measure.probes.asm import GPR64, TO64, ProbeError, assemble, check_rules, expand_loop, split_body
from cpulab.measure.probes.sampling import measure, per_unit, spread

TEMPLATE = Path(__file__).resolve().parent / "loop_probe.c"
LOOP_LABEL = "86420"  # the generator's own loop label (a GAS numeric local label)
DEFAULT_UNROLL = 32


def _c_escape(stmt: str) -> str:
    """A statement as a C string inside an asm template: % { | } are template syntax."""
    s = stmt.replace("\\", "\\\\").replace('"', '\\"').replace("\t", " ")
    for ch in "%{|}":
        s = s.replace(ch, "%" + ch)
    return s


def _macro(name: str, lines: list[str]) -> str:
    """#define name as the concatenation of asm lines (each a C string literal)."""
    return f"#define {name} \\\n" + "".join(f"    {ln} \\\n" for ln in lines) + "    /* end */\n"


def kernel_source(stmts: list[str], syntax: str, copies: int, as_loop: bool, counter: str,
                  default_trips: int) -> str:
    """The C file of one probe: the PROBE_* macros of loop_probe.c for this body, then
    loop_probe.c itself.  k_run executes `copies` copies per loop trip, or the body as
    its own loop (as_loop) with the iteration count from the `trips` param."""
    enter = ".intel_syntax noprefix" if syntax == "intel" else ".att_syntax prefix"
    body = [f'"\\t{_c_escape(s)}\\n"' for s in stmts]
    cnt = TO64[counter] if as_loop else "r15"
    preload = ([] if cnt == "rax" else ['"mov %%rsi, %%rax\\n\\t"'])
    preload += [f'"xor %%{r}, %%{r}\\n\\t"' for r in GPR64 if r not in ("rax", "rsi", cnt)]
    preload += [f'"pxor %%xmm{i}, %%xmm{i}\\n\\t"' for i in range(16)]
    fold = [f'"xor %%{r}, %%rax\\n\\t"' for r in GPR64[1:] if r != cnt]
    if as_loop:
        loop = ['".p2align 6\\n"', '"1:\\n"', f'"{enter}\\n"', *body, '".att_syntax prefix\\n\\t"']
    else:
        loop = ['".p2align 6\\n"', f'"{LOOP_LABEL}:\\n"', f'"{enter}\\n"', *(body * copies),
                '".att_syntax prefix\\n\\t"', '"dec %%r15\\n\\t"', f'"jnz {LOOP_LABEL}b\\n\\t"']
    clobbers = ", ".join(f'"{r}"' for r in GPR64) + ", " + ", ".join(f'"xmm{i}"' for i in range(16))
    listing = "".join(f" *   {s.replace('*/', '* /')}\n" for s in stmts)
    shape = f"as its own loop, counter {cnt}" if as_loop else f"{copies} copies per trip of an r15 loop"
    return (f"/* Generated by cpulab.probes.loop -- a loop probe.  Do not edit.\n *\n"
            f" * Body ({syntax} syntax, {len(stmts)} statements), {shape}:\n{listing} */\n"
            f'#define PROBE_COUNTER "{cnt}"\n#define PROBE_COPIES {1 if as_loop else copies}\n'
            f"#define PROBE_TRIPS {default_trips}\n#define PROBE_AS_LOOP {int(as_loop)}\n"
            f"#define PROBE_CLOBBERS {clobbers}\n"
            + _macro("PROBE_PRELOAD", preload) + _macro("PROBE_LOOP", loop) + _macro("PROBE_FOLD", fold)
            + '#include "loop_probe.c"\n')


def _probe_dir(cache_dir: Path | None) -> Path:
    return Path(cache_dir or paths.cache_dir()) / "probes"


def build_probe(stmts: list[str], syntax: str, copies: int, as_loop: bool, counter: str,
                default_trips: int, variant: str = "O2", cache_dir: Path | None = None):
    """Write the probe's C file to cache_dir/probes/<hash>.c and build it -> Artifact."""
    src = kernel_source(stmts, syntax, copies, as_loop, counter, default_trips)
    d = _probe_dir(cache_dir)
    d.mkdir(parents=True, exist_ok=True)
    path = d / (hashlib.sha256(src.encode()).hexdigest()[:24] + ".c")
    if not path.exists():
        tmp = path.with_suffix(f".{id(src)}.tmp")
        tmp.write_text(src)
        tmp.replace(path)
    try:
        return build_executable(path, toolchain.get(variant), extra_sources=(TEMPLATE,),
                                include_dirs=(TEMPLATE.parent,), cache_dir=d / "artifacts")
    except BuildError as e:
        raise ProbeError(str(e)) from None


def without_fixed_cost(a: list[float | None], b: list[float | None]) -> list[float]:
    """Per-execution figures of runs of n (a) and 2n (b) executions a call, less the
    call's fixed cost f: a = c + f/n and b = c + f/2n, so f/2n is a - b; it comes off
    every b and twice off every a.  A co-tenant only slows a run and a low core/TSC read
    only speeds one, so a - b is taken twice, between the median runs (which one b run
    read low cannot move) and between the fastest runs (which slowed a runs cannot move,
    while one of them was not), and the smaller is kept, at least 0.  Runs <= 0 or
    missing are dropped."""
    a = [x for x in a if x is not None and x > 0]
    b = [y for y in b if y is not None and y > 0]
    f = max(0.0, min(statistics.median(a) - statistics.median(b), min(a) - min(b))) if a and b else 0.0
    return [x - 2 * f for x in a] + [y - f for y in b]


def measure_loop(body: str, syntax: str = "intel", unroll: int = DEFAULT_UNROLL, samples: int = 10,
                 timer: str = "auto", *, as_loop: bool = False, counter: str = "rcx",
                 iterations: int | None = None, repeats: int = 5, variant: str = "O2",
                 min_sample_time: float | None = 0.002, estimator: str = "min",
                 cache_dir: Path | None = None, executor: Executor | None = None) -> dict:
    """Cycles per execution of `body` on this core (see the module doc for the rules).

    unroll: body copies per loop trip in loop mode (the runs use unroll and 2*unroll).
    iterations: loop trips per k_run call (loop mode, default 64) or passes of the
        user's loop (as_loop, default 1000 like the seed; the runs use N and 2N).
    repeats: pairs of runs; the figures are the median over pairs, with min and max.
    samples, min_sample_time: harness samples per run and their length (many short
        samples: more chances of an uncontended one); a run's figure is its fastest sample
        (estimator="min") or its median sample (estimator="median").
    """
    stmts = [expand_loop(s) for s in split_body(body)]
    if not stmts:
        raise ProbeError("empty body")
    counter = counter.lower().lstrip("%")
    check_rules(stmts, as_loop, counter)
    insns = assemble(stmts, syntax, as_loop)
    if unroll < 1 or repeats < 1 or samples < 1:
        raise ProbeError("unroll, repeats and samples must be >= 1")
    if as_loop:
        n = iterations or 1000
        art = build_probe(stmts, syntax, 1, True, counter, n, variant, cache_dir)
        runs = [(art, {"trips": str(n)}), (art, {"trips": str(2 * n)})]
        method = (f"as_loop: the body's own loop run N={n} and 2N={2 * n} times per call; "
                  "cycles/iteration = 2*b - a cancels the per-call overhead")
    else:
        trips = iterations or 64
        a1 = build_probe(stmts, syntax, unroll, False, counter, trips, variant, cache_dir)
        a2 = build_probe(stmts, syntax, 2 * unroll, False, counter, trips, variant, cache_dir)
        runs = [(a1, {"trips": str(trips)}), (a2, {"trips": str(trips)})]
        method = (f"unrolled {unroll} and {2 * unroll} copies per trip, {trips} trips per call; "
                  "cycles/iteration = 2*b - a cancels the call and the r15 loop control")
    per_run: dict[str, list] = {"a_cycles": [], "b_cycles": [], "a_ns": [], "b_ns": []}
    last = None
    for _ in range(repeats):
        (art_a, pa), (art_b, pb) = runs
        da = measure(art_a.path, pa, samples, timer, min_sample_time, executor)
        db = measure(art_b.path, pb, samples, timer, min_sample_time, executor)
        for key in ("cycles", "ns"):
            per_run[f"a_{key}"].append(per_unit(da, key, estimator))
            per_run[f"b_{key}"].append(per_unit(db, key, estimator))
        last = db

    def difference(key: str) -> tuple[float | None, dict]:
        a, b = per_run[f"a_{key}"], per_run[f"b_{key}"]
        pairs = spread([2 * y - x if x is not None and y is not None else None for x, y in zip(a, b)])
        if None in a or None in b:
            return None, pairs
        # The headline: "min" pools every run of each length and takes the fastest (a
        # contended run of one length must not spoil the pair); "median" is the median
        # over the pairs.
        return (2 * min(b) - min(a) if estimator == "min" else pairs["median"]), pairs

    cyc_diff, _ = difference("cycles")
    ns_diff, _ = difference("ns")
    # The headline and the spread: every run's figure per execution (either length), less
    # the call's fixed cost spread over it.
    c = spread(without_fixed_cost(per_run["a_cycles"], per_run["b_cycles"]))
    t = spread(without_fixed_cost(per_run["a_ns"], per_run["b_ns"]))
    cyc, nsi = c["median"], t["median"]
    n_insns = len(insns)
    return {
        "body": body, "statements": stmts, "syntax": syntax, "as_loop": as_loop,
        "counter": TO64[counter] if as_loop else "r15",
        "instructions": n_insns, "disassembly": insns,
        "cycles_per_iteration": cyc, "cycles_difference": cyc_diff, "ns_difference": ns_diff,
        "cycles_median": c["median"], "cycles_min": c["min"],
        "cycles_max": c["max"], "cycles_runs": c["runs"],
        "ns_per_iteration": nsi, "ns_median": t["median"], "ns_min": t["min"], "ns_max": t["max"],
        "ns_runs": t["runs"], "runs": per_run,
        "ipc": n_insns / cyc if cyc else None,
        # The machine was not quiet: runs disagree by more than 1.5x (or one is <= 0).
        "unstable": bool(c["runs"]) and (min(c["runs"]) <= 0 or max(c["runs"]) > 1.5 * min(c["runs"])),
        "timer": last["timer"], "core_per_tsc": last["core_per_tsc"], "tsc_hz": last["tsc_hz"],
        "repeats": repeats, "samples": samples, "estimator": estimator,
        "unroll": None if as_loop else unroll,
        "method": method + "; the headline is the median run per execution less the call's fixed cost (the "
                           "median a less the median b, twice that off the shorter runs); 2*b - a over the "
                           "fastest runs is kept as cycles_difference",
        "artifacts": sorted({a.path for a, _ in runs}),
        "code_hashes": sorted({a.code_hash for a, _ in runs}),
        "commands": [list(cmd) for cmd in runs[0][0].commands],
    }
