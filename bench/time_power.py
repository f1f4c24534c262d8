#!/usr/bin/env python3
"""`cpulab time` on its defaults (issue 39, item 5; issue 60): how often it detects a program
doing --more percent more work, and how often it calls two runs of the same program different.

A spin loop (bench/kernels/spin.c; --program walk: a dependent chase around 256 KiB,
bench/kernels/walk.c) of --ms milliseconds against the same program with 1 + more/100
times the iterations (`slower` is a detection), and against itself under another name (any
faster/slower is false), each --tries times, as `cpulab time A B` runs them: the default
first look and budget, whole processes compared in core cycles where the launcher read
them.  --cotenant CPU adds a busy loop on that CPU, on and off at random (bench/cotenant.py);
the measured CPU is the last one.  Each rate comes with its exact 95% interval.

Usage: python bench/time_power.py [--tries 20] [--ms 90] [--more 3] [--program spin|walk] [--cotenant CPU] [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cotenant import cotenant  # noqa: E402
from power import rate  # noqa: E402

from cpulab import analysis  # noqa: E402
from cpulab.compile.artifacts import build_tool  # noqa: E402
from cpulab.measure.schedule.timed_commands import TIME_DEFAULTS, time_commands  # noqa: E402
from cpulab.store.db import Store  # noqa: E402

KERNELS = Path(__file__).resolve().parent / "kernels"


def iterations_for(spin: str, ms: float) -> int:
    """The iteration count that spins about `ms` milliseconds here."""
    n = 1_000_000
    while True:
        t0 = time.perf_counter()
        os.spawnv(os.P_WAIT, spin, [spin, str(n)])
        took = time.perf_counter() - t0
        if took > 0.02:
            return int(n * ms / 1000 / took)
        n *= 4


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tries", type=int, default=20)
    ap.add_argument("--ms", type=float, default=90.0)
    ap.add_argument("--more", type=float, default=3.0, help="percent more work in B (default 3)")
    ap.add_argument("--program", choices=("spin", "walk"), default="spin")
    ap.add_argument("--cotenant", type=int, default=None, metavar="CPU")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    spin = str(build_tool(KERNELS / f"{a.program}.c"))
    n = iterations_for(spin, a.ms)
    verdicts: dict[str, list] = {"detect": [], "aa": []}
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as d, cotenant(a.cotenant, seed=2):
        store = Store(Path(d) / "time.sqlite")
        for i in range(a.tries):
            for kind, other in (("detect", int(n * (1 + a.more / 100))), ("aa", n)):
                run_id = time_commands(store, [f"{spin} {n}", f"{spin} {other}"], TIME_DEFAULTS.given(seed=i), names=["A", "B"])
                [c] = analysis.summarise(store, run_id).comparisons
                verdicts[kind].append({"verdict": str(c.verdict), "ratio": c.ratio, "ci": c.ci, "rounds": c.rounds,
                                       "basis": c.basis})
    doc = {"program": a.program, "iterations": n, "ms": a.ms, "more_percent": a.more, "cotenant_cpu": a.cotenant,
           "detected": rate(sum(v["verdict"] == "slower" for v in verdicts["detect"]), a.tries),
           "aa_false": rate(sum(v["verdict"] in ("faster", "slower") for v in verdicts["aa"]), a.tries),
           "detect_ratio_median": sorted(v["ratio"] for v in verdicts["detect"])[a.tries // 2],
           "rounds_median": sorted(v["rounds"] for v in verdicts["detect"] + verdicts["aa"])[a.tries],
           "detect_verdicts": sorted(v["verdict"] for v in verdicts["detect"]),
           "basis": sorted({v["basis"] for v in verdicts["detect"] + verdicts["aa"]}),
           "aa_verdicts": sorted(v["verdict"] for v in verdicts["aa"]),
           "wall_s": time.perf_counter() - t0}
    print(json.dumps(doc, indent=1) if a.json else "\n".join(f"{k}: {v}" for k, v in doc.items()))


if __name__ == "__main__":
    main()
