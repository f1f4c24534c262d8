#!/usr/bin/env python3
"""A first look of 5 rounds where a comparison may lose one round's ratio (no turn kept on
both sides: its samples were preempted), read by the project's own test and policy: how
often a family of comparisons gets a false verdict (A/A), how many comparisons are
decided at that look, and how often the interval shown covers the true ratio, with the
t-test read from --mean-rounds valid ratios (stats.MEAN_ROUNDS).

Per-round log ratios are normal, or Student t with 3 degrees of freedom (heavy tails),
around the truth; each comparison loses one of its 5 rounds with probability q.

Usage: python bench/lost_round.py [--trials 200] [--mean-rounds 4]
"""
from __future__ import annotations

import argparse
import math

import numpy as np

from cpulab import stats
from cpulab.spec.policy import DecisionPolicy

FIRST = 5
# (true ratio, rounds' spread, family, heavy tails): A/A, then effects far beyond the noise
CASES = [(1.0, 0.01, 81, False), (1.0, 0.01, 81, True), (1.0, 0.005, 10, False), (1.0, 0.01, 1, True),
         (2.0, 0.01, 81, False), (2.0, 0.02, 81, True), (0.9, 0.01, 27, False)]


def first_look(true: float, sigma: float, family: int, tails: bool, q: float, trials: int,
               rng: np.random.Generator) -> tuple[int, int, int, int]:
    """(families with a false verdict, comparisons decided, intervals covering, comparisons)."""
    policy = DecisionPolicy.of_settings(1.0, 0.01, "paired")
    level = policy.level(FIRST, FIRST)
    false = decided = covered = total = 0
    for _ in range(trials):
        noise = rng.standard_t(3, (family, FIRST)) / math.sqrt(3) if tails else rng.standard_normal((family, FIRST))
        logs = math.log(true) + sigma * noise
        tests = []
        for row in logs:
            kept = np.ones(FIRST, bool)
            if rng.random() < q:
                kept[rng.integers(FIRST)] = False
            tests.append(stats.paired_compare(list(np.exp(row[kept])), 1 - level))
        verdicts = policy.decide(tests, [0.0] * family, [level] * family)
        false += true == 1.0 and any(v in ("faster", "slower") for _, v, _ in verdicts)
        decided += sum(policy.decided(v) for _, v, _ in verdicts)
        covered += sum(t.ci[0] <= true <= t.ci[1] for _, _, t in verdicts)
        total += family
    return false, decided, covered, total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=200, help="families a case (20x that for a family of 1)")
    ap.add_argument("--mean-rounds", type=int, default=stats.MEAN_ROUNDS)
    a = ap.parse_args()
    stats.MEAN_ROUNDS = a.mean_rounds
    rng = np.random.default_rng(25)
    print(f"t-test from {a.mean_rounds} valid ratios; first look at {FIRST} rounds")
    for true, sigma, family, tails in CASES:
        for q in (0.1, 1.0):
            trials = a.trials * (20 if family == 1 else 1)
            false, decided, covered, total = first_look(true, sigma, family, tails, q, trials, rng)
            print(f"true {true} sigma {sigma} family {family:2d} {'t3    ' if tails else 'normal'} lost q {q}: "
                  f"false families {false}/{trials}  decided {decided}/{total}  "
                  f"covered {100 * covered / total:.1f}%", flush=True)


if __name__ == "__main__":
    main()
