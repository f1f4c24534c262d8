"""One-way carry-over cannot tilt a verdict: in turns each member takes two samples in a
row, and a round's ratio reads only the second, which follows its own member's.  Scripted
samples: two equal builds, B slowed right after A's sample and A never after B's."""
from __future__ import annotations

import math
import random

import pytest

from cpulab import stats
from cpulab.measure.schedule.rounds import turn_order, turns_in_pairs


def test_every_second_sample_of_a_pair_follows_its_own_member():
    rng = random.Random(5)
    for members, samples in ((2, 50), (3, 7), (4, 2)):
        cycles = turns_in_pairs(members, samples, rng)
        order = turn_order(cycles, [f"m{i}" for i in range(members)])
        for m in range(members):
            assert len(order[m]) == samples
            assert all(prev == f"m{m}" for idx, (_, prev) in enumerate(order[m]) if idx % 2)


def one_round(cycles: list[list[int]], carry: float, rng: random.Random) -> tuple[dict, dict]:
    """Each member's rate by sample index for one round of turns: equal builds, noise of
    0.2% a sample, and B's sample right after A's `carry` slower."""
    rates: tuple[dict, dict] = ({}, {})
    for m, samples in enumerate(turn_order(cycles, ["A", "B"])):
        for idx, (_, before) in enumerate(samples):
            slowed = 1 - carry if m == 1 and before == "A" else 1.0
            rates[m][idx] = slowed * math.exp(rng.gauss(0, 0.002))
    return rates


def false_calls(carry: float, pairs: bool, trials: int = 60) -> int:
    """Of `trials` A/A comparisons of 12 rounds of 50 samples, how many intervals exclude 1."""
    rng, called = random.Random(11), 0
    for _ in range(trials):
        base, var = {}, {}
        for r in range(12):
            cycles = turns_in_pairs(2, 50, rng) if pairs else [rng.sample(range(2), 2) for _ in range(50)]
            base[r], var[r] = one_round(cycles, carry, rng)
        t = stats.compare_pair(base, var, 0.95, "turns", pairs)
        called += not t.ci[0] <= 1 <= t.ci[1]
    return called


@pytest.mark.parametrize("carry", [0.005, 0.01, 0.03])
def test_a_one_way_carry_over_tilts_single_turns_but_not_pairs(carry):
    """Single turns in a random order read B after A half the time: B's ratio sits
    carry / 2 low and equal builds are called apart (the code before pairs).  Read from
    the second samples of pairs, at most 5% of 60 plus a margin (Binomial(60, 0.05) > 7
    has probability 0.009)."""
    assert false_calls(carry, pairs=False) > 30
    assert false_calls(carry, pairs=True) <= 7


def test_a_round_of_one_sample_each_is_its_own_ratio():
    """A program's processes take one sample each (index 0): no pairs to read."""
    assert stats.round_ratio({0: 2.0}, {0: 1.0}, pairs=True) == 0.5
    assert stats.round_ratio({0: 2.0, 1: 4.0}, {0: 1.0, 1: 4.0}, pairs=True) == 1.0


def test_a_run_stored_before_pairs_still_holds_back_a_tilted_verdict():
    """Read from every sample, a comparison whose members' carry-over differs
    significantly by as much as its effect is held back (estimates.hold_for_carryover)."""
    from cpulab.estimates import hold_for_carryover
    from cpulab.model import Comparison
    c = Comparison("e", "w", {}, "A", "B", "slower", ratio=0.985, ci=[0.98, 0.99],
                   carryover={"asymmetry": {"ratio": 0.97, "ci": [0.969, 0.971]}})
    assert "carry-over" in hold_for_carryover(c)
    c.carryover = {"asymmetry": {"ratio": 0.999, "ci": [0.99, 1.01]}}
    assert hold_for_carryover(c) == ""
