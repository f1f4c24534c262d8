"""Estimators and tests, distribution-free where it matters.

The unit of observation is one process: within a process the code and data layout is
fixed, so its samples are not independent of each other.  A process's estimate is the
fastest of its first KEEP used samples (noise on a shared machine only slows; a fixed
count, so neither a process that kept more samples nor a plan that asked more looks
faster); processes with fewer used samples are left out and counted.  Medians,
intervals and tests are computed over processes, or over rounds when variants are
paired (by round, or sample by sample when the processes of a round took their samples
in turns).  What is decided from a test (verdicts, looks) is policy.py's.
"""
from __future__ import annotations

import functools
import math
import statistics
from collections import defaultdict
from dataclasses import dataclass
from typing import Protocol

import numpy as np


NORMAL = statistics.NormalDist()  # its quantile as scipy's (its cdf is not: erf, not erfc, in the tails)


# A process's estimate: the fastest of its first KEEP used samples, whatever the plan
# asked from 2 x KEEP up (a plan of 6 samples and one of 50 estimate alike), so a process
# may lose half its samples and still count; a plan asking fewer takes the first half,
# rounded up (a program's process is one sample).
KEEP = 3


@dataclass(frozen=True)
class Estimate:
    median: float
    ci: tuple[float, float]
    cv: float  # coefficient of variation (std / mean)
    n: int
    ci_coverage: float = math.nan  # the real coverage of ci: 0.95 or more, less below 6 observations


@functools.lru_cache(maxsize=None)  # a handful of sample sizes
def _median_ci_rank(n: int, confidence: float) -> tuple[int, float]:
    """The rank l of the interval [x_(l), x_(n-1-l)] and its coverage P(l < B <= n-1-l),
    B ~ Binomial(n, 1/2) (exact: C(n, k) / 2^n): the largest l whose coverage is still
    >= confidence, or l = 0 (the full range) when no pair of ranks reaches it."""
    def coverage(l: int) -> float:
        return sum(math.comb(n, k) for k in range(l + 1, n - l)) / 2 ** n
    l = 0
    while l + 1 < n - 2 - l and coverage(l + 1) >= confidence:
        l += 1
    return l, coverage(l)


def median_ci(x, confidence: float = 0.95) -> tuple[float, float]:
    """Distribution-free CI of the median from order statistics.

    The number of observations below the median is Binomial(n, 1/2); the interval
    [x_(l), x_(u)] covers the median with probability P(l <= B < u).  With fewer than 6
    observations no pair of ranks reaches 95%; the full range is returned, and
    median_ci_coverage says what it really covers (50% at n=2, 94% at n=5).
    """
    x = np.sort(np.asarray(x, dtype=float))
    n = len(x)
    if n == 0:
        return (math.nan, math.nan)
    l, _ = _median_ci_rank(n, confidence)
    return (float(x[l]), float(x[n - 1 - l]))


def median_ci_coverage(n: int, confidence: float = 0.95) -> float:
    """The probability that median_ci of n observations covers the true median."""
    return _median_ci_rank(n, confidence)[1] if n > 1 else 0.0


def estimate(x) -> Estimate:
    x = np.asarray(x, dtype=float)
    if len(x) == 0:
        return Estimate(math.nan, (math.nan, math.nan), math.nan, 0, 0.0)
    mean = float(np.mean(x))
    cv = float(np.std(x, ddof=1) / mean) if len(x) > 1 and mean else 0.0
    return Estimate(float(np.median(x)), median_ci(x), cv, len(x), median_ci_coverage(len(x)))


class Sample(Protocol):
    """What the estimators read of a stored sample (record.StoredSample)."""
    process: int
    idx: int
    ns: float
    offcpu_ns: float | None
    excluded: str


def on_cpu_ns(sample: Sample, io_bound: bool = False) -> float:
    """The time a sample counts: wall minus off-CPU time where the harness measured it
    (equal to the wall time for an undisturbed sample); an IO-bound sample's wall time,
    since its waits for the device are its work."""
    if io_bound:
        return sample.ns
    return sample.ns - max(sample.offcpu_ns or 0.0, 0.0)


@dataclass(frozen=True)
class Test:
    """The statistics of one comparison, before any correction or verdict (policy.py)."""
    ratio: float  # variant / baseline, of a higher-is-better rate
    ci: tuple[float, float]
    p: float  # two-sided: Mann-Whitney U (unpaired) or Wilcoxon signed-rank (paired, turns)
    p_floor: float = 0.0  # the smallest p these sample sizes can give
    method: str = "unpaired"
    n: int = 0  # rounds (paired, turns) or the smaller side's processes (unpaired)
    # Paired: the interval of the mean log ratio (Student's t), as a ratio.  The ratio and
    # ci are the robust centre's, which a difference confined to a few rounds (one
    # placement in four) hardly moves; `same` needs the mean held within too.
    mean_ci: tuple[float, float] | None = None
    # Paired: Student's t-test of the mean log ratio, whose p is not floored by the number
    # of rounds (the signed rank's is 2 / 2^n), and whether the rounds let it be read (the
    # robust centre lies within the mean's interval: mean_test).  policy.tested chooses.
    p_mean: float | None = None
    agrees: bool = False

    def by_mean(self) -> "Test":
        """This comparison as the t-test reads it: the mean log ratio, its interval and p."""
        lo, hi = self.mean_ci
        return Test(math.sqrt(lo * hi), self.mean_ci, self.p_mean, 0.0, self.method, self.n, self.mean_ci,
                    self.p_mean, self.agrees)


# The t-test is read from this many rounds, one under the first look's (policy.FIRST_ROUNDS):
# a first look that lost a round to preemption (6 of float-abi's 81 did) is read by it too;
# false verdicts and coverage hold at 4 as at 5 (bench/look_coverage.py --lost, docs/method.md).
MEAN_ROUNDS = 4


def p_floor(n1: int, n2: int) -> float:
    """The smallest two-sided Mann-Whitney p-value possible with n1 and n2 observations:
    complete separation, 2 / C(n1 + n2, n1).  With 3 against 3 it is 0.1, so no
    difference, however large, can be significant at 0.05."""
    return 1.0 if n1 < 1 or n2 < 1 else min(1.0, 2.0 / math.comb(n1 + n2, n1))


def row_medians(x: np.ndarray) -> np.ndarray:
    """np.median(x, axis=1), the same numbers, by a sort: a third of its time on the short
    rows of a bootstrap (2000 resamples of 10: 92 against 282 us)."""
    s, n = np.sort(x, axis=1), x.shape[1]
    return s[:, n // 2] if n % 2 else 0.5 * (s[:, n // 2 - 1] + s[:, n // 2])


def ratio_ci(base, var, n_boot: int = 2000, confidence: float = 0.95, seed: int = 12345) -> tuple[float, float]:
    """Percentile-bootstrap CI of median(var) / median(base), resampling each side."""
    base, var = np.asarray(base, float), np.asarray(var, float)
    rng = np.random.default_rng(seed)
    mb = row_medians(rng.choice(base, size=(n_boot, len(base))))  # base first: the same draws as ever
    r = row_medians(rng.choice(var, size=(n_boot, len(var)))) / mb
    lo, hi = np.quantile(r, [(1 - confidence) / 2, 1 - (1 - confidence) / 2])
    return (float(lo), float(hi))


def mann_whitney_p(base, var) -> float:
    """Two-sided Mann-Whitney U p-value, as scipy's mannwhitneyu gives it (method "auto"):
    exact where a side has at most 8 observations and no value is tied, else the normal
    approximation with tie and continuity corrections.  (scipy.stats cost every unpaired
    comparison 1.5 ms and its import 0.8 s.)"""
    base, var = np.asarray(base, float), np.asarray(var, float)
    n1, n2 = len(var), len(base)
    if n1 < 2 or n2 < 2 or np.ptp(np.concatenate([base, var])) == 0:
        return 1.0
    both = np.concatenate([var, base])
    u1 = float(midranks(both)[:n1].sum()) - n1 * (n1 + 1) / 2
    u = max(u1, n1 * n2 - u1)  # the larger U: the two-sided p is twice its tail
    ties = np.unique(both, return_counts=True)[1]
    if min(n1, n2) <= 8 and ties.max() == 1:
        return min(1.0, 2 * float(rank_sum_null(min(n1, n2), max(n1, n2))[round(u):].sum()))
    n = n1 + n2
    sd = math.sqrt(n1 * n2 / 12 * ((n + 1) - float((ties ** 3 - ties).sum()) / (n * (n - 1))))
    return min(1.0, math.erfc((u - n1 * n2 / 2 - 0.5) / sd / math.sqrt(2)))


@functools.lru_cache(maxsize=None)  # a handful of sample sizes
def rank_sum_null(m: int, n: int) -> np.ndarray:
    """P(U = u), u = 0 .. mn, for m observations against n with no ties and no difference:
    the share of the C(m + n, m) placements of the m among all whose U is u.  Those counts
    are the coefficients of the Gaussian binomial [m + n, m] (in q), built one factor at a
    time, [n + i, i] = [n + i - 1, i - 1] (1 - q^(n + i)) / (1 - q^i): exact below 2^53,
    m steps of m n (cached: read only)."""
    ways = np.zeros(m * n + m + n + 1)
    ways[0] = 1
    for i in range(1, m + 1):
        ways[n + i:] -= ways[:len(ways) - n - i].copy()  # times 1 - q^(n + i)
        for r in range(i):  # divided by 1 - q^i: a running sum along each residue mod i
            ways[r::i] = np.cumsum(ways[r::i])
    return ways[:m * n + 1] / math.comb(m + n, m)


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


def compare(baseline, variant, confidence: float = 0.95) -> Test:
    """Unpaired: one variant's per-process observations against the baseline's
    (Mann-Whitney U, bootstrap interval of the ratio of medians)."""
    base, var = np.asarray(baseline, float), np.asarray(variant, float)
    ratio = float(np.median(var) / np.median(base))
    return Test(ratio, ratio_ci(base, var, confidence=confidence), mann_whitney_p(base, var),
                p_floor(len(base), len(var)), "unpaired", min(len(base), len(var)))


def midranks(x) -> np.ndarray:
    """Ranks 1..n, tied values sharing their mean rank (scipy's rankdata), at a tenth of its cost."""
    s = np.asarray(x)[order := np.argsort(x, kind="stable")]
    ends = np.r_[(starts := np.flatnonzero(np.r_[True, s[1:] != s[:-1]]))[1:], len(s)]
    ranks = np.empty(len(s))
    ranks[order] = np.repeat((starts + ends + 1) / 2, ends - starts)
    return ranks


@functools.cache
def signed_rank_null(n: int) -> np.ndarray:
    """P(W+ = w), w = 0 .. n(n+1)/2, for n untied nonzero differences under symmetry (cached: read only)."""
    return sign_sum_null(list(range(1, n + 1)))


def sign_sum_null(scores: list[int]) -> np.ndarray:
    """P(S = s), s = 0 .. sum(scores), where each score joins S with probability 1/2
    (the signs of symmetric differences), exact by convolution.  With the ranks 1..n it
    is the signed-rank null; with twice the midranks it is the exact null under ties."""
    dist = np.zeros(sum(scores) + 1)
    dist[0] = 1.0
    top = 0
    for score in scores:
        joined = np.zeros_like(dist)
        joined[score:top + score + 1] = dist[:top + 1]
        dist = 0.5 * dist + 0.5 * joined
        top += score
    return dist


# Up to this many differences the signed-rank null is exact (a convolution of n steps
# over n^2 values: 10 ms at 200); beyond it, the normal approximation, whose error there
# is far below the p-values' resolution that matters (a run's carry-over has thousands).
EXACT_MAX = 200


def paired_compare(ratios, confidence: float = 0.95, method: str = "paired") -> Test:
    """Paired: one ratio variant/baseline per round (the round's processes ran back to
    back, or together in turns).

    On log ratios: the exact Wilcoxon signed-rank p (symmetric under "no difference",
    since the order within a round is random), the Hodges-Lehmann estimate (median of
    the Walsh averages) as the ratio, and the matching distribution-free interval from
    the Walsh averages at the exact critical rank (coverage >= confidence)."""
    d = np.log(np.asarray([r for r in ratios if r > 0 and math.isfinite(r)], float))
    n = len(d)
    if n == 0:
        return Test(math.nan, (math.nan, math.nan), 1.0, 1.0, method, 0)
    walsh = np.sort((d[:, None] + d[None, :])[np.triu_indices(n)] / 2)
    ratio = float(math.exp(np.median(walsh)))
    nz = d[d != 0]
    m = len(nz)
    # Every round exactly equal (a peak memory to the page): nothing to test, and the
    # interval [1, 1] is exact, so no floor stands in the way of `same`
    floor = min(1.0, 2 * 0.5 ** m) if m else 0.0
    if m == 0:
        return Test(ratio, (ratio, ratio), 1.0, floor, method, n)
    # Ties among |d| get midranks: doubled they are integers, and the exact null of their
    # signed sum is a convolution (zeros are dropped: Wilcoxon's rule, so m counts the rest).
    scores = np.rint(2 * midranks(np.abs(nz))).astype(int)
    w = int(scores[nz > 0].sum())
    if m <= EXACT_MAX:
        cdf = np.cumsum(sign_sum_null(scores.tolist()))
        lo_tail = cdf[w]
        hi_tail = 1.0 - (cdf[w - 1] if w >= 1 else 0.0)
    else:  # S has mean sum/2 and variance sum(score^2)/4; scores step by 1 at least
        mu, sd = scores.sum() / 2, math.sqrt(float((scores.astype(float) ** 2).sum())) / 2
        lo_tail, hi_tail = (0.5 * math.erfc(z / (sd * math.sqrt(2))) for z in (mu - w - 0.5, w - 0.5 - mu))
    p = float(min(1.0, 2 * min(lo_tail, hi_tail)))
    # Interval [w_(C), w_(M+1-C)] (1-based) with C the largest rank such that
    # P(W+ <= C-1) <= alpha/2; its coverage is 1 - 2 P(W+ <= C-1).  When even C = 1 is
    # too wide (under 6 rounds at 95%), the full range is all there is, and the p floor
    # makes the verdict inconclusive.
    if n <= EXACT_MAX:
        cdf_all = np.cumsum(signed_rank_null(n))
        c = max(1, int(np.searchsorted(cdf_all, (1 - confidence) / 2, side="right")))
    else:
        mu, sd = n * (n + 1) / 4, math.sqrt(n * (n + 1) * (2 * n + 1) / 24)
        c = max(1, math.floor(mu + 0.5 - NORMAL.inv_cdf(0.5 + confidence / 2) * sd))
    ci = (float(math.exp(walsh[c - 1])), float(math.exp(walsh[len(walsh) - c])))
    mean_ci = mean_interval(d, confidence)
    return Test(ratio, ci, p, floor, method, n, mean_ci, *mean_test(d, ratio, mean_ci))


def mean_test(d: np.ndarray, centre: float, mean_ci: tuple[float, float] | None) -> tuple[float | None, bool]:
    """Student's t-test p of the mean of log ratios d (None under MEAN_ROUNDS), and whether
    it may be read: the robust centre (the Hodges-Lehmann ratio) lies within the mean's
    interval, so the mean is not carried by a few rounds of a skewed lot.  The t-test
    assumes the log ratios symmetric, which they are where there is no difference (each
    round runs its builds in a random order); there it holds its level however heavy the
    tails (Efron, JASA 1969; bench/look_coverage.py --tails)."""
    if len(d) < MEAN_ROUNDS or np.ptp(d) == 0 or mean_ci is None:
        return None, False
    from scipy.special import stdtr  # the t distribution's CDF; scipy.stats' ttest_1samp costs 1 ms a call
    t = d.mean() / (np.std(d, ddof=1) / math.sqrt(len(d)))
    return float(2 * stdtr(len(d) - 1, -abs(t))), bool(mean_ci[0] <= centre <= mean_ci[1])


def mean_interval(d: np.ndarray, confidence: float) -> tuple[float, float] | None:
    """The Student t interval of the mean of log ratios d, as ratios (None under 2)."""
    if len(d) < 2:
        return None
    from scipy.special import stdtrit  # the t quantile, as scipy.stats.t.ppf without its checks
    half = float(stdtrit(len(d) - 1, 0.5 + confidence / 2) * np.std(d, ddof=1) / math.sqrt(len(d)))
    return float(math.exp(d.mean() - half)), float(math.exp(d.mean() + half))


def round_ratio(baseline: dict[int, float], variant: dict[int, float], pairs: bool = False) -> float:
    """One round's ratio from the per-turn rates of two processes that took their
    samples in turns (sample index -> rate; indices where either sample was left out are
    dropped): the exp of the median per-turn log ratio -- a median, so it does not
    depend on how many turns survived.  pairs: each took two samples in a row each turn
    (indices 2t and 2t + 1), and only the second, which follows its own member's, is read
    (a round of one sample each, a program's processes, is its own ratio)."""
    both = sorted(set(baseline) & set(variant))
    if pairs and len(both) > 1:
        both = [i for i in both if i % 2]
    if not both:
        return math.nan
    return float(math.exp(statistics.median([math.log(variant[c] / baseline[c]) for c in both])))


def compare_pair(baseline, variant, confidence: float = 0.95, method: str = "unpaired", pairs: bool = False) -> Test:
    """Compare two results' observations keyed by round.  unpaired: Mann-Whitney over the
    per-process estimates (round -> estimate); paired: signed-rank over per-round ratios
    of those estimates; turns: the observations are round -> {cycle: rate} and each
    round's ratio is round_ratio of its turns."""
    both = sorted(set(baseline) & set(variant))
    if method == "turns":
        return paired_compare([round_ratio(baseline[r], variant[r], pairs) for r in both], confidence, "turns")
    if method == "paired":
        return paired_compare([variant[r] / baseline[r] for r in both], confidence)
    return compare(list(baseline.values()), list(variant.values()), confidence)


def per_process(samples: list[Sample], fn, reduce=statistics.median, keep: int | None = None) -> dict[int, float]:
    """reduce(fn(sample)) over the used samples of each process (= the round it ran in),
    one observation per process.  Samples judged contaminated when they were measured
    (`excluded`) are left out.  With keep, only the first `keep` used samples count and a
    process with fewer is left out, so no estimate depends on how many survived.
    (statistics.median: numpy's, 12-50 times sooner on a process's few values.)"""
    groups: dict[int, list[float]] = defaultdict(list)
    for s in samples:
        if not s.excluded and (v := fn(s)) is not None and math.isfinite(v):
            groups[s.process].append(v)
    if keep:
        return {inv: float(reduce(g[:keep])) for inv, g in sorted(groups.items()) if len(g) >= keep}
    return {inv: float(reduce(g)) for inv, g in sorted(groups.items())}


def per_turn(samples: list[Sample], fn) -> dict[int, dict[int, float]]:
    """fn(sample) of every used sample, as round -> {turn (sample index): value}."""
    out: dict[int, dict[int, float]] = defaultdict(dict)
    for s in samples:
        if not s.excluded:
            v = fn(s)
            if v is not None and math.isfinite(v):
                out[s.process][s.idx] = v
    return dict(out)


def keep_count(samples: list[Sample]) -> int:
    """KEEP, or half the samples each process took, rounded up (the most any process of
    the result took), when that is fewer."""
    per: dict[int, int] = defaultdict(int)
    for s in samples:
        per[s.process] += 1
    return max(1, min(KEEP, (max(per.values(), default=1) + 1) // 2))


def geomean(values) -> float:
    v = np.asarray([x for x in values if x and x > 0 and math.isfinite(x)], float)
    return float(np.exp(np.mean(np.log(v)))) if len(v) else math.nan
