"""The machine axis: machines side by side (a cluster run's, or any runs), ranked, and
one run against another.

A run across a cluster is a parent run with one run per machine (store: runs.parent,
runs.machine); runs measured elsewhere and imported stand for their machines alike.  Each
machine's results are summarised as a local run's are (estimates.result_summary), then
tagged with the machine's name and fingerprint id.  Machines are always measured apart, so
every verdict across them must clear the machines' drift between runs (apart_test).
"""
from __future__ import annotations

import math
from collections import defaultdict

import numpy as np

from cpulab import stats
from cpulab.analysis.summary import summarise
from cpulab.estimates import _measured_as, result_summary, unobserved
from cpulab.model import (
    MachineRow, MachineRun, Machines, RankedMachine, Result, RunPair, RunPairRow, RunSide, Status,
    Verdict
)
from cpulab.spec.policy import DecisionPolicy
from cpulab.store.db import Store, StoreError
from cpulab.store.rows import StoredRun

# Runs measured apart (two dates, two machines) share no host state: a shared VM moves
# whole runs by several percent (the Zen 3 host: medians of one build 178-263 MB/s over 8
# runs).  So a verdict across runs must clear the run-to-run drift of the machines, read
# from the store: identical code (the same artifact bytes) measured at the same points in
# two runs of one machine as far apart as the two runs compared gives one value per pair
# of runs, the root mean square over its points of the log ratio (a pair over 5 points is
# one pair, not 5; the square keeps a drift of single points, which a median over points
# hid: 16% false verdicts with five points each moved 1.5% per run).  The drift is a 95%
# bound on a new pair's |log ratio| from a 95% upper confidence bound of their spread
# (chi-square on the pairs' mean square: few pairs give a wide bound), and intervals are
# widened by it on the log scale.  Runs farther apart than the history has enough pairs
# for take the farthest distance it has, widened as a random walk grows (sqrt of the
# distances' ratio): a slow drift makes runs 20 apart differ more than neighbours.  Below DRIFT_MIN_PAIRS pairs there is no such bound:
# no verdict across runs is given (unclear, saying how many more runs are needed).
DRIFT_MIN_PAIRS = 5
DRIFT_RUNS = 40  # the latest runs of a machine read for it
APART = DecisionPolicy(method="unpaired")


def machine_drift(store: Store, machine_id: str, distance: int = 1) -> tuple[float | None, int]:
    """(drift, pairs): how far one machine's runs `distance` apart move identical code,
    as a half-width on the log scale (None below DRIFT_MIN_PAIRS pairs), and how many
    pairs of runs said so."""
    return drift_from(run_medians(store, machine_id), distance)


def _all_runs(store: Store, machine_id: str) -> list[int]:
    """Every run of a machine with results, oldest first."""
    return [r.id for r in store.runs(machine=machine_id) if r.machine_id == machine_id and r.results]


def machine_runs(store: Store, machine_id: str) -> list[int]:
    """The latest DRIFT_RUNS runs of a machine with results, oldest first."""
    return _all_runs(store, machine_id)[-DRIFT_RUNS:]


def run_distance(store: Store, machine_id: str, run_ids: list[int]) -> int:
    """How many runs of the machine (with results) lie between the first and the last of
    these, counted over all of its runs, however old (1: neighbours, or a single run)."""
    lo, hi = min(run_ids), max(run_ids)
    return max(1, sum(1 for rid in _all_runs(store, machine_id) if lo < rid <= hi))


def run_medians(store: Store, machine_id: str) -> list[dict]:
    """Per run of the machine (machine_runs), each identical code's median rate at each
    point: (workload, code hash, point) -> median."""
    runs = machine_runs(store, machine_id)
    codes: dict[str, str] = {}
    per_run = []
    for rid in runs:
        medians = {}
        for r in store.results(rid):
            if r.status != Status.OK or not r.artifact_hash:
                continue
            if r.artifact_hash not in codes:
                art = store.artifact(r.artifact_hash)
                codes[r.artifact_hash] = art.code_hash if art else r.artifact_hash
            est = result_summary(r, store.samples(r.id)).median
            if est:
                medians[(r.workload, codes[r.artifact_hash], str(sorted(r.params.items())))] = est
        per_run.append(medians)
    return per_run


def drift_from(per_run: list[dict], distance: int = 1) -> tuple[float | None, int]:
    """The drift between runs `distance` apart (module comment) from each run's medians
    (run_medians), and the number of pairs of runs it rests on."""
    d = max(1, min(distance, len(per_run) - DRIFT_MIN_PAIRS))
    pairs = [math.sqrt(float(np.mean([math.log(b[k] / a[k]) ** 2 for k in a.keys() & b.keys()])))
             for a, b in zip(per_run, per_run[d:]) if a.keys() & b.keys()]
    bound = drift_bound(pairs)
    return (bound * math.sqrt(max(distance, 1) / d) if bound is not None else None), len(pairs)


def drift_bound(pairs: list[float]) -> float | None:
    """A 95% bound on the |log ratio| between two runs, from pairs of runs' values
    (centred on no change): 1.96 x the 95% upper confidence bound of their standard
    deviation (chi-square with one degree of freedom a pair); None below DRIFT_MIN_PAIRS."""
    if len(pairs) < DRIFT_MIN_PAIRS:
        return None
    from scipy.special import chdtri  # chi2.ppf(0.05, k) without scipy.stats' import (0.8 s)
    return 1.96 * math.sqrt(sum(x * x for x in pairs) / chdtri(len(pairs), 0.95))


def worst_drift(drifts: list[tuple[float | None, int]]) -> tuple[float | None, int]:
    """The drift several machines' verdicts must clear (the largest; None while any is
    unknown) and the fewest pairs of runs behind any of them."""
    known = [d for d, _ in drifts]
    drift = None if None in known else max(known, default=0.0)
    return drift, min((n for _, n in drifts), default=0)


def drift_note(drift: float | None, pairs: int) -> dict:
    """The drift as documents carry it: the fraction an interval is widened by, and the
    pairs of runs behind it (or how many more are needed before any verdict)."""
    return {"fraction": math.expm1(drift) if drift is not None else None, "pairs": pairs,
            "needed": max(0, DRIFT_MIN_PAIRS - pairs) if drift is None else 0}


def apart_test(base: Result, var: Result, drift: float) -> stats.Test:
    """var against base measured in different runs: Mann-Whitney over processes, its
    interval widened on the log scale by the drift on both sides, so that only a
    difference beyond what the machines' runs move by themselves can be called."""
    t = stats.compare(list(base.observations.values()), list(var.observations.values()), 1 - APART.alpha)
    lo, hi = t.ci
    return stats.Test(t.ratio, (lo * math.exp(-drift), hi * math.exp(drift)), t.p, t.p_floor, "apart", t.n)


def apart_verdicts(family: list[tuple], drift: float | None) -> list[tuple[stats.Test, float, str]]:
    """(test, Holm-adjusted p, verdict) of each (row, base, var) of one family measured
    apart; without a drift bound every measured comparison is unclear.  The drift bounds
    one point at 95%; a family of m points is widened to a bound on all m at once
    (Bonferroni: the normal quantile of 0.025 / m over 1.96), as Holm holds its p-values."""
    widen = stats.NORMAL.inv_cdf(1 - 0.025 / max(len(family), 1)) / 1.96
    tests = [apart_test(b, v, (drift or 0.0) * widen) for _, b, v in family]
    decided = APART.decide(tests)
    return [(t, p, verdict if drift is not None else Verdict.UNCLEAR) for t, (p, verdict, _) in zip(tests, decided)]


def _point(r: Result) -> tuple:
    return (r.experiment, r.workload, r.variant, r.point)


def _measured(results: list[Result]) -> dict[tuple, Result]:
    """Point -> the result whose observations stand for it (itself, or its identical twin)."""
    by_point: dict[tuple, dict[str, Result]] = defaultdict(dict)
    for r in results:
        by_point[(r.experiment, r.workload, r.point)][r.variant] = r
    out = {}
    for r in results:
        m = _measured_as(r, by_point[(r.experiment, r.workload, r.point)])
        if m is not None and m.observations:
            out[_point(r)] = m
    return out


def run_results(store: Store, run_id: int) -> list[Result]:
    """A run's result summaries, each with its observations kept."""
    return [result_summary(r, store.samples(r.id)) for r in store.results(run_id)]


def cluster_summary(store: Store, run_id: int, against: str | None = None) -> Machines:
    """A cluster run: its machines' runs side by side (machines_summary), with the cluster
    run's own status and the machines it lost."""
    parent = store.run(run_id)
    doc = machines_summary(store, store.machine_runs(run_id), against)
    doc.run_id, doc.status, doc.started, doc.finished = run_id, parent.status, parent.started, parent.finished
    doc.plan, doc.client = parent.record, parent.fingerprint
    doc.machines_lost = [a.data for a in store.analyses(run_id, "machine-lost")]
    return doc


def machine_name(run: StoredRun, taken: set[str]) -> str:
    """A run's machine as the tables name it: its worker name, else its label, else its CPU
    model; the run id is added where two would read alike."""
    name = run.machine or run.label or run.fingerprint.get("cpu_model") or run.machine_id
    return f"{name} (run {run.id})" if name in taken else name


def machines_summary(store: Store, run_ids: list[int], against: str | None = None) -> Machines:
    """Runs side by side as machines (a cluster run's, or runs measured anywhere and
    imported): each machine's fingerprint, every result and comparison tagged with
    `machine`, the machine table with verdicts that clear the machines' drift, the
    ranking, and each machine's memory-latency curve."""
    machines, results, comparisons, per_machine = [], [], [], {}
    for rid in run_ids:
        s = summarise(store, rid)
        run = store.run(rid)
        name = machine_name(run, set(per_machine))
        tag = {"machine": name, "machine_id": run.machine_id}
        machines.append(MachineRun(name, run.machine_id, rid, run.status, run.fingerprint,
                                   run.conditions, run.timing, s.variants, run.label))
        results += [{**r.to_dict(), **tag} for r in s.results]
        comparisons += [{**c.to_dict(), **tag} for c in s.comparisons]
        per_machine[name] = run_results(store, rid)
    # each machine's drift over the runs of it that are compared: the farthest two apart
    drift, pairs = worst_drift([machine_drift(store, mid, run_distance(store, mid, [m.run_id for m in machines
                                                                                   if m.machine_id == mid]))
                                for mid in {m.machine_id for m in machines}])
    table = machine_table(per_machine, against, drift)
    return Machines(list(run_ids), machines, results, comparisons, table, ranking(table), memlat_curves(per_machine),
                    drift_note(drift, pairs))


def ranking(table: list[MachineRow]) -> list[RankedMachine]:
    """Machines best first: the geometric mean, over the points every machine measured, of
    its rate as a % of the best machine's there, and of the best machine's cycles per unit
    as a % of its own (per clock: what the core does with a cycle, whatever its clock)."""
    by_point: dict[tuple, dict[str, MachineRow]] = defaultdict(dict)
    for row in table:
        if row.median:
            by_point[(row.experiment, row.workload, row.variant, str(row.params))][row.machine] = row
    names = {row.machine for row in table}
    common = [rows for rows in by_point.values() if set(rows) == names]
    out = []
    for m in sorted(names):
        rate = [rows[m].median / max(r.median for r in rows.values()) for rows in common]
        clocked = [rows for rows in common if all(r.cycles_per_unit for r in rows.values())]
        clock = [min(r.cycles_per_unit for r in rows.values()) / rows[m].cycles_per_unit for rows in clocked]
        out.append(RankedMachine(m, len(common), 100 * _geomean(rate) if rate else None,
                                 100 * _geomean(clock) if clock else None))
    out.sort(key=lambda r: -(r.pct_of_best_rate or 0))
    for i, r in enumerate(out, 1):
        r.rank = i
    return out


def _geomean(xs: list[float]) -> float:
    return math.exp(sum(map(math.log, xs)) / len(xs))


def memlat_curves(per_machine: dict[str, list[Result]]) -> dict[str, list[list[float]]]:
    """Each machine's load-to-use latency (ns) against working-set bytes, one curve per page mode."""
    out: dict[str, list[list[float]]] = {}
    for m, rs in per_machine.items():
        for r in rs:
            if r.workload == "memlat" and r.ns_per_unit and r.params.get("mode", "random") == "random":
                out.setdefault(f"{m} {r.params.get('pages', '')}".strip(), []).append(
                    [float(r.params["size"]), r.ns_per_unit])
    return {k: sorted(v) for k, v in out.items()}


def machine_table(per_machine: dict[str, list[Result]], against: str | None = None,
                  drift: float | None = None) -> list[MachineRow]:
    """One row per (point, machine): rate, cycles/unit, % of the best machine's rate, and
    the verdict against the best machine (or `against`), Holm-corrected per point; the
    machines were measured apart, so verdicts clear `drift` (apart_test)."""
    measured = {m: _measured(rs) for m, rs in per_machine.items()}
    points = sorted({p for rs in per_machine.values() for p in map(_point, rs)}, key=str)
    rows = []
    for p in points:
        have = {m: ms[p] for m, ms in measured.items() if p in ms}
        best = max(have, key=lambda m: have[m].median) if have else None
        ref = against if against is not None else best
        family = []
        for m, rs in sorted(per_machine.items()):
            r = next((x for x in rs if _point(x) == p), None)
            if r is None:
                continue
            got = have.get(m)
            exp, wl, var, params = p
            row = MachineRow(exp, wl, var, dict(params), m, r.status, r.rate_unit, reference=ref)
            if got is not None:
                row.median, row.ci, row.cycles_per_unit = got.median, got.ci, got.cycles_per_unit
                row.pct_of_best = 100 * (got.median / have[best].median)  # the best's own is then exactly 100
            if got is None:
                row.verdict = Verdict.NO_BASELINE if m == ref and r.status.measured else unobserved(r.status)
            elif ref not in have:
                row.verdict = Verdict.NO_BASELINE
            elif m == ref:
                row.ratio = 1.0
            else:
                family.append((row, have[ref], got))
            rows.append(row)
        for (row, _, _), (t, p_adj, verdict) in zip(family, apart_verdicts(family, drift)):
            row.ratio, row.ci_ratio, row.p, row.verdict = t.ratio, list(t.ci), p_adj, verdict
    return rows


def compare_runs(store: Store, run_a: int, run_b: int) -> RunPair:
    """The same points in two runs (two machines, or one machine on two dates): B's rate
    against A's, Holm-corrected within each (experiment, workload)."""
    for rid in (run_a, run_b):
        if store.machine_runs(rid):
            raise StoreError(f"run {rid} is a cluster run: compare one of its machine runs "
                             f"({', '.join(map(str, store.machine_runs(rid)))}) or use --by machine")
    a, b = store.run(run_a), store.run(run_b)
    ra, rb = run_results(store, run_a), run_results(store, run_b)
    ma, mb = _measured(ra), _measured(rb)
    families: dict[tuple, list] = defaultdict(list)
    rows = []
    for r in rb:
        p = _point(r)
        if p not in {_point(x) for x in ra}:
            continue
        row = RunPairRow(p[0], p[1], p[2], dict(p[3]), r.rate_unit, ma[p].median if p in ma else None,
                         mb[p].median if p in mb else None)
        if p not in ma:
            row.verdict = Verdict.NO_BASELINE
        elif p not in mb:
            row.verdict = r.status
        else:
            families[p[:2]].append((row, ma[p], mb[p]))
        rows.append(row)
    # One machine's two runs: the drift of runs as far apart as these two, however old
    apart = run_distance(store, a.machine_id, [run_a, run_b]) if a.machine_id == b.machine_id else 1
    drift, pairs = worst_drift([machine_drift(store, a.machine_id, apart),
                                machine_drift(store, b.machine_id, apart)])
    for fam in families.values():
        for (row, _, _), (t, p_adj, verdict) in zip(fam, apart_verdicts(fam, drift)):
            row.ratio, row.ci, row.p, row.verdict = t.ratio, list(t.ci), p_adj, verdict

    def side(run, rid):
        return RunSide(rid, run.machine, run.machine_id, run.started, run.status, run.fingerprint)
    return RunPair(side(a, run_a), side(b, run_b), rows, drift_note(drift, pairs))
