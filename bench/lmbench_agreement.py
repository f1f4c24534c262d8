"""Does `cpulab memlat` agree with lmbench's lat_mem_rd?  The same plateaus, same machine.

lmbench is not part of cpulab: give the src/ folder of an lmbench 3 source tree you
fetched.  Its lat_mem_rd.c and timing library are built here beside a small driver (its
main renamed) that calls its loads() at exactly the working sets asked for, with the
random page walk of `lat_mem_rd -t` and the page permutation spread over that working
set only (lat_mem_rd itself spreads it over its largest size, so the page tables of a
small working set are scattered over the largest one's).  Both sides use 4 KiB pages
(lmbench's malloc: transparent huge pages are off unless madvised; cpulab pages=4k).

Each round runs lmbench once at every size, then `cpulab run -w memlat` with one
process at every size, in alternating order, so a co-tenant's use of a shared cache hits
both.  Both take the fastest of a few tries in a process (lmbench: the minimum of its
repetitions; cpulab: the fastest of its first samples), both on the CPU cpulab measures
on (lmbench's timing parent sleeps in select() while its child measures, so they can
share it).  Both are read in core cycles, each at the clock its own chase ran at.  That
clock is not the one a compute loop sees: on an Intel Xeon (family 6 model 167) the core
ran at 1.57 TSC ticks' worth a tick under an add chain and fell to 1.38 about 10 ms into
a chase that waits on the L2 or beyond, back again under compute (the host lowers the
clock of a core that mostly stalls).  So lmbench's nanoseconds become cycles at the core
clock measured on its CPU right after each size (a chain of dependent adds, as the
harness measures beside each of its own samples), after a warm-up long enough for the
clock to settle (--warmup-ms); cpulab gives cycles per load itself.  Prints per size the
median over rounds of each, and the median of the per-round ratio cpulab / lmbench with
its spread; the goal is within 5% at every plateau.

    PYTHONPATH=src python bench/lmbench_agreement.py LMBENCH/src [--rounds 11] [--sizes 16K,128K,1M,4M,64M]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from cpulab import workloads
from cpulab.compile import artifacts
from cpulab.measure.execute import executor
from cpulab.params import human_bytes, parse_size
from cpulab.plan import toolchain

CPU = max(os.sched_getaffinity(0))  # the CPU cpulab measures on (cpulock.claim_cpu: the last one free)

DRIVER_C = r"""
#include "bench.h"
#include "coreclock.h"
extern benchmp_f fpInit;
void loads(size_t len, size_t range, size_t stride, int parallel, int warmup, int repetitions);
/* argv: repetitions, warm-up in us, then working sets in bytes.  Prints on stderr per
 * size lmbench's "MB ns" line, then "ratio R": core cycles per TSC tick right after. */
int main(int argc, char **argv)
{
    fpInit = thrash_initialize;
    for (int i = 3; i < argc; i++) {
        size_t size = strtoull(argv[i], 0, 10);
        loads(size, size, 64, 1, atoi(argv[2]), atoi(argv[1]));
        fprintf(stderr, "ratio %.6f\n", fastest_chain_ratio(200, 5));
    }
    return 0;
}
"""
LMBENCH_FILES = ("lib_mem.c", "lib_timing.c", "lib_stats.c", "lib_debug.c", "getopt.c", "lib_sched.c")


def build_driver(src: Path, work: Path) -> Path:
    """lat_mem_rd.c (main renamed) and its library, linked with DRIVER_C."""
    missing = [f for f in ("lat_mem_rd.c", "bench.h", *LMBENCH_FILES) if not (src / f).exists()]
    if missing:
        sys.exit(f"{src}: not an lmbench src/ folder (missing {', '.join(missing)})")
    # coreclock.h: the harness's own clock reading; rpc/rpc.h: Debian's libtirpc-dev
    inc = ["-O2", f"-I{src}", f"-I{artifacts.NATIVE_DIR}", "-I/usr/include/tirpc", "-w"]
    (work / "driver.c").write_text(DRIVER_C)
    subprocess.run(["gcc", *inc, "-Dmain=lat_mem_rd_main", "-c", str(src / "lat_mem_rd.c"), "-o",
                    str(work / "lat_mem_rd.o")], check=True)
    exe = work / "lmbench_loads"
    subprocess.run(["gcc", *inc, "-o", str(exe), str(work / "driver.c"), str(work / "lat_mem_rd.o"),
                    *(str(src / f) for f in LMBENCH_FILES), "-lm", "-ltirpc"], check=True)
    return exe


def lmbench_cycles(exe: Path, sizes: list[int], reps: int, warmup_ms: float, tsc: float) -> dict[int, float]:
    """lmbench's ns per load at each size, in core cycles at the clock right after it."""
    with executor.on_cpu(CPU):
        p = subprocess.run([str(exe), str(reps), str(int(warmup_ms * 1000)), *map(str, sizes)],
                           check=True, capture_output=True, text=True)
    lines = [line.split() for line in p.stderr.splitlines()]
    ns = [float(w[1]) for w in lines if len(w) == 2 and w[0] != "ratio"]
    ratio = [float(w[1]) for w in lines if len(w) == 2 and w[0] == "ratio"]
    return {s: n * tsc * r for s, n, r in zip(sizes, ns, ratio)}


def cpulab_cycles(sizes: list[int], db: Path, mode: str) -> dict[int, float]:
    p = subprocess.run([sys.executable, "-m", "cpulab.cli", "run", "--db", str(db), "-w", "memlat", "-v", "O2",
                        "-p", "size=" + ",".join(map(str, sizes)), "-p", "pages=4k", "-p", f"mode={mode}",
                        "--processes", "1",
                        "--samples", "20", "--budget", "0", "--json"], check=True, capture_output=True, text=True)
    # a process whose every sample was left out as disturbed has no estimate: that round has no pair
    return {int(r["params"]["size"]): r["cycles_per_unit"] or float("nan") for r in json.loads(p.stdout)["results"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("lmbench_src", type=Path, help="the src/ folder of an lmbench 3 tree")
    ap.add_argument("--rounds", type=int, default=11, help="rounds (at 4 MiB on an Intel host 11 were needed for the medians to settle)")
    ap.add_argument("--reps", type=int, default=3, help="lmbench's repetitions per size (it keeps the fastest)")
    ap.add_argument("--warmup-ms", type=float, default=30, help="lmbench's warm-up per size: the clock settles in it")
    ap.add_argument("--sizes", default="16K,128K,1M,4M,64M", help="working sets: one per plateau")
    ap.add_argument("--mode", default="random", help="cpulab memlat's order (default: its default)")
    args = ap.parse_args()
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    harness = Path(artifacts.build_artifact(workloads.get("memlat"), toolchain.BUILTIN["O2"]).path)
    # the TSC's rate, as the harness measures it (an executor on CPU claims no CPU, so cpulab's runs take it)
    tsc = executor.calibrate_timing(str(harness), "tsc", executor.LocalExecutor(CPU))["tsc_hz"] / 1e9
    with tempfile.TemporaryDirectory() as tmp:
        exe = build_driver(args.lmbench_src.resolve(), Path(tmp))
        lm: dict[int, list[float]] = {s: [] for s in sizes}
        cl: dict[int, list[float]] = {s: [] for s in sizes}
        for r in range(args.rounds):
            tools = [(lambda: lmbench_cycles(exe, sizes, args.reps, args.warmup_ms, tsc), lm),
                     (lambda: cpulab_cycles(sizes, Path(tmp) / "db.sqlite", args.mode), cl)]
            for measure, into in tools if r % 2 == 0 else reversed(tools):
                for s, v in measure().items():
                    into[s].append(v)
            print(f"round {r + 1}: " + "  ".join(f"{human_bytes(s)} lmbench {lm[s][-1]:.2f} cpulab {cl[s][-1]:.2f}"
                                                 for s in sizes), flush=True)
    print(f"\n{'working set':>12} {'lmbench cyc':>11} {'cpulab cyc':>10} {'cpulab/lmbench':>15} {'per-round ratios':>30}")
    for s in sizes:
        ratios = sorted(c / m for c, m in zip(cl[s], lm[s]) if c == c)
        measured = [c for c in cl[s] if c == c]
        print(f"{human_bytes(s):>12} {statistics.median(lm[s]):11.3f} {statistics.median(measured):10.3f} "
              f"{statistics.median(ratios):15.3f}   {ratios[0]:.3f}..{ratios[-1]:.3f} over {len(ratios)}")


if __name__ == "__main__":
    main()
