"""From one result's stored samples to its estimate, and from a point's results to their
comparisons: the numbers the runner's looks, the summary and the machines table share.

A process's estimate is the fastest of its first KEEP used samples (noise only slows a
run down); a result's estimate is the median of its processes with an order-statistic
interval.  compare_results tests every variant against its experiment's baseline at each
point under one policy.DecisionPolicy; geomeans combine a variant's points.
"""
from __future__ import annotations

import hashlib
import math
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

from cpulab import stats, workloads
from cpulab.machine.events import level1
from cpulab.model import Comparison, Geomean, Result, Status, Verdict
from cpulab.spec.policy import DecisionPolicy
from cpulab.spec.record import StoredResult, StoredSample
from cpulab.workloads import UNITS


# A result's placement band: these quantiles of its placements' estimates over its median
# (the central 80%: one disturbed process does not set it).
PLACEMENT_BAND = (0.1, 0.9)


def io_bound(workload: str) -> bool:
    """Whether a workload's waits for a device are its time (programs and `time` are not kernels)."""
    return workload in workloads.registry() and workloads.get(workload).io_bound


# Which code made a kept estimate (store: estimates): the bytes of this file and of
# stats.py, so that a change to how a result is estimated makes every one afresh (a
# history mixing two estimators could show a step where only cpulab changed).  A
# workload's io_bound flag, which the estimate also reads, is not part of it.
ESTIMATOR = hashlib.sha256(Path(__file__).read_bytes() + Path(stats.__file__).read_bytes()).hexdigest()[:16]


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
    rates = stats.per_process(samples, rate, np.max, keep)
    cpu = list(stats.per_process(samples, cycles, np.min, keep).values())
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
        out[key] = float(np.median(obs)) if obs else None
    return Result.from_dict(out)


def _events_summary(samples: list[StoredSample], notes: dict) -> dict:
    """A result's named counters per unit of work (events.h counts them around each
    sample): per process the median of its used samples' count over work, then the
    median of those and its interval; the level-1 top-down shares where counted."""
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
                    rel.append(float(np.median([math.log(turns[t]) - np.mean([math.log(x[t]) for x in level])
                                                for t in common])))
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
    return {p: float(np.median(v)) for p, v in by.items()}


def compare_results(results: list[Result], baselines: dict[str, str], policy: DecisionPolicy,
                    against: int | None = None) -> list[Comparison]:
    """Every variant against its experiment's baseline at the same workload and params
    (with `against` RUN: against its own stored build VARIANT@RUN), Holm-corrected over
    the experiment: every comparison of every point is one family, so the chance of any
    false faster/slower in an experiment stays below the level whatever its number of
    points (a sweep of 10 points tested point by point would give one 25% of the time).
    The policy gives the level of this look, the method and the verdicts; a comparison
    whose two sides ran in several placements needs no floor on its effect, otherwise
    it must clear policy.min_effect (programs: their placement is their build's)."""
    by_point: dict[tuple, dict[str, Result]] = defaultdict(dict)
    for r in results:
        by_point[(r.experiment, r.workload, r.point)][r.variant] = r
    families: dict[str, list[tuple]] = defaultdict(list)
    rows: list[Comparison] = []
    for (exp, wl, pk), variants in by_point.items():
        for name, r in variants.items():
            base_name = against_name(name, against) if against is not None else baselines.get(exp)
            if name == base_name or (against is not None and "@" in name):
                continue
            base = variants.get(base_name)
            base_measured = _measured_as(base, variants) if base else None
            row = Comparison(exp, wl, r.params, base_name, name, verdict=Verdict.NO_BASELINE,
                             alpha=policy.look_alpha, confidence=policy.confidence)
            measured = _measured_as(r, variants)
            if base is None or not base.status.measured or not (base_measured and base_measured.observations):
                pass  # nothing of the baseline to compare with (every sample of it left out, say)
            elif measured is not None and measured is base_measured:  # the same code as the baseline
                row.ratio, row.ci, row.p, row.p_raw, row.verdict = 1.0, [1.0, 1.0], 1.0, 1.0, Verdict.IDENTICAL_CODE
            elif measured is None or not measured.observations:
                row.verdict = r.status
            elif base_measured and measured.emulated != base_measured.emulated:
                row.verdict = Verdict.NOT_COMPARABLE
            else:
                families[exp].append((row, base_measured, measured))
            rows.append(row)
    for fam in families.values():
        bases = [_basis(b, m, policy) for _, b, m in fam]
        tests = [_test(b, m, policy, basis) for (_, b, m), basis in zip(fam, bases)]
        floors = [0.0 if min(b.placements, m.placements) > 1 else policy.min_effect for _, b, m in fam]
        for (row, b, m), basis, t, (p_adj, verdict) in zip(fam, bases, tests, policy.decide(tests, floors)):
            row.ratio, row.ci, row.p, row.p_raw, row.verdict = t.ratio, list(t.ci), p_adj, t.p, Verdict(verdict)
            row.basis = basis
            if row.basis == "peak memory":  # the same test on 1 / peak memory: its own words
                row.verdict = {Verdict.FASTER: Verdict.SMALLER, Verdict.SLOWER: Verdict.LARGER}.get(row.verdict,
                                                                                                 row.verdict)
            row.method, row.rounds = t.method, t.n
            if policy.method == "turns":
                row.carryover = comparison_carryover(b, m, policy.confidence)
                if row.verdict in (Verdict.FASTER, Verdict.SLOWER) and not policy.pairs \
                        and (why := hold_for_carryover(row)):
                    row.verdict, row.held = Verdict.UNCLEAR, why
            if b.instructions_per_unit and m.instructions_per_unit:
                row.instruction_ratio = m.instructions_per_unit / b.instructions_per_unit
                row.witness = witness_words(row.verdict, row.instruction_ratio)
    for fam in families.values():
        compare_events(fam, policy)
    return rows


def compare_events(family: list[tuple], policy: DecisionPolicy) -> None:
    """Each named counter both sides of a comparison counted: its count per unit, variant
    over baseline, tested as the policy tests a time (paired by round: the same rounds as
    the time), Holm over the experiment's comparisons of that event; larger or smaller
    where significant, same within the precision, unclear otherwise.  A count is not a
    rate: a ratio above 1 is more of the event."""
    def counted(r: Result, name: str) -> dict[int, float]:  # a ratio needs a count: rounds of zero are left out
        return {k: v for k, v in r.event_observations.get(name, {}).items() if v > 0}
    by_event: dict[str, list[tuple]] = defaultdict(list)
    for row, b, m in family:
        for name in b.event_observations.keys() & m.event_observations.keys():
            if len(counted(b, name).keys() & counted(m, name).keys()) > 1:
                by_event[name].append((row, b, m))
    for name, members in by_event.items():
        tests = [stats.compare_pair(counted(b, name), counted(m, name), policy.confidence,
                                    "unpaired" if policy.method == "unpaired" else "paired") for _, b, m in members]
        for (row, b, m), t, (p_adj, verdict) in zip(members, tests, policy.decide(tests, [0.0] * len(tests))):
            row.events[name] = {"ratio": t.ratio, "ci": list(t.ci), "p": p_adj, "rounds": t.n,
                                "verdict": {"faster": "larger", "slower": "smaller"}.get(verdict, verdict),
                                "per_unit": [b.events_per_unit.get(name), m.events_per_unit.get(name)]}


def count_verdicts(rows: list[Comparison], policy: DecisionPolicy) -> None:
    """With the instruction metric, each tested comparison's verdict is its count's: exact,
    so no test, a change of at least policy.precision (fewer instructions: faster); unclear
    without both counts.  The time's ratio and interval stay, and its verdict is the other
    witness, in words where the two disagree (set from it before this), and named wherever
    it was decided and differs from the count's."""
    for row in rows:
        if row.method is None:  # nothing tested: identical code, no baseline, a failure
            continue
        ir, by_time = row.instruction_ratio, row.verdict
        row.verdict = (Verdict.UNCLEAR if ir is None else Verdict.FASTER if ir <= 1 - policy.precision
                       else Verdict.SLOWER if ir >= 1 + policy.precision else Verdict.SAME)
        if policy.decided(by_time) and by_time != row.verdict:
            said = f"the time says {by_time} ({100 * (row.ratio - 1):+.1f}%)"
            row.witness = f"{said}; {row.witness}" if row.witness else said


# Counts of the same code repeat to about 0.01% (a key counter's carries, a loop's last
# trip); beyond these two witnesses are said to differ.
SAME_INSTRUCTIONS = 0.001
FEWER_INSTRUCTIONS = 0.02


def witness_words(verdict: str, instruction_ratio: float) -> str:
    """Where the time's verdict and the instruction count (variant over baseline) tell
    different stories, what that says; "" where they agree."""
    change = instruction_ratio - 1
    pct = f"{abs(change) * 100:.1f}% {'fewer' if change < 0 else 'more'} instructions"
    if verdict in (Verdict.FASTER, Verdict.SLOWER) and abs(change) <= SAME_INSTRUCTIONS:
        return (f"the same instructions, yet {verdict}: where the code sits (placement, alignment) "
                "or the micro-architecture, not the work")
    if verdict == Verdict.SAME and abs(change) >= FEWER_INSTRUCTIONS:
        return f"{pct}, yet the same time: bound by memory or latency, not by issuing instructions"
    if verdict == Verdict.FASTER and change >= FEWER_INSTRUCTIONS:
        return f"{pct}, yet faster: more of them per cycle (vector width, fewer dependences)"
    if verdict == Verdict.SLOWER and change <= -FEWER_INSTRUCTIONS:
        return f"{pct}, yet slower: fewer of them per cycle (longer dependences, stalls)"
    return ""


# A whole process counts as bound by its own CPU when its user time is at least this share
# of its wall time: only then do its (user-space) cycles count all of its time.
ON_CPU = 0.95


def _on_its_cpu(s: StoredSample) -> bool:
    """Whether a whole process ran its own code nearly all of its wall time.  Sleep, I/O,
    system calls and page faults are wall time that the cycles counted around it (user
    space only: native/launch.c) do not see: `sleep 0.2` against `sleep 0.1` in cycles is
    a comparison of their start-ups."""
    return s.user_s is not None and s.user_s >= ON_CPU * s.ns * 1e-9


def _basis(base: Result, var: Result, policy: DecisionPolicy) -> str:
    """What two results are compared in: peak memory under the memory metric (whole
    processes); core cycles where both are whole processes bound by their own CPU, with
    the cycles of every process (a CPU-bound command's cycles do not move with the clock
    the host sets for it: seconds do); else time, which counts all of it."""
    def every(obs: str) -> bool:
        return all(getattr(r, obs) and getattr(r, obs).keys() >= r.observations.keys() for r in (base, var))
    if policy.metric == "memory" and every("memory_observations"):
        return "peak memory"
    return "core cycles" if every("cycle_observations") else "time"


def _test(base: Result, var: Result, policy: DecisionPolicy, basis: str) -> stats.Test:
    """The policy's test of two results.  turns reads every used sample by round and
    cycle; for processes of a round that ran back to back (programs: one sample each)
    it is the paired test by round, in what `basis` (_basis) names."""
    if basis == "time" and policy.method == "turns":
        return stats.compare_pair(base.turn_rates, var.turn_rates, policy.confidence, "turns", policy.pairs)
    # Whole processes: one figure each, by round (paired) where the plan's rounds ran in turns
    obs = {"time": "observations", "core cycles": "cycle_observations", "peak memory": "memory_observations"}[basis]
    method = "paired" if policy.method == "turns" else policy.method
    return stats.compare_pair(getattr(base, obs), getattr(var, obs), policy.confidence, method)


def carryover_ratios(variant: str, samples: list[StoredSample]) -> list[float]:
    """Per process of one stored result of `variant` that ran in turns: the median rate of
    its samples that ran right after another member's over that of its samples right after
    its own previous one (what a member leaves in the caches and predictors for the next)."""
    split: dict[int, tuple[list, list]] = defaultdict(lambda: ([], []))
    for s in samples:
        if s.follows and not s.excluded:
            split[s.process][s.follows == variant].append(s.work / stats.on_cpu_ns(s))
    return [float(np.median(other) / np.median(own)) for other, own in split.values() if other and own]


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


def against_name(variant: str, run_id: int) -> str:
    """The name the stored build of `variant` from run `run_id` is measured under (run --against)."""
    return f"{variant}@{run_id}"


def _measured_as(r: Result, variants: dict[str, Result]) -> Result | None:
    """The result whose samples stand for r: itself, or the variant with identical code."""
    if r.status == Status.IDENTICAL:
        return variants.get(r.same_as)
    return r if r.status == Status.OK else None


def geomeans(comparisons: list[Comparison]) -> list[Geomean]:
    """Geometric mean of the ratios of each (experiment, workload, variant) over params,
    with an interval for these points: each point's interval as a normal half-width in
    log space, combined as independent errors of a mean (sqrt of the summed squares, over
    the count); none when a point has no interval."""
    groups: dict[tuple, list[Comparison]] = defaultdict(list)
    for c in comparisons:
        if c.ratio:
            groups[(c.experiment, c.workload, c.variant, c.baseline)].append(c)
    out = []
    for (e, w, v, b), cs in groups.items():
        g = stats.geomean([c.ratio for c in cs])
        ci = None
        if all(c.ci and c.ci[0] > 0 for c in cs):
            half = math.sqrt(sum(((math.log(c.ci[1]) - math.log(c.ci[0])) / 2) ** 2 for c in cs)) / len(cs)
            ci = [g * math.exp(-half), g * math.exp(half)]
        out.append(Geomean(e, w, v, b, g, len(cs), ci))
    return out
