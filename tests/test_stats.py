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


@pytest.mark.parametrize("n", [8, 20])
def test_paired_interval_covers_the_true_ratio(n):
    rng = np.random.default_rng(n)
    true = 0.97
    hits = 0
    for _ in range(1000):
        c = stats.paired_compare(true * np.exp(rng.standard_t(3, n) * 0.02))
        hits += c.ci[0] <= true <= c.ci[1]
    assert hits / 1000 >= 0.94


def test_paired_comparison_calls_a_clear_difference_and_not_noise():
    rng = np.random.default_rng(9)
    assert stats.paired_compare(0.95 * np.exp(rng.normal(0, 0.005, 12))).verdict == "slower"
    same = [stats.paired_compare(np.exp(rng.normal(0, 0.02, 12))).verdict for _ in range(400)]
    assert same.count("same") >= 0.93 * len(same)
    assert stats.paired_compare([0.5, 0.5, 0.5]).verdict == "inconclusive"  # 3 rounds: p >= 0.25


def test_compare_pair_pairs_by_round():
    base = {0: 100.0, 1: 50.0, 2: 80.0, 3: 90.0, 4: 70.0, 5: 60.0, 6: 95.0}
    var = {r: v * 0.9 for r, v in base.items()}
    c = stats.compare_pair(base, var, method="paired")
    assert c.method == "paired" and c.n == 7 and c.ratio == pytest.approx(0.9) and c.verdict == "slower"
    assert stats.compare_pair(base, var, method="unpaired").verdict == "same"  # the spread hides it


def test_contamination_rule():
    assert stats.contamination({"ns": 1000.0, "offcpu_ns": 5.0, "invol_switches": 0}) == ""
    assert stats.contamination({"ns": 1000.0, "offcpu_ns": 300.0, "invol_switches": 1}).startswith("off-cpu 30%")
    assert "without a switch" in stats.contamination({"ns": 1000.0, "offcpu_ns": 300.0, "invol_switches": 0})
    # 0.4 s with 8 ms off the CPU in 4 switches: 0.4 ms of refill is 0.1%, kept, on-CPU time counts.
    long = {"ns": 400e6, "offcpu_ns": 8e6, "invol_switches": 4}
    assert stats.contamination(long) == "" and stats.on_cpu_ns(long) == 392e6
    assert stats.contamination({**long, "invol_switches": 20}).startswith("off-cpu 2%")
    assert stats.contamination({"ns": 1000.0, "migrated": 1}).startswith("migrated")
    assert stats.contamination({"ns": 1000.0, "steal_ticks": 2}).startswith("steal")
    assert stats.contamination({"ns": 1000.0}) == ""  # an old harness: no signals, used


def test_looks_spend_alpha():
    assert stats.look_alpha(False) == stats.ALPHA
    assert stats.look_alpha(True) * stats.LOOKS == pytest.approx(stats.ALPHA)
