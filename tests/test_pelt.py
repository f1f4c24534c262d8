"""PELT's change points (analysis/pelt.py): the best split, found; the same ends as
ruptures' Pelt, which cpulab used before."""
import itertools
import math

import numpy as np
import pytest

from cpulab.analysis.pelt import pelt_ends


def _total(y, ends, pen):
    starts = [0, *ends[:-1]]
    return sum(float(np.var(y[a:b])) * (b - a) + pen for a, b in zip(starts, ends))


def _every_split(n, min_size):
    """Every split of n points into segments of at least min_size, as their ends."""
    for k in range(n):
        for cuts in itertools.combinations(range(min_size, n - min_size + 1), k):
            ends = [*cuts, n]
            if all(b - a >= min_size for a, b in zip([0, *cuts], ends)):
                yield ends


def test_a_staircase_is_split_at_its_steps():
    y = np.repeat([1.0, 2.0, 4.0, 3.0], [7, 5, 9, 6]) + np.tile([0.01, -0.01], 14)[:27]
    assert pelt_ends(y, 0.1, 2) == [7, 12, 21, 27]
    assert pelt_ends(np.full(12, 5.0), 0.1, 2) == [12]  # flat: one segment


@pytest.mark.parametrize("seed", range(40))
def test_the_split_is_the_best_of_all_splits(seed):
    """Against every split of a short series: none has a smaller total, and each segment
    has at least min_size points."""
    rng = np.random.default_rng(seed)
    n, min_size = int(rng.integers(4, 13)), int(rng.integers(1, 4))
    if n < 2 * min_size:
        return
    y = np.repeat(rng.normal(0, 2, 4), 4)[:n] + rng.normal(0, 0.3, n)
    pen = float(rng.uniform(0.05, 3))
    ends = pelt_ends(y, pen, min_size)
    assert ends[-1] == n and all(b - a >= min_size for a, b in zip([0, *ends[:-1]], ends))
    best = min(_total(y, e, pen) for e in _every_split(n, min_size))
    assert math.isclose(_total(y, ends, pen), best, rel_tol=1e-9, abs_tol=1e-12)


def test_the_ends_are_ruptures():
    ruptures = pytest.importorskip("ruptures", reason="ruptures (pip install ruptures)")
    rng = np.random.default_rng(7)
    for trial in range(120):  # 3,000 agreed when pelt.py was written
        n, min_size = int(rng.integers(4, 100)), int(rng.integers(1, 4))
        if n < 2 * min_size:
            continue
        y = [rng.normal(0, 1, n), np.repeat(rng.normal(0, 3, 6), math.ceil(n / 6))[:n] + rng.normal(0, 0.2, n),
             np.round(rng.normal(0, 1, n), 1), np.cumsum(rng.normal(0, 0.3, n))][trial % 4]  # the third has ties
        pen = float(rng.uniform(0.01, 5))
        theirs = ruptures.Pelt(model="l2", min_size=min_size, jump=1).fit(y.reshape(-1, 1)).predict(pen=pen)
        assert pelt_ends(y, pen, min_size) == theirs, (trial, n, min_size, pen)
