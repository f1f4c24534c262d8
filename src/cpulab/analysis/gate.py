"""A CI gate's answer from one run's comparisons of `head` against `base`.

Exit status, documented for CI scripts (asv's and criterion's users keep asking what theirs
mean): 0 no regression; 1 a significant regression beyond the threshold; 2 usage or input
error (the CLI's, before this); 3 undecided within the budget, only when asked to fail on
that.  A regression is a `slower` verdict (significant after Holm, at least the policy's
minimum effect) whose estimate is at least `threshold` below the base.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from cpulab.model import Comparison, Verdict

NO_REGRESSION, REGRESSION, USAGE, UNDECIDED = 0, 1, 2, 3


@dataclass
class GateOutcome:
    status: int
    regressions: list[Comparison] = field(default_factory=list)
    undecided: list[Comparison] = field(default_factory=list)
    compared: list[Comparison] = field(default_factory=list)


def gate(comparisons: list[Comparison], threshold: float, fail_on_unclear: bool = False) -> GateOutcome:
    compared = [c for c in comparisons if c.baseline == "base" and c.variant == "head"]
    regressions = [c for c in compared if c.verdict == Verdict.SLOWER and c.ratio is not None
                   and c.ratio <= 1 - threshold]
    undecided = [c for c in compared if c.verdict in (Verdict.UNCLEAR, Verdict.INCONCLUSIVE)]
    status = REGRESSION if regressions else UNDECIDED if fail_on_unclear and undecided else NO_REGRESSION
    return GateOutcome(status, regressions, undecided, compared)
