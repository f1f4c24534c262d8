"""What the command line says over a plan: `cpulab run`'s settings flags as one typed value.

A flag left out (None) keeps the plan's own value.  A count given on the command line
(processes, samples) wins over every experiment's own count too, and `--processes` alone
means a fixed count (budget 0) unless a budget is given as well.
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace

from cpulab.plan.plan import Plan


@dataclass(frozen=True, kw_only=True)
class Overrides:
    processes: int | None = None
    samples: int | None = None
    min_sample_time: float | None = None
    grid: str | None = None
    timer: str | None = None
    cold: bool | None = None
    budget: float | None = None
    precision: float | None = None
    method: str | None = None
    against: int | None = None
    baseline: str | None = None  # every experiment's baseline
    instructions: bool | None = None  # count instructions per unit for every experiment
    metric: str | None = None  # what the verdicts are read from (policy.METRICS)

    def given(self) -> list[str]:
        """The settings given, by name."""
        return [f.name for f in fields(self) if getattr(self, f.name) is not None]

    def apply(self, plan: Plan) -> Plan:
        """A copy of the plan with these settings over its own (not validated: validate the
        result); the plan given is left as it was."""
        budget = 0.0 if self.processes is not None and self.budget is None else self.budget
        settings = {"processes": self.processes, "samples": self.samples, "min_sample_time": self.min_sample_time,
                    "grid": self.grid, "timer": self.timer, "cold": self.cold, "budget": budget,
                    "precision": self.precision, "method": self.method, "against": self.against,
                    "instructions": self.instructions, "metric": self.metric}
        per_experiment: dict = {}  # a count on the command line wins over each experiment's own
        if self.processes is not None:
            per_experiment["processes"] = None
        if self.samples is not None:
            per_experiment["samples"] = None
        if self.baseline is not None:
            per_experiment["baseline"] = self.baseline
        return replace(plan, **{k: v for k, v in settings.items() if v is not None},
                       experiments=[replace(e, **per_experiment) for e in plan.experiments])
