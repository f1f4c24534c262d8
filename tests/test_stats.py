"""Statistics: coverage of the median interval, Holm, and error rates on synthetic data."""
import itertools
import math
from dataclasses import replace

import numpy as np
import pytest
from scipy import stats as sps

from cpulab.spec import policy, signals
from cpulab import stats
from cpulab.spec.policy import DecisionPolicy
from cpulab.spec.record import StoredSample


@pytest.mark.parametrize("n", [10, 20, 50])
def test_median_ci_covers_the_true_median(n):
    rng = np.random.default_rng(n)
    true_median = np.log(2)  # of Exp(1): a skewed distribution
    hits = sum(lo <= true_median <= hi for lo, hi in (stats.median_ci(rng.exponential(size=n)) for _ in range(2000)))
    assert hits / 2000 >= 0.94


def test_the_binomial_and_normal_computed_here_are_scipys():
    """The median's ranks (Binomial(n, 1/2), exact) and the signed rank's normal quantile
    are computed without scipy.stats (0.8 s of every compare and report); they agree
    with it."""
    from scipy import stats as scipy
    for n in (2, 5, 6, 13, 40, 113, 600):
        stats._median_ci_rank.cache_clear()
        rank, coverage = stats._median_ci_rank(n, 0.95)
        assert coverage == pytest.approx(scipy.binom.cdf(n - 1 - rank, n, 0.5) - scipy.binom.cdf(rank, n, 0.5),
                                         abs=1e-12)
        assert rank == 0 or scipy.binom.cdf(n - 2 - rank, n, 0.5) - scipy.binom.cdf(rank + 1, n, 0.5) < 0.95
    for q in (0.975, 0.9975, 0.99992):
        assert stats.NORMAL.inv_cdf(q) == pytest.approx(scipy.norm.ppf(q), rel=1e-12)


def test_mann_whitney_computed_here_is_scipys():
    """The exact null by brute force over every placement; the p-value scipy's, exact and
    normal, with ties and without, on sides of 2 to 30."""
    for m, n in ((1, 1), (2, 5), (4, 4), (3, 7)):
        brute = np.zeros(m * n + 1)
        for chosen in itertools.combinations(range(m + n), m):
            brute[sum(at - i for i, at in enumerate(chosen))] += 1  # the n's below each of the m
        assert np.allclose(stats.rank_sum_null(m, n), brute / math.comb(m + n, m), rtol=1e-14, atol=0)
    rng = np.random.default_rng(5)
    for trial in range(600):
        n1, n2 = rng.integers(2, 31, 2)
        a, b = ((rng.integers(0, 6, n1), rng.integers(0, 6, n2)) if trial % 3 == 0  # ties
                else (rng.lognormal(0, 0.05, n1), rng.lognormal(0.02 * (trial % 3), 0.05, n2)))
        if np.ptp(np.concatenate([a, b])) > 0:
            want = sps.mannwhitneyu(b, a, alternative="two-sided").pvalue
            assert stats.mann_whitney_p(a, b) == pytest.approx(want, rel=1e-12), (a, b)


def test_median_ci_ranks_are_order_statistics():
    lo, hi = stats.median_ci(np.arange(10.0))
    assert (lo, hi) == (1.0, 8.0)  # P(1 < B <= 8) = 0.979 >= 0.95, the next pair gives 0.891
    assert stats.median_ci([5.0]) == (5.0, 5.0)


@pytest.mark.parametrize("width", [1, 2, 3, 10, 11])
def test_row_medians_are_numpys(width):
    x = np.random.default_rng(width).lognormal(0, 1, (300, width))
    assert np.array_equal(stats.row_medians(x), np.median(x, axis=1))


def test_holm_matches_hand_computation():
    # sorted p: 0.01*4, 0.03*3, 0.04*2 (monotone max), 0.2*1
    assert stats.holm([0.01, 0.04, 0.03, 0.2]) == pytest.approx([0.04, 0.09, 0.09, 0.2])


def decide(t, policy=DecisionPolicy()) -> str:
    return policy.decide([t])[0][1]


NO_FLOOR = DecisionPolicy(min_effect=0.0)  # the test statistic alone, no 1% effect floor


# Enough trials that the band below holds a true 5% rate and fails a true 7% one.
TRIALS = 4500


def null_rejections(test, trials=TRIALS, seed=7) -> tuple[int, int]:
    """How often a comparison function rejects at 0.05 on identical distributions: the raw
    count of p < 0.05, and of faster/slower verdicts with no effect floor."""
    rng = np.random.default_rng(seed)
    raw = called = 0
    for _ in range(trials):
        t = test(rng)
        raw += t.p < 0.05
        called += decide(t, NO_FLOOR) in ("faster", "slower")
    return raw, called


def binomial_band(trials: int, p: float = 0.05) -> tuple[float, float]:
    """Rejections a test of level p gives in `trials`: at most the 99.9% quantile of
    Binomial(trials, p), and at least the 0.1% quantile at p / 2 (an exact test on a
    dozen rounds is conservative: its real size is about 4%, not 5%)."""
    return sps.binom.ppf(0.001, trials, p / 2), sps.binom.ppf(0.999, trials, p)


def binomial_ok(count: int, trials: int, p: float = 0.05) -> bool:
    lo, hi = binomial_band(trials, p)
    return lo <= count <= hi


def test_the_alpha_band_fails_a_true_7_percent_rate():
    """The band above passes a 5% test 99.9% of the time and a 7% one under 1% of the
    time (a central 99.9% band at 600 trials passed a 9% test half the time)."""
    _, hi = binomial_band(TRIALS)
    assert sps.binom.cdf(hi, TRIALS, 0.07) < 0.01


def test_unpaired_holds_alpha_on_identical_distributions():
    # No effect floor: the test itself must hold alpha, and its raw p must be uniform-ish.
    # Its p is of ranks: the same draws at any spread give the same p, so one spread serves.
    raw, called = null_rejections(lambda rng: stats.compare(rng.lognormal(0, 0.05, 10), rng.lognormal(0, 0.05, 10)))
    assert binomial_ok(raw, TRIALS) and called <= raw


def test_turns_hold_alpha_when_a_slowdown_hits_both_sides():
    """Rounds in turns: each round's processes share a slowdown (the host's state) and a
    layout each; per turn the samples share the moment's noise.  Under no difference
    the raw p of the per-round ratios is uniform."""
    def one(rng, effect=1.0):
        host = rng.uniform(0.6, 1.0, (12, 1))  # 15-45% slow processes, shared by the round
        layout = rng.normal(1, 0.003, (2, 12, 1))  # a layout each
        moment = rng.lognormal(0, 0.1, (12, 20))  # shared by the two samples of a cycle
        base, var = 100 * host * moment * layout * rng.lognormal(0, 0.005, (2, 12, 20)) * [[[1.0]], [[effect]]]
        return stats.compare_pair(*({r: dict(enumerate(row)) for r, row in enumerate(side)} for side in (base, var)),
                                  method="turns")
    raw, _ = null_rejections(one)
    assert binomial_ok(raw, TRIALS)
    rng = np.random.default_rng(11)
    found = [decide(one(rng, 0.98), DecisionPolicy(alpha=policy.ALPHA / 6)) for _ in range(50)]  # a second look's level
    assert found.count("slower") >= 45  # 2% with 15-45% process noise shared by the pair


def test_the_alpha_check_fails_a_broken_statistic():
    """The check above can fail: a test whose p is too small (here: p of n=10 computed as
    if each of 20 samples per process were independent) rejects far more than 5% (about
    63%: 95 of 150 trials where the band ends at 17, so 150 trials show it beyond doubt)."""
    def broken(rng):
        a, b = rng.lognormal(0, 0.05, (10, 1)) * rng.lognormal(0, 0.01, (10, 20)), \
            rng.lognormal(0, 0.05, (10, 1)) * rng.lognormal(0, 0.01, (10, 20))
        return stats.compare(a.ravel(), b.ravel())
    raw, _ = null_rejections(broken, trials=150)
    assert not binomial_ok(raw, 150)


def test_a_real_difference_is_found():
    rng = np.random.default_rng(3)
    verdicts = [decide(stats.compare(rng.normal(100, 1, 10), rng.normal(110, 1, 10))) for _ in range(200)]
    assert verdicts.count("faster") >= 0.95 * len(verdicts)
    c = stats.compare(rng.normal(100, 1, 10), rng.normal(90, 1, 10))
    assert decide(c) == "slower" and c.ratio == pytest.approx(0.9, abs=0.02) and c.ci[1] < 1


def test_verdict_words():
    """same only when the interval lies within +-precision; unclear when neither that
    narrow nor significant; a significant change below min_effect is not called."""
    p = DecisionPolicy()
    assert p.verdict(stats.Test(1.003, (1.001, 1.005), 1e-6, 1e-9), 1e-6) == "same"
    assert p.verdict(stats.Test(1.003, (0.97, 1.04), 0.6, 1e-9), 0.6) == "unclear"
    assert p.verdict(stats.Test(1.005, (1.002, 1.02), 1e-4, 1e-9), 1e-4) == "unclear"  # below 1%, not narrow
    assert p.verdict(stats.Test(1.05, (1.03, 1.07), 1e-4, 1e-9), 1e-4) == "faster"
    assert p.verdict(stats.Test(0.5, (0.4, 0.6), 0.1, 0.1), 0.1) == "inconclusive"
    assert "97.5%, 99.2%, 99.6% at the first three" in DecisionPolicy(budgeted=True).legend()
    assert "95% intervals" in DecisionPolicy().legend()


def test_family_correction_only_raises_p():
    rng = np.random.default_rng(5)
    raw = [stats.compare(rng.normal(100, 2, 10), rng.normal(101 + i, 2, 10)) for i in range(5)]
    assert all(pa >= t.p for t, (pa, _, _) in zip(raw, DecisionPolicy().decide(raw)))


def test_geomean():
    assert stats.geomean([2.0, 0.5]) == pytest.approx(1.0)
    assert stats.geomean([4.0, 1.0, None]) == pytest.approx(2.0)


def test_too_few_runs_are_inconclusive_not_same():
    c = stats.compare([100.0, 101.0, 99.0], [50.0, 51.0, 49.0])  # huge gap, 3 against 3
    assert stats.p_floor(3, 3) == pytest.approx(0.1) and decide(c) == "inconclusive"
    # 5 against 5 can reach 0.0079 alone, but not after Holm over 7 comparisons.
    fam = DecisionPolicy().decide([stats.compare(np.arange(5.0) + 100, np.arange(5.0) + 50)] * 7)
    assert all(v == "inconclusive" for _, v, _ in fam)
    assert decide(stats.compare(np.arange(5.0) + 100, np.arange(5.0) + 50)) == "slower"


def test_small_sample_interval_says_its_real_coverage():
    # The full range of n observations misses the median when all fall on one side.
    assert stats.median_ci_coverage(2) == pytest.approx(0.5)
    assert stats.median_ci_coverage(5) == pytest.approx(1 - 2 / 32)
    assert stats.median_ci_coverage(10) >= 0.95
    assert stats.estimate([1.0, 2.0, 3.0]).ci_coverage == pytest.approx(0.75)


def test_signed_rank_null_is_a_distribution_and_matches_scipy():
    from scipy import stats as sps
    for n in (1, 5, 12):
        d = stats.signed_rank_null(n)
        assert d.sum() == pytest.approx(1.0) and len(d) == n * (n + 1) // 2 + 1
        assert d == pytest.approx(d[::-1])  # symmetric about n(n+1)/4
    rng = np.random.default_rng(8)
    for n in (6, 15, 30):
        x = rng.normal(0.01, 0.02, n)
        assert stats.paired_compare(np.exp(x)).p == pytest.approx(sps.wilcoxon(x, method="exact").pvalue)


def test_midranks_and_the_t_test_are_scipys():
    """The ranks with ties, the t-test's p and its interval, computed without scipy.stats'
    per-call cost, are scipy.stats' numbers."""
    rng = np.random.default_rng(3)
    for n in (1, 2, 7, 40):
        x = rng.integers(0, 5, n).astype(float)  # ties
        assert np.array_equal(stats.midranks(x), sps.rankdata(x))
    for n in (5, 9, 60):
        d = rng.normal(0.004, 0.01, n)
        lo, hi = stats.mean_interval(d, 0.975)
        half = sps.t.ppf(0.9875, n - 1) * d.std(ddof=1) / math.sqrt(n)
        assert (math.log(lo), math.log(hi)) == pytest.approx((d.mean() - half, d.mean() + half), rel=1e-9)
        assert stats.mean_test(d, 1.0, (lo, hi))[0] == pytest.approx(sps.ttest_1samp(d, 0.0).pvalue, rel=1e-9)


@pytest.mark.parametrize("n", [8, 20])
def test_paired_interval_covers_the_true_ratio(n):
    rng = np.random.default_rng(n)
    true = 0.97
    hits = 0
    for _ in range(1000):
        c = stats.paired_compare(true * np.exp(rng.standard_t(3, n) * 0.02))
        hits += c.ci[0] <= true <= c.ci[1]
    assert hits / 1000 >= 0.94


def test_paired_comparison_calls_a_clear_difference_and_holds_alpha():
    rng = np.random.default_rng(9)
    assert decide(stats.paired_compare(0.95 * np.exp(rng.normal(0, 0.005, 12)))) == "slower"
    raw, called = null_rejections(lambda rng: stats.paired_compare(np.exp(rng.normal(0, 0.02, 12))))
    assert binomial_ok(raw, TRIALS) and called <= raw
    assert decide(stats.paired_compare([0.5, 0.5, 0.5])) == "inconclusive"  # 3 rounds: p >= 0.25


def test_compare_pair_pairs_by_round():
    base = {0: 100.0, 1: 50.0, 2: 80.0, 3: 90.0, 4: 70.0, 5: 60.0, 6: 95.0}
    var = {r: v * 0.9 for r, v in base.items()}
    c = stats.compare_pair(base, var, method="paired")
    assert c.method == "paired" and c.n == 7 and c.ratio == pytest.approx(0.9) and decide(c) == "slower"
    assert decide(stats.compare_pair(base, var, method="unpaired")) == "unclear"  # the spread hides it


def test_round_ratio_is_a_median_over_common_cycles():
    assert stats.round_ratio({0: 1.0, 1: 2.0, 2: 4.0}, {0: 1.1, 2: 4.4, 3: 9.0}) == pytest.approx(1.1)
    assert np.isnan(stats.round_ratio({0: 1.0}, {1: 1.0}))


def test_process_estimate_does_not_depend_on_how_many_samples_survived():
    """The fastest of the first KEEP used samples: two processes drawn from one
    distribution, one keeping 20 samples and one 6, estimate alike on average."""
    rng = np.random.default_rng(12)
    diffs = []
    for _ in range(300):
        full = [StoredSample(idx=i, work=x) for i, x in enumerate(rng.lognormal(0, 0.1, 20))]
        kept = [replace(s, excluded="off-cpu" if i % 3 else "") for i, s in enumerate(full)][:18]  # 6 used
        est = [stats.per_process(x, lambda s: s.work, np.max, stats.KEEP)[0] for x in (full, kept)]
        diffs.append(np.log(est[0] / est[1]))
    assert abs(np.mean(diffs)) < 3 * np.std(diffs) / np.sqrt(len(diffs))


def test_contamination_rule():
    assert signals.contamination({"ns": 1000.0, "offcpu_ns": 5.0, "invol_switches": 0}) == ""
    assert signals.contamination({"ns": 1000.0, "offcpu_ns": 300.0, "invol_switches": 1}).startswith("off-cpu 30%")
    assert "without a switch" in signals.contamination({"ns": 1000.0, "offcpu_ns": 300.0, "invol_switches": 0})
    # 0.4 s with 8 ms off the CPU in 4 switches: 0.4 ms of refill is 0.1%, kept, on-CPU time counts.
    long = {"ns": 400e6, "offcpu_ns": 8e6, "invol_switches": 4}
    assert signals.contamination(long) == "" and stats.on_cpu_ns(StoredSample(ns=400e6, offcpu_ns=8e6)) == 392e6
    assert signals.contamination({**long, "invol_switches": 20}).startswith("off-cpu 2%")
    assert signals.contamination({"ns": 1000.0, "migrated": 1}).startswith("migrated")
    assert signals.contamination({"ns": 1000.0, "steal_ticks": 2}).startswith("steal")
    assert signals.contamination({"ns": 1000.0}) == ""  # an old harness: no signals, used


def test_looks_spend_alpha():
    """One look tests at alpha; budget mode at alpha / (k(k+1)) at look k, whose sum over
    any number of looks stays below alpha; a look cut short counts as the one it was
    heading for; a run stored before looks were recorded keeps its three at alpha / 3."""
    assert DecisionPolicy().level(40, 5) == policy.ALPHA
    p = DecisionPolicy.of_settings(60, policy.PRECISION, "turns")
    assert [p.look(n, 5) for n in (3, 5, 6, 10, 11, 20, 40)] == [1, 1, 2, 2, 3, 3, 4]
    assert p.level(5, 5) == pytest.approx(policy.ALPHA / 2) and p.level(7, 5) == pytest.approx(policy.ALPHA / 6)
    for looks in (1, 3, 10, 30):
        spent = sum(p.level(5 * 2 ** (k - 1), 5) for k in range(1, looks + 1))
        assert spent == pytest.approx(policy.ALPHA * (1 - 1 / (looks + 1)))
    assert p.level(12, None) == pytest.approx(policy.ALPHA / policy.LEGACY_LOOKS)


def test_few_rounds_far_apart_are_read_by_the_t_test():
    """Five rounds cannot make a signed rank significant in a family of 27 (its p is at
    least 2 / 2^5), but an effect 50x the rounds' spread is decided there by the t-test of
    the mean; where the rounds could reach it, the signed rank is read; a round far off by
    itself widens the mean's interval instead of moving a verdict: no difference stays
    undecided; and a t-test whose mean its robust centre does not back is not read."""
    rng = np.random.default_rng(4)
    p = DecisionPolicy.of_settings(60, policy.PRECISION, "paired")
    level = p.level(5, p.first_look(27))
    tests = [stats.paired_compare(np.exp(rng.normal(math.log(0.5), 0.01, 5)), 1 - level) for _ in range(27)]
    decided = p.decide(tests, [0.0] * 27, [level] * 27)
    assert all(v == "slower" for _, v, _ in decided)
    assert all(t.ci[0] < 0.5 < t.ci[1] for _, v, t in decided if v == "slower")
    assert all(t.p_floor * 27 >= level for t in tests)  # the signed rank alone: inconclusive
    wide = stats.paired_compare(np.exp(rng.normal(math.log(0.5), 0.01, 20)), 1 - level)
    assert p.tested(wide, level, 27) is wide  # 20 rounds: the signed rank reaches it
    outlier = stats.paired_compare([1.0, 1.001, 0.999, 1.0005, 0.7], 1 - level)
    assert p.decide([outlier], [0.0], [level])[0][1] == "unclear"
    unbacked = replace(outlier, agrees=False)
    assert p.tested(unbacked, level, 27) is unbacked


def test_a_first_look_that_lost_a_round_is_still_read_by_the_t_test():
    """A comparison whose first look kept 4 of its 5 rounds (the fifth's samples all
    preempted) is read by the t-test as the others are: an effect 50x the rounds' spread
    in a family of 81 is decided there, not left inconclusive for the next look.  Three
    rounds are not read by it."""
    rng = np.random.default_rng(81)
    p = DecisionPolicy.of_settings(60, policy.PRECISION, "paired")
    assert p.first_look(81) == stats.MEAN_ROUNDS + 1
    level = p.level(5, 5)
    tests = [stats.paired_compare(np.exp(rng.normal(math.log(2.0), 0.01, 5 - (i % 2))), 1 - level) for i in range(81)]
    assert {t.n for t in tests} == {4, 5}
    assert all(v == "faster" for _, v, _ in p.decide(tests, [0.0] * 81, [level] * 81))
    three = stats.paired_compare(np.exp(rng.normal(math.log(2.0), 0.01, 3)), 1 - level)
    assert three.p_mean is None and p.decide([three] * 81, [0.0] * 81, [level] * 81)[0][1] == "inconclusive"


def test_io_bound_samples_count_their_waits():
    cold = {"ns": 1000.0, "offcpu_ns": 600.0, "invol_switches": 0}
    assert signals.contamination(cold, io_bound=True) == ""
    assert stats.on_cpu_ns(StoredSample(ns=1000.0, offcpu_ns=600.0), io_bound=True) == 1000.0
    assert signals.contamination({**cold, "invol_switches": 2}, io_bound=True).startswith("off-cpu")


def test_the_interval_at_the_look_that_stopped_covers_its_level():
    """The look procedure (budget mode: n, 2n, 4n, ... rounds, each comparison stopped at
    the first look that decides it) simulated with the project's test and verdicts
    (bench/look_coverage.py): the interval shown covers the true ratio at least 1 - alpha
    of the time, A/A and with effects, pooled near the first look's printed level, and an
    A/A comparison is called faster or slower at most alpha of the time."""
    import importlib.util
    from pathlib import Path
    spec = importlib.util.spec_from_file_location("look_coverage", Path(__file__).parents[1] / "bench" / "look_coverage.py")
    sim = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sim)
    rng = np.random.default_rng(1)
    covered = n = false = aa = 0
    for true, sigma in ((1.0, 0.005), (1.0, 0.01), (0.99, 0.005), (0.99, 0.01)):
        by_look = sim.simulate(true, sigma, 1, 400, rng, looks=4)
        c, k, f = (sum(v[j] for v in by_look.values()) for j in range(3))
        assert c / k >= 1 - policy.ALPHA - 0.015, (true, sigma, by_look)
        covered, n = covered + c, n + k
        if true == 1.0:
            false, aa = false + f, aa + k
    assert covered / n >= 1 - policy.ALPHA / 2 - 0.015, covered / n
    assert sps.binomtest(false, aa, policy.ALPHA).pvalue > 0.001 or false / aa < policy.ALPHA, (false, aa)