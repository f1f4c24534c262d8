#!/usr/bin/env python3
"""Runs measured apart: does `compare RUN_A RUN_B` call identical code faster or slower?

Alternates quiet runs and runs with a busy loop pinned to the measured CPU (on the whole
run, or on and off at random with --flicker), each `cpulab run -w sha256 -v O2` with a
fixed count of processes, all in one store; then compares each run with the next (one
quiet, one busy) as `cpulab compare RUN_A RUN_B` does, with the drift rule of
analysis/between_runs.py (the machine's run-to-run spread of identical code, read from the store).
Any faster/slower is false: the target is at most 5% of the pairs.
Usage: python bench/apart.py [--pairs 20] [--processes 10] [--flicker] [--json] [--keep DB]
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cotenant import cotenant  # noqa: E402
from power import rate  # noqa: E402

from cpulab.analysis import between_runs as machines
from cpulab.plan import plan as plans
from cpulab.measure.schedule import runner  # noqa: E402
from cpulab.measure.execute.executor import claimed_cpu  # noqa: E402
from cpulab.store.db import Store  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pairs", type=int, default=20)
    ap.add_argument("--processes", type=int, default=10)
    ap.add_argument("--flicker", action="store_true", help="the busy loop on and off at random 0.05-5 s")
    ap.add_argument("--keep", help="store path to keep (default: a temporary one)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    plan = plans.from_flags(["sha256"], ["O2"], {"size": "16K"}, None)
    plan = plan.given(processes=a.processes, budget=0.0)
    with tempfile.TemporaryDirectory() as d:
        store = Store(a.keep or Path(d) / "apart.sqlite")
        runs = []
        for i in range(2 * a.pairs + 1):
            busy = i % 2 == 1
            with cotenant(claimed_cpu() if busy else None, seed=i, always=not a.flicker):
                runs.append((runner.run_plan(plan.given(seed=i), store), busy))
        rows = []
        for (ra, busy_a), (rb, _) in zip(runs, runs[1:]):
            doc = machines.compare_runs(store, ra, rb)
            c = doc["comparisons"][0]
            rows.append({"a": ra, "b": rb, "busy": "b" if not busy_a else "a", "ratio": c["ratio"], "ci": c["ci"],
                         "verdict": c["verdict"], "drift": doc["drift"]})
    false = sum(r["verdict"] in ("faster", "slower") for r in rows)
    doc = {"pairs": len(rows), "false_verdicts": rate(false, len(rows)),
           "verdicts": {v: sum(r["verdict"] == v for r in rows) for v in sorted({r["verdict"] for r in rows})},
           "ratio_range": [min(r["ratio"] for r in rows), max(r["ratio"] for r in rows)],
           "drift_last": rows[-1]["drift"], "rows": rows}
    if a.json:
        print(json.dumps(doc, indent=1))
    else:
        for r in rows:
            print(f"run {r['b']} / run {r['a']} (busy: {r['busy']}): {r['ratio']:.4f} "
                  f"[{r['ci'][0]:.4f}, {r['ci'][1]:.4f}] {r['verdict']}  drift {r['drift']}")
        print(f"false verdicts {false}/{len(rows)}; {doc['verdicts']}; drift {doc['drift_last']}")


if __name__ == "__main__":
    main()
