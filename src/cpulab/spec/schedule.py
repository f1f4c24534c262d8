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
    budget: float  # seconds per experiment for rounds beyond the first look (0: none)
    policy: DecisionPolicy
    baselines: dict[str, str]  # experiment -> its baseline variant
    against: int | None = None  # run --against: each variant against VARIANT@RUN
