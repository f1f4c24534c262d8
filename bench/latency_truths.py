#!/usr/bin/env python3
"""The physical facts the probes must reproduce, over 5 separate measurements each:
dependent ADD (1 cycle on every x86 core), dependent 64-bit IMUL (3 on Zen), an L1-hit
pointer chase (4-5), and an L2-hit chase (memlat at 256 KiB: 12-17 on Zen).
Usage: python bench/latency_truths.py [RUNS]"""
import statistics
import sys

from cpulab.compile import artifacts
from cpulab.measure import probes
from cpulab.plan import toolchain
from cpulab import workloads
from cpulab.measure.execute.executor import HarnessJob, default_executor

RUNS = int(sys.argv[1]) if len(sys.argv) > 1 else 5


def show(name, values):
    print(f"{name:28} median {statistics.median(values):6.2f} cycles, spread {min(values):.2f}..{max(values):.2f} "
          f"over {len(values)} runs: {[round(v, 2) for v in values]}")


for name, body in (("add rax, rbx", "add rax, rbx"), ("imul rax, rbx", "imul rax, rbx"),
                   ("L1 chase mov rax, [rax]", "mov rax, [rax]")):
    show(name, [probes.measure_loop(body)["cycles_per_iteration"] for _ in range(RUNS)])

art = artifacts.build_artifact(workloads.get("memlat"), toolchain.BUILTIN["O2"])
ex = default_executor()
for size in (16384, 262144):
    vals = []
    for _ in range(RUNS):
        out = ex.execute(HarnessJob(art.path, {"size": str(size), "pages": "4k"}, samples=5))
        d = out.data
        vals.append(min(c / d["work"] for c in d["cycles"]))
    show(f"memlat chase {size // 1024} KiB", vals)
