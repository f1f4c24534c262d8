"""One result's estimate from its stored samples: the rate (a process's fastest of its
first KEEP used samples, the median of processes with an order-statistic interval), per
clock, its placements, its instructions and named counters per unit."""
from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict

import numpy as np

from cpulab import stats, workloads
from cpulab.estimates.carryover import carryover_ratios
from cpulab.machine.events import level1
from cpulab.model import Result
from cpulab.spec.record import StoredResult, StoredSample
from cpulab.workloads import UNITS


# A result's placement band: these quantiles of its placements' estimates over its median
# (the central 80%: one disturbed process does not set it).
PLACEMENT_BAND = (0.1, 0.9)


def io_bound(workload: str) -> bool:
    """Whether a workload's waits for a device are its time (programs and `time` are not kernels)."""
    return workload in workloads.registry() and workloads.get(workload).io_bound


def result_summary(r: StoredResult, samples: list[StoredSample]) -> Result:
    label, divisor, per_clock = UNITS.get(r.unit, (r.unit + "/s", 1.0, "cycles/unit"))
    io = io_bound(r.workload)
    keep = stats.keep_count(samples)

    def rate(s):  # per on-CPU second (stats.on_cpu_ns): a kept preempted sample loses others' time
        return s.work / stats.on_cpu_ns(s, io) * 1e9 / divisor

    def cycles(s):  # counters count only this thread's cycles; TSC ticks count off-CPU time too
        if s.cycles is None:
            return None
        on_cpu = 1.0 if s.timer == "perf" else stats.on_cpu_ns(s, io) / s.ns
        return s.cycles * on_cpu / s.work

    # One-sided noise: a process's estimate is the fastest of its first `keep` used samples (stats.KEEP).
    rates = stats.per_process(samples, rate, max, keep)
    cpu = list(stats.per_process(samples, cycles, min, keep).values())
    ipc = list(stats.per_process(samples, lambda s: s.instructions / s.cycles
                                 if s.instructions is not None and s.cycles else None).values())
    counted = list(stats.per_process(samples, lambda s: s.instructions / s.work
                                     if s.instructions is not None else None).values())
    notes = r.notes or {}
    ipu, source = (float(np.median(counted)), "counters") if counted else \
        (notes.get("instructions_per_unit"),
         notes.get("instructions_source", "valgrind") if notes.get("instructions_per_unit") else None)
    est = stats.estimate(list(rates.values()))
    placed = _placements(samples, rates)
    excluded = [s.excluded for s in samples if s.excluded]
    interval = rates and est.ci_coverage > 0  # one process has no interval, not [x, x]
    out = {
        "id": r.id, "experiment": r.experiment, "workload": r.workload, "variant": r.variant,
        "params": r.params, "unit": r.unit, "rate_unit": label, "per_clock_unit": per_clock,
        "status": r.status, "error": r.error, "same_as": r.same_as, "notes": r.notes,
        "emulated": bool(r.notes.get("emulated")),  # ran under qemu-user: time is the emulator's
        "median": est.median if rates else None, "ci": list(est.ci) if interval else None,
        "ci_coverage": est.ci_coverage if rates else None,
        "cv": est.cv if rates else None, "processes": len(rates),
        "excluded_samples": len(excluded),
        "excluded_processes": len({s.process for s in samples}) - len(rates),
        "excluded_why": dict(Counter(w.split(" ")[0] for w in excluded)),
        "cycles_per_unit": float(np.median(cpu)) if cpu else None,
        "cycles_per_unit_ci": list(stats.median_ci(cpu)) if len(cpu) > 1 else None,
        "ns_per_unit": (1e9 / (est.median * divisor)) if rates and est.median else None,
        "ipc": float(np.median(ipc)) if ipc else (ipu / float(np.median(cpu)) if ipu and cpu else None),
        "instructions_per_unit": ipu, "instructions_source": source,
        "instructions_why": notes.get("instructions_why"),
        "d1_misses_per_unit": notes.get("d1_misses_per_unit"), "ll_misses_per_unit": notes.get("ll_misses_per_unit"),
        "timer": samples[0].timer if samples else None,
        "core_per_tsc": float(np.median([s.core_per_tsc for s in samples if s.core_per_tsc]))
        if any(s.core_per_tsc for s in samples) else None,
        "samples": [s.work / s.ns * 1e9 / divisor for s in samples],
        "placements": len(placed), "code_offsets": sorted({s.code_offset for s in samples
                                                            if s.code_offset is not None}),
        "placement_band": [float(q) / est.median for q in np.quantile(list(placed.values()), PLACEMENT_BAND)]
        if len(placed) > 1 and est.median else None,
        "observations": rates,
        "turn_rates": stats.per_turn(samples, rate),
        "carryover_ratios": carryover_ratios(r.variant, samples),
        "cycle_observations": stats.per_process(
            samples, lambda s: s.work / s.cycles if s.timer == "wait4" and s.cycles and _on_its_cpu(s) else None),
        "memory_observations": stats.per_process(samples, lambda s: 1 / s.max_rss_kb if s.max_rss_kb else None),
        **_events_summary(samples, notes),
    }
    # real/user/sys of one repetition (one pass over a file, one block of keys ...); an
    # imported tool's samples may carry no user/sys time (None: left out)
    for key, fn in (("real_s", lambda s: s.ns * 1e-9 / s.reps),
                    ("user_s", lambda s: None if s.user_s is None else s.user_s / s.reps),
                    ("sys_s", lambda s: None if s.sys_s is None else s.sys_s / s.reps)):
        obs = list(stats.per_process(samples, fn).values())
        out[key] = statistics.median(obs) if obs else None
    return Result.from_dict(out)


def _events_summary(samples: list[StoredSample], notes: dict) -> dict:
    """A result's named counters per unit: each process's median count over work, their
    median and its interval; the level-1 top-down shares where counted."""
    names = list(dict.fromkeys(k for s in samples if s.events for k in s.events))
    obs = {name: stats.per_process(samples, lambda s, n=name: s.events[n] / s.work
                                   if s.events and s.events.get(n) is not None and s.work else None)
           for name in names}
    obs = {k: v for k, v in obs.items() if v}
    per_unit = {k: float(np.median(list(v.values()))) for k, v in obs.items()}
    return {"event_observations": obs, "events_per_unit": per_unit,
            "events_per_unit_ci": {k: list(stats.median_ci(list(v.values()))) for k, v in obs.items() if len(v) > 1},
            "topdown": level1(per_unit), "events_unavailable": notes.get("events_unavailable") or {}}


def placement_bands(results: list[Result]) -> None:
    """Where a point's variants ran in turns, each result's placement band is read against
    the other members of its rounds, so that the host's state cancels: per process, the
    median over its turns of its log rate minus the mean log rate of all k members in
    that turn, centred, and scaled by sqrt(k / (k - 1)) (the mean holds the others'
    placements too: for equal spreads this restores one placement's).  The band replaces
    the one from whole-process estimates (result_summary), which carries every slow
    process of a shared host."""
    by_point: dict[tuple, list[Result]] = defaultdict(list)
    for r in results:
        if r.turn_rates and r.placements > 1:
            by_point[(r.experiment, r.workload, r.point)].append(r)
    for members in by_point.values():
        k = len(members)
        if k < 2:
            continue
        for r in members:
            rel = []
            for round_, turns in r.turn_rates.items():
                level = [m.turn_rates.get(round_, {}) for m in members]
                common = [t for t in turns if all(t in x for x in level)]
                if common:
                    rel.append(statistics.median([math.log(turns[t]) - float(np.mean([math.log(x[t]) for x in level]))
                                                 for t in common]))
            if len(rel) > 1:
                spread = (np.asarray(rel) - np.median(rel)) * math.sqrt(k / (k - 1))
                r.placement_band = [float(math.exp(q)) for q in np.quantile(spread, PLACEMENT_BAND)]


def _placements(samples: list[StoredSample], rates: dict[int, float]) -> dict[int, float]:
    """The median estimate of the processes that ran each placement (placement -> rate)."""
    ran = {s.process: s.placement for s in samples if s.placement is not None}
    by: dict[int, list[float]] = defaultdict(list)
    for process, rate in rates.items():
        if process in ran:
            by[ran[process]].append(rate)
    return {p: statistics.median(v) for p, v in by.items()}


# A whole process counts as bound by its own CPU when its user time is at least this share
# of its wall time: only then do its (user-space) cycles count all of its time.
ON_CPU = 0.95


def _on_its_cpu(s: StoredSample) -> bool:
    """Whether a whole process ran its own code nearly all of its wall time.  Sleep, I/O,
    system calls and page faults are wall time that the cycles counted around it (user
    space only: native/launch.c) do not see: `sleep 0.2` against `sleep 0.1` in cycles is
    a comparison of their start-ups."""
    return s.user_s is not None and s.user_s >= ON_CPU * s.ns * 1e-9
