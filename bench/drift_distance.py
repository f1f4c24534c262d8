#!/usr/bin/env python3
"""Cross-run A/A at a distance: the same code measured in two runs `--apart` runs apart on
a machine whose runs drift as a random walk (`--walk` per run, each point moved on its
own by `--point` too), judged as `cpulab compare RUN_A RUN_B` judges it (the project's
drift_from and apart_verdicts): with the drift of runs that far apart, and with the drift
of neighbours (what runs outside the latest 40 were once given).  Any faster/slower is
false; a family (the points of one workload) with any is a false family.

Usage: python bench/drift_distance.py [--families 200] [--apart 60] [--walk 0.005]
"""
from __future__ import annotations

import argparse
import math

import numpy as np

from cpulab.analysis import between_runs
from cpulab.model import Result, Status

POINTS, PROCESSES = 10, 6


def history(runs: int, walk: float, point: float, rng) -> list[dict]:
    """Each run's medians of identical code at POINTS points (run_medians' shape)."""
    level, out = 0.0, []
    for _ in range(runs):
        level += rng.normal(0, walk)
        out.append({("w", "c", p): math.exp(level + rng.normal(0, point)) for p in range(POINTS)})
    return out


def result(median: float, rng) -> Result:
    obs = {i: median * math.exp(rng.normal(0, 0.002)) for i in range(PROCESSES)}
    return Result(id=0, experiment="e", workload="w", variant="O2", params={}, unit="keys", rate_unit="keys/s",
                  per_clock_unit="cycles/key", status=Status.OK, median=float(np.median(list(obs.values()))),
                  observations=obs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--families", type=int, default=200)
    ap.add_argument("--apart", type=int, default=60)
    ap.add_argument("--walk", type=float, default=0.005)
    ap.add_argument("--point", type=float, default=0.001)
    a = ap.parse_args()
    rng = np.random.default_rng(59)
    false = {"true distance": 0, "distance 1": 0}
    for _ in range(a.families):
        runs = history(a.apart + 1, a.walk, a.point, rng)
        first, last = runs[0], runs[-1]
        family = [(None, result(first[k], rng), result(last[k], rng)) for k in sorted(first)]
        for how, distance in (("true distance", a.apart), ("distance 1", 1)):
            drift, _ = between_runs.drift_from(runs[-between_runs.DRIFT_RUNS:], distance)  # what a store reads
            verdicts = between_runs.apart_verdicts(family, drift)
            false[how] += any(v in ("faster", "slower") for _, _, v in verdicts)
    for how, n in false.items():
        print(f"{how}: {n} of {a.families} families with a false verdict ({100 * n / a.families:.1f}%), "
              f"runs {a.apart} apart, {100 * a.walk:g}% a run")


if __name__ == "__main__":
    main()
