"""Estimators and comparisons, distribution-free where it matters.

The unit of observation is one process (one *invocation* of an artifact): within a
process the code and data layout is fixed, so its samples are not independent of each
other.  Each invocation contributes the median of its samples; medians, intervals and
tests are computed over invocations.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

ALPHA = 0.05
# Differences smaller than this are "same" even when significant: layout alone moves
# results by about this much (Mytkowicz et al., ASPLOS 2009).
MIN_EFFECT = 0.01


@dataclass(frozen=True)
class Estimate:
    median: float
    ci: tuple[float, float]
    cv: float  # coefficient of variation (std / mean)
    n: int


def median_ci(x, confidence: float = 0.95) -> tuple[float, float]:
    """Distribution-free CI of the median from order statistics.

    The number of observations below the median is Binomial(n, 1/2); the interval
    [x_(l), x_(u)] covers the median with probability P(l <= B < u).  With fewer than 6
    observations no pair of ranks reaches 95%; the full range is returned.
    """
    x = np.sort(np.asarray(x, dtype=float))
    n = len(x)
    if n == 0:
        return (math.nan, math.nan)
    def coverage(l: int) -> float:  # P(x_(l) <= median <= x_(n-1-l)) = P(l < B <= n-1-l)
        return float(sps.binom.cdf(n - 1 - l, n, 0.5) - sps.binom.cdf(l, n, 0.5))

    l = 0
    while l + 1 < n - 2 - l and coverage(l + 1) >= confidence:
        l += 1
    u = n - 1 - l
    return (float(x[l]), float(x[u]))


def estimate(x) -> Estimate:
    x = np.asarray(x, dtype=float)
    if len(x) == 0:
        return Estimate(math.nan, (math.nan, math.nan), math.nan, 0)
    mean = float(np.mean(x))
    cv = float(np.std(x, ddof=1) / mean) if len(x) > 1 and mean else 0.0
    return Estimate(float(np.median(x)), median_ci(x), cv, len(x))


@dataclass(frozen=True)
class Comparison:
    ratio: float  # median(variant) / median(baseline), of a higher-is-better rate
    ci: tuple[float, float]
    p: float  # two-sided Mann-Whitney U
    p_adjusted: float  # after Holm's correction over the family
    verdict: str  # faster | slower | same | inconclusive
    p_floor: float = 0.0  # the smallest p these sample sizes can give


def p_floor(n1: int, n2: int) -> float:
    """The smallest two-sided Mann-Whitney p-value possible with n1 and n2 observations:
    complete separation, 2 / C(n1 + n2, n1).  With 3 against 3 it is 0.1, so no
    difference, however large, can be significant at 0.05."""
    if n1 < 1 or n2 < 1:
        return 1.0
    return min(1.0, 2.0 / math.comb(n1 + n2, n1))


def ratio_ci(base, var, n_boot: int = 2000, confidence: float = 0.95, seed: int = 12345) -> tuple[float, float]:
    """Percentile-bootstrap CI of median(var) / median(base), resampling each side."""
    base, var = np.asarray(base, float), np.asarray(var, float)
    rng = np.random.default_rng(seed)
    mb = np.median(rng.choice(base, size=(n_boot, len(base))), axis=1)
    mv = np.median(rng.choice(var, size=(n_boot, len(var))), axis=1)
    r = mv / mb
    lo, hi = np.quantile(r, [(1 - confidence) / 2, 1 - (1 - confidence) / 2])
    return (float(lo), float(hi))


def mann_whitney_p(base, var) -> float:
    if len(base) < 2 or len(var) < 2:
        return 1.0
    if np.ptp(np.concatenate([base, var])) == 0:
        return 1.0
    return float(sps.mannwhitneyu(var, base, alternative="two-sided").pvalue)


def holm(pvalues: list[float]) -> list[float]:
    """Holm-Bonferroni step-down adjusted p-values (same order as given)."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    adjusted = [1.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted


def verdict(ratio: float, ci: tuple[float, float], p_adjusted: float, alpha: float = ALPHA,
            min_effect: float = MIN_EFFECT, p_floor_adjusted: float = 0.0) -> str:
    """faster/slower only if significant, the interval excludes 1 and the effect is
    larger than layout noise; inconclusive if too few runs could never be significant;
    otherwise same."""
    if p_floor_adjusted >= alpha:
        return "inconclusive"
    if p_adjusted >= alpha or ci[0] <= 1.0 <= ci[1] or abs(ratio - 1.0) < min_effect:
        return "same"
    return "faster" if ratio > 1 else "slower"


def compare(baseline, variant) -> Comparison:
    """One variant's observations against the baseline's, before any correction."""
    base, var = np.asarray(baseline, float), np.asarray(variant, float)
    ratio = float(np.median(var) / np.median(base))
    ci, p, floor = ratio_ci(base, var), mann_whitney_p(base, var), p_floor(len(base), len(var))
    return Comparison(ratio, ci, p, p, verdict(ratio, ci, p, p_floor_adjusted=floor), floor)


def adjust_family(comparisons: list[Comparison], alpha: float = ALPHA,
                  min_effect: float = MIN_EFFECT) -> list[Comparison]:
    """Holm-correct a family of comparisons and redo their verdicts.  The smallest p any
    of them can reach is multiplied by the family size, as Holm does with the smallest."""
    adjusted = holm([c.p for c in comparisons])
    m = len(comparisons)
    return [Comparison(c.ratio, c.ci, c.p, pa, verdict(c.ratio, c.ci, pa, alpha, min_effect, min(1.0, c.p_floor * m)),
                       c.p_floor)
            for c, pa in zip(comparisons, adjusted)]


def geomean(values) -> float:
    v = np.asarray([x for x in values if x and x > 0 and math.isfinite(x)], float)
    return float(np.exp(np.mean(np.log(v)))) if len(v) else math.nan
