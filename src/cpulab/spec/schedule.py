"""A run's schedule: how many rounds each experiment starts with, the budget for more,
and what decides (the policy, each experiment's baseline, a stored run measured against):
made once per run (Plan.schedule, or `cpulab time`'s), read by every round and look and
by the explanations that follow them."""
from __future__ import annotations

from dataclasses import dataclass

from cpulab.spec.policy import DecisionPolicy


@dataclass(frozen=True)
class Schedule:
    first: dict[str, int]  # experiment -> rounds at the first look
    budget: dict[str, float]  # experiment -> seconds for rounds beyond its first look (0: none)
    policy: DecisionPolicy
    baselines: dict[str, str]  # experiment -> its baseline variant
    against: int | None = None  # run --against: each variant against VARIANT@RUN

    def sure_rounds(self, experiment: str, done: int) -> int:
        """The rounds a point of `experiment` that has had `done` is sure to reach, bar a
        stop, a failure or the end of its budget: its first look's; in budget mode, once a
        later look has begun, that look's (the looks end at n, 2n, 4n, ... rounds:
        rounds.measure_rounds).  At a look's end, only the look says whether more follow."""
        end = self.first[experiment]
        while self.budget.get(experiment) and done > end:
            end *= 2
        return end
