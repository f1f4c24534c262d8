#!/usr/bin/env python3
"""How often the interval shown covers the true ratio, by the look at which its comparison
stopped: the look procedure simulated with the project's own test (stats.paired_compare)
and verdicts (DecisionPolicy.decide), per-round log ratios normal around the truth.

Budget mode looks after n, 2n and 4n rounds (n: the first look of a family of that many
comparisons) and stops a comparison at the first look that decides it (anything but
unclear or inconclusive); the interval shown is that look's, computed at 1 - alpha/3.
What it covers there is what its label must say (issue 59).

Usage: python bench/look_coverage.py [--trials 2000] [--json]
"""
from __future__ import annotations

import argparse
import json
import math

import numpy as np
from scipy import stats as sps

from cpulab import stats
from cpulab.spec.policy import DecisionPolicy


def simulate(true: float, sigma: float, family: int, trials: int, rng) -> dict[int, list[int]]:
    """look -> [covered, stopped there] over `trials` families of `family` comparisons."""
    policy = DecisionPolicy.of_settings(1.0, 0.01, "paired")
    n1 = policy.first_look(family)
    out = {k: [0, 0] for k in range(policy.looks)}
    for _ in range(trials):
        logs = rng.normal(math.log(true), sigma, size=(family, n1 * 2 ** (policy.looks - 1)))
        open_ = list(range(family))
        for look in range(policy.looks):
            n = n1 * 2 ** look
            tests = [stats.paired_compare(list(np.exp(logs[i, :n])), policy.confidence) for i in range(family)]
            decided = policy.decide(tests, [0.0] * family)
            for i in list(open_):
                if policy.decided(decided[i][1]) or look == policy.looks - 1:
                    lo, hi = tests[i].ci
                    out[look][0] += lo <= true <= hi
                    out[look][1] += 1
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
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    rng = np.random.default_rng(59)
    rows = []
    for true in (1.0, 0.995, 0.99, 0.98):
        for sigma in (0.002, 0.005, 0.01):
            for family in (1, 10):
                by_look = simulate(true, sigma, family, a.trials // family, rng)
                cov, n = sum(v[0] for v in by_look.values()), sum(v[1] for v in by_look.values())
                rows.append({"true": true, "sigma": sigma, "family": family, "covered": cov, "n": n,
                             "by_look": {k + 1: v for k, v in by_look.items()}})
    if a.json:
        print(json.dumps(rows, indent=1))
        return
    print(f"{'true':>6} {'sigma':>6} {'family':>6} {'all':>16}   by stopping look: covered/stopped")
    for r in rows:
        lo, hi = binomial(r["covered"], r["n"])
        looks = "  ".join(f"{k}: {c}/{n} ({100 * c / n:.1f}%)" if n else f"{k}: -" for k, (c, n) in r["by_look"].items())
        print(f"{r['true']:>6} {r['sigma']:>6} {r['family']:>6} {100 * r['covered'] / r['n']:6.2f}% "
              f"[{100 * lo:.1f}, {100 * hi:.1f}]   {looks}")
    looks: dict[int, list[int]] = {}
    for r in rows:
        for k, (c, n) in r["by_look"].items():
            looks.setdefault(k, [0, 0])
            looks[k][0] += c
            looks[k][1] += n
    print("pooled by stopping look: " + "  ".join(f"{k}: {100 * c / n:.2f}% of {n}" for k, (c, n) in looks.items() if n))


if __name__ == "__main__":
    main()
