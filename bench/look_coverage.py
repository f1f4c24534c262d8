#!/usr/bin/env python3
"""How often the interval shown covers the true ratio, by the look at which its comparison
stopped: the look procedure simulated with the project's own test (stats.paired_compare)
and verdicts (DecisionPolicy.decide), per-round log ratios normal (or, --tails, Student t
with 3 degrees of freedom: heavy tails) around the truth.

Budget mode looks after n, 2n, 4n, ... rounds (n: the first look) and stops a comparison
at the first look that decides it (anything but unclear or inconclusive); look k tests at
alpha / (k(k+1)) and its interval is at 1 - that level, read by the signed rank or, where
the rounds floor its p, by the t-test of the mean.  What the interval covers where it
stopped is what its label must say; the false verdicts of A/A say whether the looks hold
the family's bound.

--lost P: each round's ratio of a comparison is lost with probability P (no turn kept on
both sides: its samples preempted), so a look may read fewer rounds than it ran;
--mean-rounds N: the t-test read from N valid rounds (stats.MEAN_ROUNDS), to compare.

Usage: python bench/look_coverage.py [--trials 2000] [--looks 5] [--tails] [--lost 0]
                                     [--mean-rounds N] [--json]
"""
from __future__ import annotations

import argparse
import json
import math

import numpy as np
from scipy import stats as sps

from cpulab import stats
from cpulab.spec.policy import DecisionPolicy


def simulate(true: float, sigma: float, family: int, trials: int, rng, looks: int = 5,
             tails: bool = False, lost: float = 0.0) -> dict[int, list[int]]:
    """look -> [covered, stopped there, false faster/slower] over `trials` families of
    `family` comparisons, at most `looks` looks (the budget's end), each round's ratio lost
    with probability `lost`."""
    policy = DecisionPolicy.of_settings(1.0, 0.01, "paired")
    n1 = policy.first_look(family)
    out = {k: [0, 0, 0] for k in range(1, looks + 1)}
    for _ in range(trials):
        size = (family, n1 * 2 ** (looks - 1))
        noise = rng.standard_t(3, size=size) / math.sqrt(3) if tails else rng.standard_normal(size)
        logs = math.log(true) + sigma * noise
        kept = rng.random(size) >= lost
        open_ = list(range(family))
        for look in range(1, looks + 1):
            n = n1 * 2 ** (look - 1)
            level = policy.level(n, n1)
            tests = [stats.paired_compare(list(np.exp(logs[i, :n][kept[i, :n]])), 1 - level) for i in range(family)]
            decided = policy.decide(tests, [0.0] * family, [level] * family)
            for i in list(open_):
                _, verdict, t = decided[i]
                if policy.decided(verdict) or look == looks:
                    lo, hi = t.ci
                    out[look][0] += lo <= true <= hi
                    out[look][1] += 1
                    out[look][2] += verdict in ("faster", "slower") and true == 1.0
                    open_.remove(i)
            if not open_:
                break
    return out


def binomial(k: int, n: int) -> tuple[float, float]:
    """Clopper-Pearson 95% interval of k of n."""
    lo = sps.beta.ppf(0.025, k, n - k + 1) if k else 0.0
    hi = sps.beta.ppf(0.975, k + 1, n - k) if k < n else 1.0
    return float(lo), float(hi)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=2000)
    ap.add_argument("--looks", type=int, default=5)
    ap.add_argument("--tails", action="store_true", help="Student t (3 df) rounds instead of normal ones")
    ap.add_argument("--lost", type=float, default=0.0, help="probability that a round's ratio is lost")
    ap.add_argument("--mean-rounds", type=int, default=stats.MEAN_ROUNDS, help="the t-test's fewest rounds")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    stats.MEAN_ROUNDS = a.mean_rounds
    rng = np.random.default_rng(59)
    rows = []
    cases = [(true, sigma, family) for true in (1.0, 0.995, 0.99, 0.98) for sigma in (0.002, 0.005, 0.01)
             for family in (1, 10)] + [(0.5, 0.01, 27), (0.9, 0.01, 27)]  # 10x and more beyond the noise
    for true, sigma, family in cases:
        by_look = simulate(true, sigma, family, max(1, a.trials // family), rng, a.looks, a.tails, a.lost)
        cov, n, false = (sum(v[j] for v in by_look.values()) for j in range(3))
        rows.append({"true": true, "sigma": sigma, "family": family, "covered": cov, "n": n, "false": false,
                     "by_look": by_look})
    if a.json:
        print(json.dumps(rows, indent=1))
        return
    print(f"{'true':>6} {'sigma':>6} {'family':>6} {'all':>16} {'false':>6}   by stopping look: covered/stopped")
    for r in rows:
        lo, hi = binomial(r["covered"], r["n"])
        looks = "  ".join(f"{k}: {c}/{n} ({100 * c / n:.1f}%)" if n else f"{k}: -"
                          for k, (c, n, _) in r["by_look"].items())
        print(f"{r['true']:>6} {r['sigma']:>6} {r['family']:>6} {100 * r['covered'] / r['n']:6.2f}% "
              f"[{100 * lo:.1f}, {100 * hi:.1f}] {r['false'] if r['true'] == 1.0 else '':>6}   {looks}")
    looks: dict[int, list[int]] = {}
    for r in rows:
        for k, (c, n, _) in r["by_look"].items():
            looks.setdefault(k, [0, 0])
            looks[k][0] += c
            looks[k][1] += n
    print("pooled by stopping look: " + "  ".join(f"{k}: {100 * c / n:.2f}% of {n}" for k, (c, n) in looks.items() if n))
    aa = [r for r in rows if r["true"] == 1.0]
    print(f"A/A families with a false faster/slower: {sum(r['false'] > 0 for r in aa)} comparisons "
          f"{sum(r['false'] for r in aa)} of {sum(r['n'] for r in aa)}")


if __name__ == "__main__":
    main()
