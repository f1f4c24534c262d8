"""Statistics: coverage of the median interval, Holm, and error rates on synthetic data."""
import numpy as np
import pytest

from cpulab import stats


@pytest.mark.parametrize("n", [10, 20, 50])
def test_median_ci_covers_the_true_median(n):
    rng = np.random.default_rng(n)
    true_median = np.log(2)  # of Exp(1): a skewed distribution
    hits = sum(lo <= true_median <= hi for lo, hi in (stats.median_ci(rng.exponential(size=n)) for _ in range(2000)))
    assert hits / 2000 >= 0.94


def test_median_ci_ranks_are_order_statistics():
    lo, hi = stats.median_ci(np.arange(10.0))
    assert (lo, hi) == (1.0, 8.0)  # P(1 < B <= 8) = 0.979 >= 0.95, the next pair gives 0.891
    assert stats.median_ci([5.0]) == (5.0, 5.0)


def test_holm_matches_hand_computation():
    # sorted p: 0.01*4, 0.03*3, 0.04*2 (monotone max), 0.2*1
    assert stats.holm([0.01, 0.04, 0.03, 0.2]) == pytest.approx([0.04, 0.09, 0.09, 0.2])


def _false_different_rate(sigma, trials=1000, n=10):
    rng = np.random.default_rng(7)
    bad = 0
    for _ in range(trials):
        a, b = rng.lognormal(0, sigma, n), rng.lognormal(0, sigma, n)
        bad += stats.compare(a, b).verdict != "same"
    return bad / trials


@pytest.mark.parametrize("sigma", [0.0005, 0.05])
def test_identical_distributions_are_same_at_the_advertised_rate(sigma):
    # Tiny noise: the 1% effect floor does not help, the test itself must hold alpha.
    assert _false_different_rate(sigma) <= 0.07


def test_a_real_difference_is_found():
    rng = np.random.default_rng(3)
    verdicts = [stats.compare(rng.normal(100, 1, 10), rng.normal(110, 1, 10)).verdict for _ in range(200)]
    assert verdicts.count("faster") >= 0.95 * len(verdicts)
    c = stats.compare(rng.normal(100, 1, 10), rng.normal(90, 1, 10))
    assert c.verdict == "slower" and c.ratio == pytest.approx(0.9, abs=0.02) and c.ci[1] < 1


def test_tiny_significant_difference_is_same():
    """0.3% apart with almost no noise: significant, but below layout noise."""
    rng = np.random.default_rng(4)
    c = stats.compare(rng.normal(100, 0.01, 20), rng.normal(100.3, 0.01, 20))
    assert c.p < 0.001 and c.verdict == "same"


def test_family_correction_only_raises_p():
    rng = np.random.default_rng(5)
    raw = [stats.compare(rng.normal(100, 2, 10), rng.normal(101 + i, 2, 10)) for i in range(5)]
    adj = stats.adjust_family(raw)
    assert all(a.p_adjusted >= r.p for a, r in zip(adj, raw))


def test_geomean():
    assert stats.geomean([2.0, 0.5]) == pytest.approx(1.0)
    assert stats.geomean([4.0, 1.0, None]) == pytest.approx(2.0)


def test_too_few_runs_are_inconclusive_not_same():
    c = stats.compare([100.0, 101.0, 99.0], [50.0, 51.0, 49.0])  # huge gap, 3 against 3
    assert stats.p_floor(3, 3) == pytest.approx(0.1) and c.verdict == "inconclusive"
    # 5 against 5 can reach 0.0079 alone, but not after Holm over 7 comparisons.
    fam = stats.adjust_family([stats.compare(np.arange(5.0) + 100, np.arange(5.0) + 50)] * 7)
    assert all(x.verdict == "inconclusive" for x in fam)
    assert stats.compare(np.arange(5.0) + 100, np.arange(5.0) + 50).verdict == "slower"
