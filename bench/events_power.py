#!/usr/bin/env python3
"""Named events (issue 61) on this machine's software events, PMU or not:

* task-clock per sample against the harness's own time of that sample (the ratio's
  quantiles over every sample of every run), and page faults per unit of a kernel that
  touches N new pages a unit (tests/kernels/faults.c: exactly 1 when counted right);
* an event comparison: the kernel against a build touching 5% more pages (page-faults
  `larger` is a detection), and against a build with another, unused flag (anything but
  `same` or `unclear` for page-faults is false), `--tries` runs each, as `cpulab run` of a
  plan with `events` runs them (its default first look and budget; the A/A builds have the
  same code, measured as two builds: measure_identical).

Each rate comes with its exact 95% interval.

Usage: python bench/events_power.py [--tries 10] [--json]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from power import rate, show  # noqa: E402

from cpulab.spec.record import StoredSample  # noqa: E402
from cpulab.store.db import Store  # noqa: E402

FAULTS = Path(__file__).resolve().parents[1] / "tests" / "kernels" / "faults.c"
PLAN = """events = ["task-clock", "page-faults"]
measure_identical = true
[kernel.faults]
source = "faults.c"
unit = "iterations"
[kernel.faults.params]
pages = {{ kind = "int", default = 256, min = 1 }}
[variants.other]
cflags = ["-O2", "{flag}"]
[[experiment]]
name = "faults"
workloads = ["faults"]
variants = ["O2", "other"]
"""


def one_run(d: Path, flag: str, db: Path) -> dict:
    (d / "plan.toml").write_text(PLAN.format(flag=flag))
    p = subprocess.run([sys.executable, "-m", "cpulab.cli", "run", str(d / "plan.toml"), "--json", "--db", str(db)],
                       capture_output=True, text=True, check=True)
    return json.loads(p.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tries", type=int, default=10)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    t0 = time.perf_counter()
    verdicts: dict[str, list[str]] = {"detect": [], "aa": []}
    clock_ratio, used_ratio, faults_per_unit, rounds = [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        (d / "faults.c").write_text(FAULTS.read_text())
        db = d / "s.sqlite"
        for i in range(a.tries):
            for kind, flag in (("detect", "-DMORE_PERCENT=5"), ("aa", "-DUNUSED_FLAG")):
                doc = one_run(d, flag, db)
                (c,) = doc["comparisons"]
                verdicts[kind].append(c["events"].get("page-faults", {}).get("verdict", "not counted"))
                rounds.append(c["events"].get("page-faults", {}).get("rounds"))
                store = Store(db)
                for r in doc["results"]:
                    samples: list[StoredSample] = store.samples(r["id"])
                    for s in samples:
                        if s.events and s.events.get("task-clock") is not None:
                            clock_ratio.append(s.events["task-clock"] / s.ns)
                            if not s.excluded:  # the samples estimates use (not preempted, not migrated)
                                used_ratio.append(clock_ratio[-1])
                        if s.events and r["variant"] == "O2" and s.events.get("page-faults") is not None:
                            faults_per_unit.append(s.events["page-faults"] / s.work)
            print(f"try {i + 1}: detect {verdicts['detect'][-1]}, A/A {verdicts['aa'][-1]}", file=sys.stderr)
    def spread(ratios: list[float]) -> dict:
        q = np.quantile(ratios, [0.001, 0.01, 0.5, 0.99, 0.999])
        return {"samples": len(ratios), "quantiles_0.1_1_50_99_99.9": [round(float(x), 5) for x in q],
                "within_1pct": rate(sum(abs(x - 1) <= 0.01 for x in ratios), len(ratios))}
    show({"host_load": open("/proc/loadavg").read().split()[:3],
          "task_clock_over_sample_time": {"all": spread(clock_ratio), "used": spread(used_ratio)},
          "page_faults_per_unit": {"samples": len(faults_per_unit), "min": min(faults_per_unit),
                                   "max": max(faults_per_unit)},
          "detected_5pct_more_faults": rate(verdicts["detect"].count("larger"), a.tries),
          "aa_same_or_unclear": rate(sum(v in ("same", "unclear") for v in verdicts["aa"]), a.tries),
          "verdicts": verdicts, "rounds": sorted(set(filter(None, rounds))),
          "wall_s": round(time.perf_counter() - t0, 1)}, a.json)


if __name__ == "__main__":
    main()
