"""Where a run's wall time goes: per experiment, building, each measured process's phases
(start-up, set-up, calibration, samples, the work between samples) and waiting for the
CPU; per run, the machine's timing calibration, probe tables, the profiles behind the
explained differences, instruction counts, analysis and report.
Experiments measured two at a time (lanes) overlap, so the phases then add up to more
than the wall time.

Each harness process reports its own phases (setup_ns, calibrate_ns, around_ns and its
samples' ns); what a round's wall time holds beyond them is process start-up: exec,
loading, handing the token over, printing and reaping.
"""
from __future__ import annotations

import time
from collections import defaultdict
from contextlib import contextmanager

# In the order a process meets them; the run-level ones last.
PHASES = ("timing calibration", "build", "start-up", "set-up", "calibration", "samples", "between samples",
          "waiting for the CPU", "programs", "tables", "explain", "instructions", "analysis", "report")
MEASURING = ("start-up", "set-up", "calibration", "samples", "between samples")  # a process's own time
RUN = ""  # the key of what belongs to the run, not to one experiment


class TimeSplit:
    """Seconds per (experiment or RUN, phase), added up as the run goes; a resumed run
    starts from the stopped part's (stored)."""

    def __init__(self, stored: dict | None = None):
        self.seconds: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        for where, phases in (stored or {}).items():
            for phase, s in phases.items():
                self.seconds[where][phase] += s

    def add(self, where: str, phase: str, seconds: float) -> None:
        self.seconds[where][phase] += seconds

    @contextmanager
    def timing(self, where: str, phase: str):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.add(where, phase, time.perf_counter() - t0)

    def add_round(self, experiment: str, wall_s: float, waited_s: float, outs: list) -> None:
        """One round's processes (executor Outcomes): their reported phases, and the rest
        of the round's wall time, less the wait for the CPU, as start-up."""
        own = self.seconds[experiment]
        accounted = waited_s
        for o in outs:
            d = o.data if o.data.get("ns") else {}
            parts = {"samples": sum(d.get("ns", ())) / 1e9, "set-up": d.get("setup_ns", 0) / 1e9,
                     "calibration": d.get("calibrate_ns", 0) / 1e9, "between samples": d.get("around_ns", 0) / 1e9}
            for phase, s in parts.items():
                own[phase] += s
                accounted += s
        own["waiting for the CPU"] += waited_s
        own["start-up"] += max(0.0, wall_s - accounted)

    def to_dict(self) -> dict[str, dict[str, float]]:
        return {where: {p: round(phases[p], 3) for p in PHASES if phases.get(p)}
                for where, phases in self.seconds.items()}


def totals(split: dict[str, dict[str, float]]) -> dict[str, float]:
    """Seconds per phase over the whole run."""
    out: dict[str, float] = defaultdict(float)
    for phases in split.values():
        for p, s in phases.items():
            out[p] += s
    return {p: out[p] for p in PHASES if p in out}


def samples_share(split: dict[str, dict[str, float]]) -> float | None:
    """The samples' share of the measured processes' own time (MEASURING)."""
    t = totals(split)
    measuring = sum(t.get(p, 0.0) for p in MEASURING)
    return t.get("samples", 0.0) / measuring if measuring else None
