"""Carry-over between the members of a group in turns: what one member's sample leaves
for the next, per process, per result, and for a comparison."""
from __future__ import annotations

import math
import statistics
from collections import defaultdict

from cpulab import stats
from cpulab.model import Comparison, Result
from cpulab.spec.record import StoredSample


def carryover_ratios(variant: str, samples: list[StoredSample]) -> list[float]:
    """Per process of one stored result of `variant` that ran in turns: the median rate of
    its samples that ran right after another member's over that of its samples right after
    its own previous one (what a member leaves in the caches and predictors for the next)."""
    split: dict[int, tuple[list, list]] = defaultdict(lambda: ([], []))
    for s in samples:
        if s.follows and not s.excluded:
            split[s.process][s.follows == variant].append(s.work / stats.on_cpu_ns(s))
    return [statistics.median(other) / statistics.median(own) for other, own in split.values() if other and own]


def carryover(ratios: list[float], confidence: float = 0.95) -> dict | None:
    """The carry-over contrast of a run from its processes' carryover_ratios: the
    Hodges-Lehmann ratio with its signed-rank interval (1: none); None without turns."""
    if len(ratios) < 2:
        return None
    t = stats.paired_compare(ratios, confidence)
    return {"ratio": t.ratio, "ci": list(t.ci), "p": t.p, "processes": t.n}


def comparison_carryover(base: Result, var: Result, confidence: float) -> dict | None:
    """Each member's carry-over and their asymmetry (model.Comparison.carryover): the
    asymmetry's interval adds the two log half-widths in quadrature.  None unless both
    members have at least two processes with samples after each kind of turn."""
    sides = {"baseline": carryover(base.carryover_ratios, confidence),
             "variant": carryover(var.carryover_ratios, confidence)}
    if None in sides.values():
        return None
    b, v = sides["baseline"], sides["variant"]
    centre = math.log(v["ratio"] / b["ratio"])
    half = math.hypot(*(math.log(s["ci"][1] / s["ci"][0]) / 2 for s in (b, v)))
    return {**sides, "asymmetry": {"ratio": math.exp(centre), "ci": [math.exp(centre - half), math.exp(centre + half)]}}


def hold_for_carryover(row: Comparison) -> str:
    """Why a decided comparison cannot be told from its order of turns, or "": the
    members' carry-over differs significantly (one is slowed more than the other right
    after the other: up to that much of the measured ratio is the order, not the code)
    and by at least the effect."""
    asym = (row.carryover or {}).get("asymmetry")
    if not asym or asym["ci"][0] <= 1 <= asym["ci"][1] or abs(math.log(asym["ratio"])) < abs(math.log(row.ratio)):
        return ""
    return (f"carry-over: {row.variant} runs {100 * (asym['ratio'] - 1):+.1f}% "
            f"[{100 * (asym['ci'][0] - 1):+.1f}, {100 * (asym['ci'][1] - 1):+.1f}] against {row.baseline} right "
            f"after the other member, as much as the effect ({100 * (row.ratio - 1):+.1f}%): the order of the "
            f"turns, not the code, may make the difference")
