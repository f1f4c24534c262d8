#!/usr/bin/env python3
"""Rounds spent on comparisons whose effect is far beyond their noise: for each run of a
store, each experiment, the comparisons whose |log ratio| is at least FAR times their
interval's half-width (in logs), and how many of them ran more than ROUNDS rounds.

Issue #60 asks that such a comparison be decided within 6 rounds (its first look): one
that runs longer was held by something other than its own evidence, such as an undecided
neighbour at its point.  Nothing is measured; the store is only read.

Usage: python bench/first_decision.py STORE [--experiments float-abi,float-abi-arm]
                                      [--far 10] [--rounds 6]
"""
from __future__ import annotations

import argparse
import math
from collections import Counter

from cpulab.analysis.summary import summarise
from cpulab.store.db import Store


def far_apart(c, far: float) -> bool:
    if not (c.ratio and c.ci and c.ci[0] > 0):
        return False
    half = (math.log(c.ci[1]) - math.log(c.ci[0])) / 2
    return half > 0 and abs(math.log(c.ratio)) >= far * half


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("store")
    ap.add_argument("--experiments", default="float-abi,float-abi-arm")
    ap.add_argument("--far", type=float, default=10.0, help="|log ratio| / log half-width at least this")
    ap.add_argument("--rounds", type=int, default=6, help="count those that ran more rounds than this")
    a = ap.parse_args()
    wanted = set(a.experiments.split(","))
    store = Store(a.store)
    for run in store.runs():
        s = summarise(store, run.id)
        for exp in sorted(wanted & {c.experiment for c in s.comparisons}):
            cs = [c for c in s.comparisons if c.experiment == exp]
            far = [c for c in cs if far_apart(c, a.far)]
            held = sorted(c.rounds or 0 for c in far if (c.rounds or 0) > a.rounds)
            rounds = Counter(c.rounds for c in cs)
            print(f"run {run.id} {exp}: {len(cs)} comparisons, {len(far)} at >= {a.far:g}x their noise, "
                  f"{len(held)} of those at more than {a.rounds} rounds {held}; "
                  f"<= {a.rounds} rounds: {sum(n for r, n in rounds.items() if (r or 0) <= a.rounds)} of {len(cs)}")


if __name__ == "__main__":
    main()
