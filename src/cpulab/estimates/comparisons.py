"""A point's results compared: every variant against its experiment's baseline under one
DecisionPolicy (Holm over the experiment), the instruction count and named counters as
witnesses beside the time, and geomeans over a variant's points."""
from __future__ import annotations

import math
from collections import defaultdict

from cpulab import stats
from cpulab.estimates.carryover import comparison_carryover, hold_for_carryover
from cpulab.model import Comparison, Geomean, Result, Status, Verdict
from cpulab.spec.policy import DecisionPolicy


def unobserved(status: Status) -> str:
    """The verdict beside a result with nothing to compare: its failure (crashed, ...), or
    inconclusive where it ran but a loaded machine left out every sample it took."""
    return Verdict.INCONCLUSIVE if status.measured else status


def compare_results(results: list[Result], baselines: dict[str, str], policy: DecisionPolicy,
                    against: int | None = None, first: dict[str, int] | None = None) -> list[Comparison]:
    """Every variant against its experiment's baseline at the same workload and params
    (with `against` RUN: against its own stored build VARIANT@RUN), Holm-corrected over
    the experiment: every comparison of every point is one family, so the chance of any
    false faster/slower in an experiment stays below the level whatever its number of
    points (a sweep of 10 points tested point by point would give one 25% of the time).
    The policy gives each comparison's level from its rounds and its experiment's first
    look (`first`; None: a run stored before looks were recorded), the method and the
    verdicts; a comparison
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
            row = Comparison(exp, wl, r.params, base_name, name, verdict=Verdict.NO_BASELINE)
            measured = _measured_as(r, variants)
            if base is None or not base.status.measured or not (base_measured and base_measured.observations):
                pass  # nothing of the baseline to compare with (every sample of it left out, say)
            elif measured is not None and measured is base_measured:  # the same code as the baseline
                row.ratio, row.ci, row.p, row.p_raw, row.verdict = 1.0, [1.0, 1.0], 1.0, 1.0, Verdict.IDENTICAL_CODE
            elif measured is None or not measured.observations:
                row.verdict = unobserved(r.status)
            elif base_measured and measured.emulated != base_measured.emulated:
                row.verdict = Verdict.NOT_COMPARABLE
            else:
                families[exp].append((row, base_measured, measured))
            rows.append(row)
    for exp, fam in families.items():
        bases = [_basis(b, m, policy) for _, b, m in fam]
        levels = [policy.level(_rounds(b, m, policy, basis), (first or {}).get(exp))
                  for (_, b, m), basis in zip(fam, bases)]
        tests = [_test(b, m, policy, basis, 1 - level) for (_, b, m), basis, level in zip(fam, bases, levels)]
        floors = [0.0 if min(b.placements, m.placements) > 1 else policy.min_effect for _, b, m in fam]
        for (row, b, m), basis, level, (p_adj, verdict, t) in zip(fam, bases, levels,
                                                                  policy.decide(tests, floors, levels)):
            row.ratio, row.ci, row.p, row.p_raw, row.verdict = t.ratio, list(t.ci), p_adj, t.p, Verdict(verdict)
            row.alpha, row.confidence, row.basis = level, 1 - level, basis
            if row.basis == "peak memory":  # the same test on 1 / peak memory: its own words
                row.verdict = {Verdict.FASTER: Verdict.SMALLER, Verdict.SLOWER: Verdict.LARGER}.get(row.verdict,
                                                                                                 row.verdict)
            row.method, row.rounds = t.method, t.n
            if policy.method == "turns":
                row.carryover = comparison_carryover(b, m, row.confidence)
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
    """Each named counter both sides counted, variant over baseline per unit (above 1: more
    of it), tested by round as the policy tests a time, Holm over the experiment's
    comparisons of that event: larger or smaller where significant, else same or unclear."""
    def counted(r: Result, name: str) -> dict[int, float]:  # a ratio needs a count: rounds of zero are left out
        return {k: v for k, v in r.event_observations.get(name, {}).items() if v > 0}
    by_event: dict[str, list[tuple]] = defaultdict(list)
    for row, b, m in family:
        for name in b.event_observations.keys() & m.event_observations.keys():
            bc, mc = counted(b, name), counted(m, name)
            if len(bc.keys() & mc.keys()) > 1:
                by_event[name].append((row, b, m, bc, mc))
    for name, members in by_event.items():
        levels = [row.alpha for row, *_ in members]  # the time's look
        tests = [stats.compare_pair(bc, mc, 1 - level, "unpaired" if policy.method == "unpaired" else "paired")
                 for (*_, bc, mc), level in zip(members, levels)]
        for (row, b, m, *_), (p_adj, verdict, t) in zip(members, policy.decide(tests, [0.0] * len(tests), levels)):
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


_OBSERVATIONS = {"time": "observations", "core cycles": "cycle_observations", "peak memory": "memory_observations"}


def _observed(r: Result, policy: DecisionPolicy, basis: str) -> dict:
    """What a result's test reads, by round: its turns' rates (turns, in time), else one
    figure a process in what `basis` (_basis) names."""
    return r.turn_rates if basis == "time" and policy.method == "turns" else getattr(r, _OBSERVATIONS[basis])


def _rounds(base: Result, var: Result, policy: DecisionPolicy, basis: str) -> int:
    """The rounds (or, unpaired, the smaller side's processes) a test of two results reads:
    what places it among its experiment's looks."""
    b, v = _observed(base, policy, basis), _observed(var, policy, basis)
    return min(len(b), len(v)) if policy.method == "unpaired" else len(b.keys() & v.keys())


def _test(base: Result, var: Result, policy: DecisionPolicy, basis: str, confidence: float) -> stats.Test:
    """The policy's test of two results.  turns reads every used sample by round and
    cycle; for processes of a round that ran back to back (programs: one sample each)
    it is the paired test by round."""
    turns = basis == "time" and policy.method == "turns"
    method = policy.method if turns or policy.method == "unpaired" else "paired"
    return stats.compare_pair(_observed(base, policy, basis), _observed(var, policy, basis), confidence, method,
                              policy.pairs)


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
