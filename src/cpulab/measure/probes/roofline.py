"""The roofline's roofs on this machine, measured: the floating-point operations a core
retires per cycle with each instruction set (a peak loop of independent chains through
the loop probe), and the bytes per cycle a plain C read loop (the bandwidth workload's
`read`) streams from each cache level and from memory.

Both are per core cycle, so a kernel's cycles per flop (or per byte) from any run on a
core of the same kind reads against them directly (analysis/roofline.py places it).

Compute: twelve independent accumulators per loop body, enough to cover an add, multiply
or FMA latency of 4-6 cycles on two pipes.  The registers hold zeros (loop_probe.c zeroes
xmm0-15; their upper halves are zero from the process's start, and glibc's vector code
ends in vzeroupper), so no operand is ever a denormal.  Double precision; float has twice
the lanes of the same instructions.
Memory: the read op at half of each data cache the OS reports, and at MEMORY_SPAN beyond
the last one, built at O2 and at O3-native (the faster is the roof: the loop is the
same, the compiler's vector width differs).  The memory points share the last cache
and the memory bus with anything on the other CPU, so this probe runs alone.
"""
from __future__ import annotations

from cpulab import workloads
from cpulab.compile.artifacts import BuildError, build_artifact
from cpulab.machine import cpu_flags, os_cache_sizes
from cpulab.params import data_caches
from cpulab.measure.execute.executor import Executor
from cpulab.measure.probes import Probe
from cpulab.measure.probes.asm import ProbeError
from cpulab.measure.probes.loop import measure_loop
from cpulab.measure.probes.sampling import measure
from cpulab.plan import toolchain
from cpulab.machine import toolchains

CHAINS = 12
# name -> (the /proc/cpuinfo flag it needs, one statement per chain i, double flops per statement)
PEAK_LOOPS = {
    "scalar SSE2": ("sse2", lambda i: f"{'addsd' if i % 2 else 'mulsd'} xmm{i}, xmm14", 1),
    "SSE2": ("sse2", lambda i: f"{'addpd' if i % 2 else 'mulpd'} xmm{i}, xmm14", 2),
    "AVX2 FMA": ("fma", lambda i: f"vfmadd231pd ymm{i}, ymm13, ymm14", 8),
    "AVX-512 FMA": ("avx512f", lambda i: f"vfmadd231pd zmm{i}, zmm13, zmm14", 16),
}
READ_VARIANTS = ("O2", "O3-native")
MEMORY_SPAN = (4, 64 << 20, 1 << 30)  # 4x the last cache, at least 64 MiB, at most 1 GiB
SAMPLES = 10


def peak_flops(timer: str = "auto", executor: Executor | None = None) -> list[dict]:
    """Double flops per core cycle of each instruction set this CPU has."""
    flags, rows = cpu_flags(), []
    for isa, (flag, statement, flops) in PEAK_LOOPS.items():
        if flag not in flags:
            continue
        body = "; ".join(statement(i) for i in range(CHAINS))
        r = measure_loop(body, samples=5, repeats=3, timer=timer, executor=executor)
        cycles = r["cycles_per_iteration"]
        rows.append({"isa": isa, "body": body, "flops_per_body": CHAINS * flops, "cycles_per_body": cycles,
                     "flops_per_cycle": CHAINS * flops / cycles if cycles else None})
    return rows


def read_points(caches: list[dict]) -> list[tuple[str, int, int | None]]:
    """(level, working set, bytes the level holds) for each data cache and memory."""
    data = data_caches(caches)
    points = [(c["name"].split()[0], c["size_bytes"] // 2, c["size_bytes"]) for c in data]
    times, least, most = MEMORY_SPAN
    last = data[-1]["size_bytes"] if data else 0
    return points + [("memory", min(max(times * last, least), most), None)]


def read_bandwidth(timer: str = "auto", executor: Executor | None = None) -> list[dict]:
    """Bytes per core cycle and GB/s of the bandwidth workload's read at each level."""
    w = workloads.get("bandwidth")
    arts = []
    for name in READ_VARIANTS:
        v = toolchain.get(name)
        if toolchains.unavailable_reason(v):
            continue
        try:
            arts.append((name, build_artifact(w, v).path))
        except BuildError:
            continue
    if not arts:
        raise ProbeError("the bandwidth kernel builds under none of " + ", ".join(READ_VARIANTS))
    rows = []
    for level, size, holds in read_points(os_cache_sizes()):
        best = None
        for name, path in arts:
            d = measure(path, {"op": "read", "size": str(size)}, SAMPLES, timer, executor=executor)
            cycles = [c for c in d["cycles"] if c]  # none with timer="clock"
            per_cycle = d["work"] / min(cycles) if cycles else None
            row = {"level": level, "working_set_bytes": size, "holds_bytes": holds, "variant": name,
                   "bytes_per_cycle": per_cycle, "gb_per_s": d["work"] / min(d["ns"])}
            if best is None or (row["bytes_per_cycle"] or 0) > (best["bytes_per_cycle"] or 0):
                best = row
        rows.append(best)
    return rows


def roofs(timer: str = "auto", executor: Executor | None = None) -> dict:
    return {"compute": peak_flops(timer, executor), "memory": read_bandwidth(timer, executor)}


PROBES = [Probe("roofline", "floating-point peaks per instruction set and read bandwidth per cache level",
                "roofline-roofs", roofs, alone=True)]
