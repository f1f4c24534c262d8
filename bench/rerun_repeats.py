#!/usr/bin/env python3
"""Is a rerun a second experiment?  A/A comparisons simulated with the project's own
placement draw (Target.placement_at), test and verdicts (stats.paired_compare,
DecisionPolicy.decide): two builds of the same code, each placement of a build moving its
rate by a fixed effect (normal, `--spread`), each round by noise (`--noise`).  Each false
verdict of a first run is run again: under the placements the run's own seed draws (now),
and under placement r in round r whatever the run (before: every run of a build used the
same layouts).  How many of the first run's false verdicts does the rerun repeat?

Usage: python bench/rerun_repeats.py [--trials 6000] [--rounds 12] [--spread 0.0037] [--noise 0.002]
"""
from __future__ import annotations

import argparse
import math
import random

import numpy as np

from cpulab import stats
from cpulab.compile.artifacts import Artifact
from cpulab.measure.schedule.targets import Target
from cpulab.spec.policy import DecisionPolicy


def run(trial: int, seed: int, rounds: int, effect, noise: float, rng, drawn: bool) -> str:
    """The verdict of one A/A comparison (builds a and b of trial `trial`) in a run of `seed`."""
    policy = DecisionPolicy(method="paired")
    ratios = []
    for r in range(rounds):
        logs = []
        for build in ("a", "b"):
            t = Target("aa", "w", build, {"trial": str(trial)}, artifact=Artifact("/x", f"{build}{trial}", "c", 1, "",
                                                                                   (), placeable=True), seed=seed)
            placement = t.placement_at(r) if drawn else r
            logs.append(effect(build, trial, placement) + rng.normal(0, noise))
        ratios.append(math.exp(logs[1] - logs[0]))
    [(_, verdict, _)] = policy.decide([stats.paired_compare(ratios, 1 - policy.alpha)], [0.0])
    return verdict


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=6000)
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--spread", type=float, default=0.0037, help="placement effect, sd of the log rate")
    ap.add_argument("--noise", type=float, default=0.002, help="round noise, sd of the log rate")
    a = ap.parse_args()
    rng = np.random.default_rng(59)
    effects: dict[tuple, float] = {}

    def effect(build: str, trial: int, placement: int) -> float:  # a placement's effect is the same every time
        return effects.setdefault((build, trial, placement), rng.normal(0, a.spread))

    seeds = random.Random(59)
    for drawn, how in ((False, "placement r in round r (before)"), (True, "placements drawn from the run's seed (now)")):
        false = repeated = 0
        for trial in range(a.trials):
            if run(trial, seeds.getrandbits(63), a.rounds, effect, a.noise, rng, drawn) in ("faster", "slower"):
                false += 1
                repeated += run(trial, seeds.getrandbits(63), a.rounds, effect, a.noise, rng, drawn) in ("faster", "slower")
        print(f"{how}: {false} false verdicts in {a.trials} A/A comparisons; a rerun repeated {repeated} "
              f"({100 * repeated / max(false, 1):.1f}%)")


if __name__ == "__main__":
    main()
