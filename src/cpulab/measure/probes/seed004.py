"""Seed 004's tables on this machine: table 2 (cycles per iteration of seven tiny loops,
beside the article's figures and llvm-mca) and table 3 (load latency by alignment).
Both are stored as data (analysis kinds `probe` and `align`); report/analysis_views.py draws them."""
from __future__ import annotations

import shutil

from cpulab.measure.execute.executor import Executor
from cpulab.measure.probes import Probe
from cpulab.measure.probes.align import align_table
from cpulab.measure.probes.loop import measure_loop
from cpulab.measure.probes.mca import mca_cpu, mca_predict

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
                  timer: str = "auto", executor: Executor | None = None) -> list[dict]:
    """Seed 004's Table 2 on this machine, one row per column of the original.

    Each loop runs as its own loop (counter rax, as in the seed's DEC EAX/JNZ) at N and
    2N iterations; cycles per iteration include the DEC/JNZ, as in the seed.
    """
    rows = []
    cpu = mca_cpu() if mca else None
    for col, (seed_text, body) in enumerate(SEED004_SEQUENCES, start=1):
        r = measure_loop(body, as_loop=True, counter="rax", iterations=iterations,
                         samples=samples, repeats=repeats, timer=timer, executor=executor)
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


# ---- the probes a plan can ask for (plan key probe_tables), stored as data ----

def table2(timer: str = "auto", executor: Executor | None = None) -> dict:
    """Seed 004 table 2 as a `probe` analysis, llvm-mca beside it when installed."""
    return {"rows": seed004_table(mca=shutil.which("llvm-mca") is not None, timer=timer, executor=executor)}


PROBES = [
    Probe("seed004-table2", "cycles per iteration of seed 004's seven tiny loops", "probe", table2),
    Probe("seed004-table3", "load-to-use latency by alignment (seed 004's table 3)", "align", align_table),
]
