"""What the command line says over a plan: the settings its flags gave, as one value.

A setting not given keeps the plan's own value.  A count given on the command line
(processes, samples) wins over every experiment's own count too, and `--processes` alone
means a fixed count (budget 0) unless a budget is given as well.
"""
from __future__ import annotations

from dataclasses import replace

from pydantic import ValidationError

from cpulab.plan.model import PlanError, one_line
from cpulab.plan.plan import Plan
from cpulab.spec.settings import Settings


class Overrides:
    """Settings given on the command line (spec.settings's names; None: not given), and
    a baseline for every experiment."""

    def __init__(self, *, baseline: str | None = None, **settings):
        unknown = set(settings) - set(Settings.model_fields)
        if unknown:
            raise TypeError(f"not a run setting: {', '.join(sorted(unknown))}")
        self.baseline = baseline
        self.settings = {k: v for k, v in settings.items() if v is not None}

    def over(self, settings: Settings) -> Settings:
        """These settings over others (a plan's, or `cpulab time`'s defaults)."""
        values = dict(self.settings)
        if "processes" in values:
            values.setdefault("budget", 0.0)
        try:
            return settings.given(**values)
        except ValidationError as e:
            raise PlanError(f"command line: {one_line(e, values)}") from None

    def apply(self, plan: Plan) -> Plan:
        """A copy of the plan with these settings over its own; the plan given is left as it was."""
        settings = self.over(plan.settings)
        per_experiment: dict = {}  # a count on the command line wins over each experiment's own
        if "processes" in self.settings:
            per_experiment["processes"] = None
        if "samples" in self.settings:
            per_experiment["samples"] = None
        if self.baseline is not None:
            per_experiment["baseline"] = self.baseline
        return replace(plan, settings=settings, experiments=[replace(e, **per_experiment) for e in plan.experiments])
