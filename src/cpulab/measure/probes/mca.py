"""llvm-mca's prediction for a probe body: a model beside the measurement, never instead."""
from __future__ import annotations

import functools
import re
import shutil
import subprocess

from cpulab.measure.probes.asm import expand_loop, split_body

# Instructions llvm-mca simulates per prediction: its per-iteration figure has settled
# long before (a 722-instruction RC5 loop read 272.04 cycles at 1,000 iterations, 272.42
# at 100), and a loop that long took 1.2 s at 1,000.
SIMULATED_INSTRUCTIONS = 100_000


@functools.cache
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


def mca_predict(body: str, syntax: str = "intel", as_loop: bool = False, iterations: int | None = None,
                cpu: str | None = None) -> dict | None:
    """llvm-mca's cycles per iteration for the body (None if llvm-mca is missing).

    llvm-mca simulates the block repeated `iterations` times (default: 100 to 1,000, about
    SIMULATED_INSTRUCTIONS in all); branches are not taken or mispredicted in its
    model, only issued.  The loop label becomes a named one (llvm-mca's Intel parser
    does not read 1b)."""
    exe = shutil.which("llvm-mca")
    if not exe:
        return None
    cpu = cpu or mca_cpu()
    stmts = [re.sub(r"\b1b\b", ".Lloop", expand_loop(s)) for s in split_body(body)]
    text = (".Lloop:\n" if as_loop else "") + "\n".join(stmts) + "\n"
    iterations = iterations or max(100, min(1000, SIMULATED_INSTRUCTIONS // max(1, len(stmts))))
    args = (exe, f"-mcpu={cpu}", f"--iterations={iterations}")
    if syntax == "intel":
        args += ("-x86-asm-syntax=intel",)
    return dict(_modelled(args, text, cpu, iterations))


@functools.lru_cache(maxsize=256)
def _modelled(args: tuple[str, ...], text: str, cpu: str, iterations: int) -> dict:
    """llvm-mca's answer for one input, kept: a model is the same every time, and a run's
    explanations ask it again for each loop they show twice (14 of the seeds' 41 calls
    repeated an input already modelled: about 1 s of CPU, at 70 ms a call)."""
    p = subprocess.run(list(args), input=text, capture_output=True, text=True, timeout=60)
    m = re.search(r"Total Cycles:\s+(\d+)", p.stdout)
    if p.returncode != 0 or not m:
        return {"cpu": cpu, "error": (p.stderr.strip().splitlines() or ["llvm-mca failed"])[0]}
    cycles = int(m.group(1)) / iterations
    ins = re.search(r"Instructions:\s+(\d+)", p.stdout)
    n = int(ins.group(1)) / iterations if ins else None
    return {"cpu": cpu, "cycles_per_iteration": cycles, "instructions": n,
            "ipc": n / cycles if n and cycles else None}
