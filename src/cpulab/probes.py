"""Probes: what a few instructions cost on this core (`cpulab probe`), the seed-004 loop
table, and the load-alignment table (`cpulab align`).

The loop probe
--------------
``measure_loop("add rax, rbx; imul rcx, rcx")`` writes a kernel C file whose k_run runs
the body in one inline-asm block, builds it with the harness (cached by content hash
under ``paths.cache_dir()/"probes"``), runs it and returns a plain dict.

What the body may assume (the generated code sets this up before the loop, every call):

* ``rsi`` points at a 4 KiB, 4 KiB-aligned scratch buffer, zeroed at setup; its first
  qword holds its own address, so ``mov rax, [rax]`` is an L1-hit pointer chase.  That
  qword is stored before every call's loop and drained by an MFENCE: with the store still
  in flight, a core that renames memory (seen on Rocket Lake) hands its register to the
  loads, and the chase ran at 0.34 cycles instead of 5; the MFENCE also keeps one call's
  loop from overlapping the next call's.  It costs ~60 cycles per call, in the fixed
  part that the two lengths cancel (in the fastest-run headline: a dependent add reads
  1.017 cycles at the defaults, 1.000 by difference).
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
headline is therefore the fastest run of either length, per execution of the body
(interference only ever adds cycles); what overhead it still holds is the loop
control spread over N or 2N executions (under 0.03 cycles at the defaults).  2b - a
over the fastest runs is kept as cycles_difference, and the spread of every run as
cycles_median, cycles_min, cycles_max and cycles_runs.

Cycles are the harness's core cycles (perf counters where they work, else TSC ticks x
the core/TSC ratio the harness calibrates in every run).  With timer="clock" there are
no cycles and only ns are reported.
"""
from __future__ import annotations

import hashlib
import json
import re
import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path

from . import paths, toolchain
from .build import BuildError, build_executable
from .workloads import KERNEL_DIR


class ProbeError(Exception):
    """The body does not assemble, breaks the rules, or the probe could not run.
    The message is the assembler's (or harness's) own first lines."""


GPR64 = ["rax", "rbx", "rcx", "rdx", "rsi", "rdi", "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15"]
_ALIASES = {
    "rax": "eax ax al ah", "rbx": "ebx bx bl bh", "rcx": "ecx cx cl ch", "rdx": "edx dx dl dh",
    "rsi": "esi si sil", "rdi": "edi di dil",
    **{f"r{i}": f"r{i}d r{i}w r{i}b" for i in range(8, 16)},
}
_TO64 = {alias: r for r, names in _ALIASES.items() for alias in [r, *names.split()]}
LOOP_LABEL = "86420"  # the generator's own loop label (a GAS numeric local label)
DEFAULT_UNROLL = 32


# ---- the body ----------------------------------------------------------------------

def split_body(body: str) -> list[str]:
    """Statements of a body: separated by ';' or newlines; blank ones dropped."""
    return [s.strip() for s in re.split(r"[;\n]", body) if s.strip()]


def _expand_loop(stmt: str) -> str:
    """An operand spelled LOOP (not the mnemonic) becomes the local label 1b."""
    head, _, rest = stmt.partition(" ")
    if not rest:
        return stmt
    return head + " " + re.sub(r"\bLOOP\b", "1b", rest)


def _check_rules(stmts: list[str], as_loop: bool, counter: str) -> None:
    text = " ".join(stmts).lower()
    bad = re.findall(r"(?<![\w.])%?(rsp|esp|spl|rbp|ebp|bpl|sp|bp)\b", text)
    if bad:
        raise ProbeError(f"the body may not name {bad[0]}: rsp/rbp belong to the compiler "
                         "(balanced push/pop are allowed)")
    if not as_loop and re.search(r"(?<![\w.])%?r15[dwb]?\b", text):
        raise ProbeError("r15 is the probe's loop counter: the body may not use it "
                         "(or pass as_loop=True with its own loop control)")
    if as_loop and not re.search(r"\b1b\b", text):
        raise ProbeError("as_loop=True: the body must branch back to the loop top with "
                         "'jnz 1b' (or 'jnz LOOP')")
    if as_loop and _TO64.get(counter) in (None, "rsi"):
        raise ProbeError(f"counter must be a general register other than rsi/rsp/rbp, got {counter!r}")
    if as_loop:
        names = [_TO64[counter], *_ALIASES[_TO64[counter]].split()]
        if not re.search(r"(?<![\w.])%?(" + "|".join(names) + r")\b", text):
            raise ProbeError(f"as_loop=True: the body never touches its counter {counter} "
                             "(pass counter= the register its loop counts down)")


def assemble(stmts: list[str], syntax: str = "intel", as_loop: bool = False) -> list[str]:
    """Assemble the body alone (GNU as, x86-64) and disassemble it: the instruction list.

    Raises ProbeError with the assembler's own message (statement k is line k) if it
    does not assemble.
    """
    if syntax not in ("intel", "att"):
        raise ProbeError(f"syntax must be 'intel' or 'att', got {syntax!r}")
    asm = shutil.which("as")
    objdump = shutil.which("objdump")
    if not asm or not objdump:
        raise ProbeError("GNU as and objdump are needed (install binutils)")
    lines = list(stmts)
    if as_loop:
        lines[0] = "1: " + lines[0]  # same line: line numbers stay statement numbers
    flags = ["--64", "-msyntax=intel", "-mnaked-reg"] if syntax == "intel" else ["--64", "-msyntax=att"]
    with tempfile.TemporaryDirectory(prefix="cpulab-probe-") as d:
        Path(d, "body.s").write_text("\n".join(lines) + "\n")
        p = subprocess.run([asm, *flags, "body.s", "-o", "body.o"], cwd=d, capture_output=True, text=True)
        if p.returncode != 0:
            msg = [ln for ln in p.stderr.splitlines() if ln.strip() and "Assembler messages" not in ln]
            raise ProbeError("\n".join(msg[:4]) or "the assembler rejected the body")
        out = subprocess.run([objdump, "-d", "-M", "intel", "--no-show-raw-insn", "body.o"],
                             cwd=d, capture_output=True, text=True, check=True).stdout
    insns = []
    for ln in out.splitlines():
        m = re.match(r"^\s+[0-9a-f]+:\s+(.+)$", ln)
        if m:
            insns.append(re.sub(r"\s+", " ", m.group(1).strip()))
    if not insns:
        raise ProbeError("the body holds no instructions")
    return insns


# ---- the generated kernel -------------------------------------------------------------

def _c_escape(stmt: str) -> str:
    """A statement as a C string inside an asm template: % { | } are template syntax."""
    s = stmt.replace("\\", "\\\\").replace('"', '\\"').replace("\t", " ")
    for ch in "%{|}":
        s = s.replace(ch, "%" + ch)
    return s


def kernel_source(stmts: list[str], syntax: str, copies: int, as_loop: bool, counter: str,
                  default_trips: int) -> str:
    """The C kernel for a body: k_run executes `copies` copies per loop trip, or the
    body as its own loop (as_loop) with the iteration count from the `trips` param."""
    enter = ".intel_syntax noprefix" if syntax == "intel" else ".att_syntax prefix"
    body = "".join(f'        "\\t{_c_escape(s)}\\n"\n' for s in stmts)
    cnt = _TO64[counter] if as_loop else "r15"
    zero = [r for r in GPR64 if r not in ("rax", "rsi", cnt)]
    zeroing = "".join(f'        "xor %%{r}, %%{r}\\n\\t"\n' for r in zero)
    xmm = "".join(f'        "pxor %%xmm{i}, %%xmm{i}\\n\\t"\n' for i in range(16))
    set_rax = '' if cnt == "rax" else '        "mov %%rsi, %%rax\\n\\t"\n'
    fold = "".join(f'        "xor %%{r}, %%rax\\n\\t"\n' for r in GPR64[1:] if r != cnt)
    if as_loop:
        loop = (f'        ".p2align 6\\n"\n        "1:\\n"\n        "{enter}\\n"\n{body}'
                f'        ".att_syntax prefix\\n\\t"\n')
    else:
        loop = (f'        ".p2align 6\\n"\n        "{LOOP_LABEL}:\\n"\n        "{enter}\\n"\n'
                + "".join(f"        /* copy {k} */\n{body}" for k in range(copies))
                + f'        ".att_syntax prefix\\n\\t"\n'
                f'        "dec %%r15\\n\\t"\n        "jnz {LOOP_LABEL}b\\n\\t"\n')
    clobbers = ", ".join(f'"{r}"' for r in GPR64) + ", " + ", ".join(f'"xmm{i}"' for i in range(16))
    return f'''/* Generated by cpulab.probes -- a loop probe.  Do not edit.
 *
 * Body ({syntax} syntax, {len(stmts)} statements){" as its own loop, counter " + cnt if as_loop else f", {copies} copies per trip of an r15 loop"}:
{"".join(f" *   {s.replace('*/', '* /')}" + chr(10) for s in stmts)} *
 * Registers on entry to the loop: rsi = rax = scratch (4 KiB, its first qword = its own
 * address), the other GPRs and xmm0-15 = 0{", " + cnt + " = trips (loaded last)" if as_loop else ", r15 = trips"}.
 */
#include "cpulab.h"

#include <stdlib.h>
#include <string.h>

const char k_unit[] = "iterations";

#define COPIES {1 if as_loop else copies} /* body executions per loop trip */

struct ctx {{
    uint64_t *scratch;
    uint64_t trips;
}};

void *k_setup(void)
{{
#if !defined(__x86_64__)
    k_skip("loop probes are x86-64 code");
    return NULL;
#else
    struct ctx *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->scratch = aligned_alloc(4096, 4096);
    if (!c->scratch) {{
        k_fail("cannot allocate the scratch buffer");
        return NULL;
    }}
    memset(c->scratch, 0, 4096);
    int64_t trips = k_param_int("trips", {default_trips});
    if (trips < 1 || trips > (int64_t)1 << 31) {{
        k_fail("trips must be 1..2^31, got %lld", (long long)trips);
        return NULL;
    }}
    c->trips = (uint64_t)trips;
    k_note("working_set_bytes", 4096);
    k_note("copies", COPIES);
    k_note("trips", (double)trips);
    return c;
#endif
}}

#if defined(__x86_64__)
/* rsp at the start and at the end of the asm block (a body must leave it balanced),
 * and the loop counter after the loop. */
static uint64_t sp_in, sp_out, counter_out;

/* Inputs reach the asm through memory (locals on the stack, globals rip-relative):
 * every general register except rsp/rbp is the body's, so none can carry them. */
static __attribute__((noinline)) uint64_t probe(const struct ctx *c)
{{
    uint64_t scr = (uint64_t)(uintptr_t)c->scratch, trips = c->trips, out;
    __asm__ __volatile__(
        "mov %%rsp, %[sp_in]\\n\\t"
        "mov %[scr], %%rsi\\n\\t"
        "mov %[trips], %%{cnt}\\n\\t"
        "sub $256, %%rsp\\n\\t" /* below the red zone: push/pop in the body are safe */
        "mov %%rsi, (%%rsi)\\n\\t"
        "mfence\\n\\t" /* the store reaches L1 first: see the module doc */
{set_rax}{zeroing}{xmm}{loop}        "mov %%rsp, %[sp_out]\\n\\t"
        "mov %[sp_in], %%rsp\\n\\t"
        "mov %%{cnt}, %[cnt_out]\\n\\t"
{fold}        "mov %%rax, %[out]\\n\\t"
        : [out] "=m"(out), [sp_in] "+m"(sp_in), [sp_out] "+m"(sp_out), [cnt_out] "+m"(counter_out)
        : [scr] "m"(scr), [trips] "m"(trips)
        : {clobbers}, "cc", "memory");
    return out;
}}
#endif

/* The body's semantics are the user's, so the known answers are about the frame:
 * the stack comes back balanced{", and the loop exits with its counter at 0" if as_loop else ""}. */
int k_verify(void *ctx)
{{
#if defined(__x86_64__)
    struct ctx *c = ctx;
    probe(c);
    if (sp_out != sp_in - 256) {{
        k_fail("the body moved rsp by %lld bytes: push/pop must balance", (long long)(sp_out - (sp_in - 256)));
        return 1;
    }}
    {"if (counter_out != 0) {" if as_loop else "if (counter_out != 0) { /* r15 */"}
        k_fail("the loop exited with {cnt} = %llu, not 0: {"its branch is not controlled by " + cnt if as_loop else "r15 was touched"}",
               (unsigned long long)counter_out);
        return 1;
    }}
    return 0;
#else
    (void)ctx;
    return 1;
#endif
}}

uint64_t k_run(void *ctx, uint64_t reps)
{{
    uint64_t h = 0;
#if defined(__x86_64__)
    for (uint64_t r = 0; r < reps; r++)
        h = k_mix(h, probe(ctx));
#else
    (void)ctx;
    (void)reps;
#endif
    return h;
}}

double k_work(const void *ctx, uint64_t reps)
{{
    const struct ctx *c = ctx;
    return (double)reps * (double)c->trips * COPIES;
}}
'''


def _probe_dir(cache_dir: Path | None) -> Path:
    return Path(cache_dir or paths.cache_dir()) / "probes"


def build_probe(stmts: list[str], syntax: str, copies: int, as_loop: bool, counter: str,
                default_trips: int, variant: str = "O2", cache_dir: Path | None = None):
    """Write the generated kernel to cache_dir/probes/<hash>.c and build it -> Artifact."""
    src = kernel_source(stmts, syntax, copies, as_loop, counter, default_trips)
    d = _probe_dir(cache_dir)
    d.mkdir(parents=True, exist_ok=True)
    path = d / (hashlib.sha256(src.encode()).hexdigest()[:24] + ".c")
    if not path.exists():
        tmp = path.with_suffix(f".{id(src)}.tmp")
        tmp.write_text(src)
        tmp.replace(path)
    try:
        return build_executable(path, toolchain.get(variant), cache_dir=d / "artifacts")
    except BuildError as e:
        raise ProbeError(str(e)) from None


def run_harness(exe: str, params: dict[str, str], samples: int, timer: str,
                min_sample_time: float | None = None, warmup: float | None = None) -> dict:
    """Run an artifact once -> its JSON; ProbeError if it did not measure."""
    cmd = [exe, "--samples", str(samples), "--timer", timer]
    for k, v in params.items():
        cmd += ["--param", f"{k}={v}"]
    if min_sample_time is not None:
        cmd += ["--min-sample-time", str(min_sample_time)]
    if warmup is not None:
        cmd += ["--warmup", str(warmup)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    try:
        d = json.loads(p.stdout)
    except json.JSONDecodeError:
        raise ProbeError(f"the probe crashed (exit {p.returncode}): {p.stderr.strip()[:300]}") from None
    if d.get("status") != "ok":
        raise ProbeError(f"{d.get('status')}: {d.get('error')}")
    return d


def _per_unit(d: dict, key: str, estimator: str = "min") -> float | None:
    """One run's figure per unit of work: its fastest sample ("min", the default:
    interference -- a busy hyperthread sibling, preemption -- only ever adds time, and on
    a shared machine it comes and goes within a run) or the median sample."""
    vals = [v for v in d.get(key, []) if v is not None]
    if not vals:
        return None
    return (min(vals) if estimator == "min" else statistics.median(vals)) / d["work"]


def _spread(values: list[float | None]) -> dict:
    vals = [v for v in values if v is not None]
    if not vals:
        return {"median": None, "min": None, "max": None, "runs": []}
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals), "runs": vals}


# ---- the loop probe ---------------------------------------------------------------------

def measure_loop(body: str, syntax: str = "intel", unroll: int = DEFAULT_UNROLL, samples: int = 10,
                 timer: str = "auto", *, as_loop: bool = False, counter: str = "rcx",
                 iterations: int | None = None, repeats: int = 5, variant: str = "O2",
                 min_sample_time: float | None = 0.002, estimator: str = "min",
                 cache_dir: Path | None = None) -> dict:
    """Cycles per execution of `body` on this core (see the module doc for the rules).

    unroll: body copies per loop trip in loop mode (the runs use unroll and 2*unroll).
    iterations: loop trips per k_run call (loop mode, default 64) or passes of the
        user's loop (as_loop, default 1000 like the seed; the runs use N and 2N).
    repeats: pairs of runs; the figures are the median over pairs, with min and max.
    samples, min_sample_time: harness samples per run and their length (many short
        samples: more chances of an uncontended one); a run's figure is its fastest sample
        (estimator="min") or its median sample (estimator="median").
    """
    stmts = [_expand_loop(s) for s in split_body(body)]
    if not stmts:
        raise ProbeError("empty body")
    counter = counter.lower().lstrip("%")
    _check_rules(stmts, as_loop, counter)
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
        da = run_harness(art_a.path, pa, samples, timer, min_sample_time)
        db = run_harness(art_b.path, pb, samples, timer, min_sample_time)
        for key in ("cycles", "ns"):
            per_run[f"a_{key}"].append(_per_unit(da, key, estimator))
            per_run[f"b_{key}"].append(_per_unit(db, key, estimator))
        last = db

    def difference(key: str) -> tuple[float | None, dict]:
        a, b = per_run[f"a_{key}"], per_run[f"b_{key}"]
        pairs = _spread([2 * y - x if x is not None and y is not None else None for x, y in zip(a, b)])
        if None in a or None in b:
            return None, pairs
        # The headline: "min" pools every run of each length and takes the fastest (a
        # contended run of one length must not spoil the pair); "median" is the median
        # over the pairs.
        return (2 * min(b) - min(a) if estimator == "min" else pairs["median"]), pairs

    def fastest(key: str) -> float | None:
        """The fastest run of either length, per body execution.  On a host whose other
        tenants share the core, whole runs go at half speed and N and 2N land in different
        modes, which makes 2b - a meaningless; the fastest run is the least disturbed, and
        its residual overhead is at most the loop control over N (or 2N) executions."""
        vals = [v for v in per_run[f"a_{key}"] + per_run[f"b_{key}"] if v is not None and v > 0]
        return min(vals) if vals else None

    cyc_diff, _ = difference("cycles")
    ns_diff, _ = difference("ns")
    cyc, nsi = fastest("cycles"), fastest("ns")
    # The spread reported is that of every run's figure per execution (either length).
    c = _spread(per_run["a_cycles"] + per_run["b_cycles"])
    t = _spread(per_run["a_ns"] + per_run["b_ns"])
    n_insns = len(insns)
    return {
        "body": body, "statements": stmts, "syntax": syntax, "as_loop": as_loop,
        "counter": _TO64[counter] if as_loop else "r15",
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
        "method": method + "; the headline is the fastest run per execution, 2*b - a is kept as cycles_difference",
        "artifacts": sorted({a.path for a, _ in runs}),
        "code_hashes": sorted({a.code_hash for a, _ in runs}),
        "commands": [list(cmd) for cmd in runs[0][0].commands],
    }


# ---- llvm-mca -------------------------------------------------------------------------------

def mca_cpu() -> str:
    """The CPU model llvm-mca should use: llc's host CPU if llc knows it, else znver1."""
    try:
        ver = subprocess.run(["llc", "--version"], capture_output=True, text=True, timeout=30).stdout
        m = re.search(r"Host CPU:\s*(\S+)", ver)
        if m and m.group(1) not in ("generic", "(unknown)"):
            return m.group(1)
    except (OSError, subprocess.TimeoutExpired):
        pass
    return "znver1"


def mca_predict(body: str, syntax: str = "intel", as_loop: bool = False, iterations: int = 1000,
                cpu: str | None = None) -> dict | None:
    """llvm-mca's cycles per iteration for the body (None if llvm-mca is missing).

    llvm-mca simulates the block repeated `iterations` times; branches are not taken
    or mispredicted in its model, only issued.  The loop label becomes a named one
    (llvm-mca's Intel parser does not read 1b)."""
    exe = shutil.which("llvm-mca")
    if not exe:
        return None
    cpu = cpu or mca_cpu()
    stmts = [re.sub(r"\b1b\b", ".Lloop", _expand_loop(s)) for s in split_body(body)]
    text = (".Lloop:\n" if as_loop else "") + "\n".join(stmts) + "\n"
    args = [exe, f"-mcpu={cpu}", f"--iterations={iterations}"]
    if syntax == "intel":
        args.append("-x86-asm-syntax=intel")
    p = subprocess.run(args, input=text, capture_output=True, text=True, timeout=60)
    m = re.search(r"Total Cycles:\s+(\d+)", p.stdout)
    if p.returncode != 0 or not m:
        return {"cpu": cpu, "error": (p.stderr.strip().splitlines() or ["llvm-mca failed"])[0]}
    cycles = int(m.group(1)) / iterations
    ins = re.search(r"Instructions:\s+(\d+)", p.stdout)
    n = int(ins.group(1)) / iterations if ins else None
    return {"cpu": cpu, "cycles_per_iteration": cycles, "instructions": n,
            "ipc": n / cycles if n and cycles else None}


# ---- seed 004, table 2 ------------------------------------------------------------------------

# The seven loops of seed 004's Table 2 (Brian Case, "Testing Reveals x86 Core
# Differences", MDR).  Columns 1-5 are the table's own headings; the heading of column 7
# is garbled in the source (it repeats column 6), so 6 and 7 follow the text: "The last
# two columns in Table 2 show the effect of adding one and two more independent INCs
# to the sequence from column 4", which the IPC figures confirm (P6: 3.5 cycles x 2 IPC
# = 7 instructions, 4 x 2 = 8).  Which register the seventh's extra INC used is not
# given; we use r8 (EBP in the 32-bit original would have been the only free one).
SEED004_SEQUENCES = [
    ("L1: DEC EAX; JNZ L1", "dec rax; jnz LOOP"),
    ("L1: ROL EBX,3; DEC EAX; JNZ L1", "rol rbx, 3; dec rax; jnz LOOP"),
    ("L1: ROL EBX,3; ROL ECX,3; DEC EAX; JNZ L1", "rol rbx, 3; rol rcx, 3; dec rax; jnz LOOP"),
    ("L1: ROL EBX,3; INC EDI; INC ESI; ROL ECX,3; DEC EAX; JNZ L1",
     "rol rbx, 3; inc rdi; inc rsi; rol rcx, 3; dec rax; jnz LOOP"),
    ("L1: ROL EBX,3; INC EDI; ROL ECX,3; INC ESI; DEC EAX; JNZ L1",
     "rol rbx, 3; inc rdi; rol rcx, 3; inc rsi; dec rax; jnz LOOP"),
    ("L1: ROL EBX,3; INC EDI; INC ESI; ROL ECX,3; INC EDX; DEC EAX; JNZ L1",
     "rol rbx, 3; inc rdi; inc rsi; rol rcx, 3; inc rdx; dec rax; jnz LOOP"),
    ("L1: ROL EBX,3; INC EDI; INC ESI; ROL ECX,3; INC EDX; INC (one more reg); DEC EAX; JNZ L1",
     "rol rbx, 3; inc rdi; inc rsi; rol rcx, 3; inc rdx; inc r8; dec rax; jnz LOOP"),
]

# The seed's measurements (cycles, IPC) per column, for the side-by-side layout.
SEED004_PUBLISHED = {
    "Pentium Pro": [(2, 1), (2, 1.5), (2, 2), (3, 2), (3, 2), (3.5, 2), (4, 2)],
    "Pentium II": [(2, 1), (2, 1.5), (2, 2), (3, 2), (3, 2), (3.5, 2), (4, 2)],
    "Pentium/MMX": [(1, 2), (2, 1.5), (3, 1.33), (4, 1.5), (5, 1.2), (5, 1.4), (5, 1.6)],
    "K6": [(1, 2), (3, 1), (5, 0.8), (6, 1), (7, 0.86), (7, 1), (7, 1.14)],
}

MCA_DISAGREE = 0.25
MCA_NOTE = ("llvm-mca's scheduling models are approximations: its znver1 model is known to be "
            "off for loads and 64-bit IMUL, and no model simulates the loop branch's fetch")


def seed004_table(mca: bool = False, samples: int = 10, repeats: int = 5, iterations: int = 1000,
                  timer: str = "auto", cache_dir: Path | None = None) -> list[dict]:
    """Seed 004's Table 2 on this machine, one row per column of the original.

    Each loop runs as its own loop (counter rax, as in the seed's DEC EAX/JNZ) at N and
    2N iterations; cycles per iteration include the DEC/JNZ, as in the seed.
    """
    rows = []
    cpu = mca_cpu() if mca else None
    for col, (seed_text, body) in enumerate(SEED004_SEQUENCES, start=1):
        r = measure_loop(body, as_loop=True, counter="rax", iterations=iterations,
                         samples=samples, repeats=repeats, timer=timer, cache_dir=cache_dir)
        row = {"column": col, "seed_sequence": seed_text, "sequence": body,
               "instructions": r["instructions"], "cycles_per_iteration": r["cycles_per_iteration"],
               "cycles_median": r["cycles_median"], "cycles_min": r["cycles_min"],
               "cycles_max": r["cycles_max"], "ipc": r["ipc"],
               "ns_per_iteration": r["ns_per_iteration"], "timer": r["timer"], "unstable": r["unstable"],
               "seed_published": {cpu_name: vals[col - 1] for cpu_name, vals in SEED004_PUBLISHED.items()}}
        if mca:
            p = mca_predict(body, as_loop=True, cpu=cpu) or {"error": "llvm-mca not found"}
            pc = p.get("cycles_per_iteration")
            row["mca_cpu"] = p.get("cpu")
            row["mca_cycles_per_iteration"] = pc
            row["mca_ipc"] = p.get("ipc")
            meas = r["cycles_per_iteration"]
            row["mca_disagrees"] = bool(pc and meas and abs(pc - meas) / meas > MCA_DISAGREE)
            row["mca_note"] = MCA_NOTE if row["mca_disagrees"] else p.get("error", "")
        rows.append(row)
    return rows


# ---- the alignment table (seed 004, table 3) -----------------------------------------------

ALIGN_GROUPS = [
    ("aligned", "naturally aligned"),
    ("within8", "misaligned, does not cross an 8-byte boundary"),
    ("cross8", "crosses an 8-byte but not a 16-byte boundary"),
    ("cross16", "crosses a 16-byte but not a 32-byte boundary"),
    ("cross32", "crosses a 32-byte boundary inside the line"),
    ("line", "crosses a 64-byte cache-line boundary"),
    ("page", "crosses a 4 KiB page boundary"),
]


def align_group(offset: int, width: int, page_end: bool = False) -> str:
    """The seed-style group of a load of `width` bytes at byte `offset` of a 64-byte line."""
    end = offset + width - 1  # last byte
    if end >= 64:
        return "page" if page_end else "line"
    if offset % width == 0:
        return "aligned"
    for b in (32, 16, 8):
        if offset // b != end // b:
            return {32: "cross32", 16: "cross16", 8: "cross8"}[b]
    return "within8"


def align_points(full: bool = False, widths=(4, 8)) -> list[dict]:
    """The (offset, width, at) points to measure: all 64 offsets with full=True, else up to
    three per group (first, middle, last), plus the page-crossing offsets."""
    pts = []
    for w in widths:
        by_group: dict[str, list[int]] = {}
        for off in range(64):
            by_group.setdefault(align_group(off, w), []).append(off)
        for g, offs in by_group.items():
            pick = offs if full else sorted({offs[0], offs[len(offs) // 2], offs[-1]})
            pts += [{"offset": o, "width": w, "at": "line", "group": g} for o in pick]
        line_offs = by_group["line"]
        pick = line_offs if full else sorted({line_offs[0], line_offs[-1]})
        pts += [{"offset": o, "width": w, "at": "page-end", "group": "page"} for o in pick]
    return pts


def align_kernel() -> Path:
    return KERNEL_DIR / "align.c"


def align_table(full: bool = False, levels=("l1", "l2"), widths=(4, 8), samples: int = 10,
                timer: str = "auto", variant: str = "O2", addressing: str = "auto",
                min_sample_time: float | None = 0.002, estimator: str = "min",
                cache_dir: Path | None = None) -> dict:
    """Seed 004's Table 3 for this core: dependent-load latency by alignment.

    Returns {"rows": [...], "points": [...], ...}: one row per (group, width) with the
    offsets measured and cycles and ns per load at each level (median over the
    offsets of each run's fastest sample, or median sample with estimator="median").  `points` holds every measured run.
    """
    art = build_executable(align_kernel(), toolchain.get(variant),
                           cache_dir=Path(cache_dir or paths.cache_dir()) / "artifacts")
    points, meta = [], {}
    for pt in align_points(full, widths):
        for level in levels:
            d = run_harness(art.path, {"offset": str(pt["offset"]), "width": str(pt["width"]),
                                       "at": pt["at"], "level": level, "addressing": addressing},
                            samples, timer, min_sample_time)
            meta = {"timer": d["timer"], "core_per_tsc": d["core_per_tsc"], "tsc_hz": d["tsc_hz"]}
            points.append({**pt, "level": level, "cycles_per_load": _per_unit(d, "cycles", estimator),
                           "ns_per_load": _per_unit(d, "ns", estimator), "notes": d.get("notes", {})})
    rows = []
    for key, label in ALIGN_GROUPS:
        for w in widths:
            pts = [p for p in points if p["group"] == key and p["width"] == w]
            if not pts:
                continue
            row = {"group": key, "interpretation": label, "width": w,
                   "offsets": sorted({p["offset"] + (4096 - 64 if p["at"] == "page-end" else 0) for p in pts})}
            for level in levels:
                lv = [p for p in pts if p["level"] == level]
                cy = [p["cycles_per_load"] for p in lv if p["cycles_per_load"] is not None]
                row[f"{level}_cycles"] = statistics.median(cy) if cy else None
                row[f"{level}_ns"] = statistics.median(p["ns_per_load"] for p in lv)
                row[f"{level}_indexed"] = any(p["notes"].get("indexed_addressing") for p in lv)
            rows.append(row)
    return {"rows": rows, "points": points, "levels": list(levels), "widths": list(widths),
            "full": full, "estimator": estimator, "artifact": art.path, "code_hash": art.code_hash, **meta,
            "note": ("offsets in the page group are counted from the page start (line 63 of a "
                     "4 KiB page + offset); 4-byte loads are direct (MAP_32BIT ring, no add) "
                     "unless *_indexed says the base+index form was used")}


# ---- tables a plan can ask for (plan key probe_tables), as report-ready analyses ---------

def _fmt(v: float | None, digits: int = 3) -> str:
    return "-" if v is None else f"{v:.{digits}g}"


def table2_analysis(timer: str = "auto") -> dict:
    """Seed 004 table 2 in the report's table form, llvm-mca beside it when installed."""
    rows = seed004_table(mca=shutil.which("llvm-mca") is not None, timer=timer)
    published = list(SEED004_PUBLISHED)
    columns = ["col", "seed's loop", "x86-64 loop", "instr.", "cycles/iter", "min..max", "IPC", "ns/iter",
               "llvm-mca cycles"] + [f"{c} (seed: cycles, IPC)" for c in published]
    table = [[r["column"], r["seed_sequence"], r["sequence"], r["instructions"], _fmt(r["cycles_per_iteration"]),
              f"{_fmt(r['cycles_min'])}..{_fmt(r['cycles_max'])}", _fmt(r["ipc"]), _fmt(r["ns_per_iteration"]),
              (_fmt(r.get("mca_cycles_per_iteration")) + (" (disagrees)" if r.get("mca_disagrees") else ""))
              if "mca_cpu" in r else "not installed"]
             + [f"{r['seed_published'][c][0]:g}, {r['seed_published'][c][1]:g}" for c in published] for r in rows]
    notes = ["Each loop runs as its own loop at N and 2N iterations in several processes; cycles per "
             "iteration include the DEC/JNZ as in the seed and are the fastest run's (other tenants of this "
             "core slow whole runs down); min..max is the spread over every run."]
    if any(r.get("mca_disagrees") for r in rows):
        notes.append(MCA_NOTE)
    return {"title": "004 · Table 2: cycles per iteration of tiny loops (RDTSC, calibrated to core cycles)",
            "columns": columns, "rows": table, "left": 3, "notes": notes, "data": rows}


def table3_analysis(timer: str = "auto") -> dict:
    """Seed 004 table 3 (latency of a dependent load by alignment) in the report's form."""
    t = align_table(timer=timer)
    columns = ["group", "width", "offsets"] + [f"{lv.upper()} {u}" for lv in t["levels"] for u in ("cycles", "ns")]
    table = [[r["interpretation"], r["width"], " ".join(map(str, r["offsets"]))]
             + [_fmt(r[f"{lv}_{u}"]) for lv in t["levels"] for u in ("cycles", "ns")] for r in t["rows"]]
    return {"title": "004 · Table 3: load-to-use latency by alignment, L1 hit and L1 miss / L2 hit",
            "columns": columns, "rows": table, "left": 3, "notes": [t["note"]], "data": t["rows"]}


TABLES = {"seed004-table2": table2_analysis, "seed004-table3": table3_analysis}
