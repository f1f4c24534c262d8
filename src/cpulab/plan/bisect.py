"""`cpulab bisect GOOD BAD`: the first commit whose build of a plan's programs is slower
than GOOD's, found by halving the commits between them.

Each step is one `cpulab ci GOOD..CANDIDATE` run (plan/ci.py: both builds in the same
rounds, in turns, under the plan's looks and budget), so every verdict is against GOOD
measured beside it, never against a stored run.  BAD is measured first: if it is not a
significant regression there is nothing to find.  A candidate that fails to build is
skipped (and named); one whose comparison stays undecided within the budget stops the
search and is reported, never guessed.  The search itself is `Bisection`, which knows
nothing of measuring: it is told each candidate's outcome and says which to try next.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from cpulab.plan.ci import _git, commit_of
from cpulab.plan.plan import PlanError

BAD, GOOD, SKIP, UNDECIDED = "regression", "no regression", "skipped", "undecided"


def commits_between(repo: Path, good: str, bad: str) -> list[str]:
    """The commits after GOOD up to BAD, oldest first, along the first-parent line from
    BAD (the order in which a regression can appear on one branch)."""
    g, b = commit_of(repo, good), commit_of(repo, bad)
    p = _git(repo, "rev-list", "--first-parent", "--ancestry-path", "--reverse", f"{g}..{b}", text=True)
    if p.returncode != 0 or not p.stdout.split():
        raise PlanError(f"{repo}: no commits from {good} to {bad} ({good} must be an ancestor of {bad})")
    return p.stdout.split()


def subject(repo: Path, commit: str) -> str:
    return _git(repo, "log", "-1", "--format=%s", commit, text=True).stdout.strip()


@dataclass
class Bisection:
    """Binary search over `commits` (oldest first, the last one BAD) for the first one
    with outcome BAD, knowing GOOD (before them all) has none.  `next()` is the commit to
    measure, None when done; `record(commit, outcome)` tells the outcome."""
    commits: list[str]
    outcomes: dict[str, str] = field(default_factory=dict)

    def _bounds(self) -> tuple[int, int]:
        """(last known good index, first known bad index); -1 is GOOD, len() is unknown."""
        bad = min((i for i, c in enumerate(self.commits) if self.outcomes.get(c) == BAD), default=len(self.commits))
        good = max((i for i, c in enumerate(self.commits[:bad]) if self.outcomes.get(c) == GOOD), default=-1)
        return good, bad

    def next(self) -> str | None:
        if UNDECIDED in self.outcomes.values() or self.outcomes.get(self.commits[-1]) == SKIP:
            return None  # reported, never guessed; or BAD itself did not build
        last = self.commits[-1]
        if last not in self.outcomes:  # BAD first: is there anything to find?
            return last
        if self.outcomes[last] != BAD and self._bounds()[1] == len(self.commits):
            return None
        good, bad = self._bounds()
        between = [i for i in range(good + 1, bad) if self.commits[i] not in self.outcomes]
        if not between:
            return None
        mid = (good + bad) // 2  # the untried commit nearest the middle
        return self.commits[min(between, key=lambda i: (abs(i - mid), i))]

    def record(self, commit: str, outcome: str) -> None:
        self.outcomes[commit] = outcome

    def first_bad(self) -> str | None:
        """The first bad commit, once every commit between the last good one and it has
        been skipped or none is left (None: no regression, or undecided)."""
        good, bad = self._bounds()
        if bad == len(self.commits) or self.next() is not None or UNDECIDED in self.outcomes.values():
            return None
        return self.commits[bad]

    def skipped_before(self, commit: str) -> list[str]:
        """Skipped commits between the last good one and `commit`: any of them may be the
        first bad one, which the search cannot tell."""
        good, bad = self._bounds()
        return [c for c in self.commits[good + 1:bad] if self.outcomes.get(c) == SKIP]
