"""Change points by PELT (Killick, Fearnhead and Eckley, JASA 2012) with a least-squares
cost: the split of a series into segments of at least `min_size` points that minimises
the sum of each segment's squared deviations from its own mean, plus `pen` a segment.
A memory curve's levels (cache_levels.py) and a result's history (history.py) are split
with it.

PELT is optimal partitioning with pruning: the best split of y[:end] ends with a segment
y[t:end] after the best split of y[:t]; a start t whose total already exceeds the best
by more than one penalty can never be the best again (the least-squares cost only grows
as a segment does), so it is dropped.  This gives the ends that ruptures' Pelt(model="l2",
jump=1) gives, computed the same way to the last bit (tests/test_pelt.py); ruptures'
import, which brought scipy.stats and scipy.spatial, took 0.8 s at the end of every run.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np


def pelt_ends(y: Sequence[float], pen: float, min_size: int) -> list[int]:
    """The ends of the best split's segments, in order (the last is len(y)); of equal
    totals, the one whose last segment starts first.  len(y) >= 2 * min_size."""
    column = np.asarray(y, dtype=float).reshape(-1, 1)
    n = len(column)
    best: dict[int, float] = {0: 0}  # the least total of y[:t] split, penalties included
    start_of: dict[int, int] = {0: 0}  # where that split's last segment starts
    starts: list[int] = []  # those not pruned
    for end in [*range(min_size, n), n]:
        if end - min_size in best:  # the latest start that leaves min_size points
            starts.append(end - min_size)
        totals = [best[t] + (float(column[t:end].var(axis=0).sum()) * (end - t) + pen) for t in starts]
        i = min(range(len(totals)), key=totals.__getitem__)
        best[end], start_of[end] = totals[i], starts[i]
        starts = [t for t, total in zip(starts, totals) if total <= totals[i] + pen]
    ends = [n]
    while start_of[ends[-1]] > 0:
        ends.append(start_of[ends[-1]])
    return ends[::-1]
