"""A CI gate's answer from one run's comparisons of `head` against `base`.

Exit status, documented for CI scripts (asv's and criterion's users keep asking what theirs
mean): 0 no regression; 1 a significant regression beyond the threshold; 2 usage or input
error (the CLI's, before this); 3 undecided within the budget, only when asked to fail on
that.  A regression is a `slower` verdict (significant after Holm, at least the policy's
minimum effect) whose estimate is at least `threshold` below the base; by peak memory
(metric "memory") a `larger` one, at least `threshold` more memory (the ratio is of
1 / peak memory, as of rates).

By instruction count (metric "instructions", for runners too noisy for time) a regression
is head executing at least `threshold` more instructions per unit than base, counted
exactly under valgrind (measure/instructions.py); a comparison without both counts is
undecided.  The count is a proxy: the same instructions can take more time (placement,
alignment) and fewer can take the same (memory-bound), which the comparison's witness
words say where the time's verdict disagrees.

By a named event (any other metric: `branch-misses`, `page-faults`, `task-clock`, counted
around each sample, --events) a regression is a `larger` verdict for that event at least
`threshold` above base; one not counted on both sides, or unclear, is undecided.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from cpulab.model import Comparison, Verdict

NO_REGRESSION, REGRESSION, USAGE, UNDECIDED = 0, 1, 2, 3
# The instruction metric's default threshold: counts repeat to 0.1% (REPEATABLE), and a
# change this size in the work executed is worth a look even when time cannot see it.
INSTRUCTION_THRESHOLD = 0.005


@dataclass
class GateOutcome:
    status: int
    regressions: list[Comparison] = field(default_factory=list)
    undecided: list[Comparison] = field(default_factory=list)
    compared: list[Comparison] = field(default_factory=list)


def gate(comparisons: list[Comparison], threshold: float, fail_on_unclear: bool = False,
         metric: str = "time") -> GateOutcome:
    compared = [c for c in comparisons if c.baseline == "base" and c.variant == "head"]
    if metric == "instructions":
        regressions = [c for c in compared if c.instruction_ratio is not None and c.instruction_ratio >= 1 + threshold]
        undecided = [c for c in compared if c.instruction_ratio is None]
    elif metric not in ("time", "memory"):  # a named event
        regressions = [c for c in compared if (e := c.events.get(metric)) and e["verdict"] == "larger"
                       and e["ratio"] >= 1 + threshold]
        undecided = [c for c in compared if c.events.get(metric, {}).get("verdict", "unclear")
                     in ("unclear", "inconclusive")]
    else:  # time, or peak memory (its own words for the same test: larger is slower's)
        regressions = [c for c in compared if c.verdict in (Verdict.SLOWER, Verdict.LARGER) and c.ratio is not None
                       and c.ratio <= 1 - threshold]
        undecided = [c for c in compared if c.verdict in (Verdict.UNCLEAR, Verdict.INCONCLUSIVE)]
    status = REGRESSION if regressions else UNDECIDED if fail_on_unclear and undecided else NO_REGRESSION
    return GateOutcome(status, regressions, undecided, compared)
