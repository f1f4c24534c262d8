"""The tables of machines side by side: a cluster run's machines (or several runs'),
their ranking and per-clock processor tables (model.Machines), and one run against
another (model.RunPair), built once and drawn by every presenter."""
from __future__ import annotations

from collections import defaultdict
from typing import Any

from cpulab.model import MachineRow, Machines, RunPair
from cpulab.report.tables import Cell, Table, columns, fmt_num, verdict_tag
from cpulab.report.views import fmt_params


def machine_tables(doc: Machines) -> list[Table]:
    """Machines side by side (between_runs.machines_summary, or a cluster run's): the
    ranking, seed 004's table 1 with processors as rows, machines x workloads (rate, cycles
    per unit, % of the best machine, verdict against the best or a named one), then the
    machines with their fingerprints."""
    what = f"run {doc.run_id} ({doc.status})" if doc.run_id is not None else \
        "runs " + ", ".join(map(str, doc.run_ids))
    t = Table("machines x workloads", f"{what}: machines x workloads",
              columns("workload", "variant", "params", "machine", "rate", "cycles/unit", "% of best", "vs", "verdict",
                      left=4))
    t.columns[-1].left = True
    for r in doc.machine_table:
        t.add(r.workload, r.variant, fmt_params(r.params, r.workload), r.machine,
              Cell(r.median, f"{fmt_num(r.median)} {r.rate_unit}" if r.median else "-"),
              Cell(r.cycles_per_unit),
              Cell(r.pct_of_best, f"{r.pct_of_best:.1f}%" if r.pct_of_best else "-"), r.reference or "-",
              Cell(r.verdict, f"{r.verdict} ({r.ratio:.3f}x)" if r.verdict and r.ratio else
                   str(r.verdict or "reference"), verdict_tag(r.verdict)))
    m = Table("machines", "machines", columns("machine", "run", "status", "fingerprint", "cpu", left=5),
              notes=[f"{lost['machine']}: {lost['error']}" for lost in doc.machines_lost])
    for x in doc.machines:
        fp = x.fingerprint
        m.add(x.machine, x.run_id, x.status, x.machine_id,
              f"{fp.get('cpu_model')} ({fp.get('cpus')} CPUs) on {fp.get('hostname')}")
    return ([ranking] if (ranking := ranking_table(doc)) else []) + processor_tables(doc) + [t, m]


def drift_sentence(drift: dict) -> str:
    """What verdicts across runs had to clear (analysis.between_runs.drift_note)."""
    if drift["fraction"] is None:
        return (f"no verdict across runs yet: the machines' drift between runs is known from {drift['pairs']} "
                f"pairs of runs of the same code, {drift['needed']} more needed")
    return (f"verdicts across runs clear the machines' run-to-run drift of ±{drift['fraction']:.1%} (a 95% bound "
            f"from {drift['pairs']} pairs of runs)")


def ranking_table(doc: Machines) -> Table | None:
    if len(doc.ranking) < 2:
        return None
    cpu = {x.machine: x.fingerprint.get("cpu_model", "") for x in doc.machines}
    t = Table("ranking", "machines ranked: geometric mean over the points every machine measured",
              columns("rank", "machine", "cpu", "% of best (rate)", "% of best (per clock)", "points", left=3),
              notes=[drift_sentence(doc.drift)])
    for r in doc.ranking:
        t.add(r.rank, r.machine, cpu.get(r.machine, ""),
              Cell(r.pct_of_best_rate, f"{r.pct_of_best_rate:.1f}%" if r.pct_of_best_rate else "-"),
              Cell(r.pct_of_best_per_clock, f"{r.pct_of_best_per_clock:.1f}%" if r.pct_of_best_per_clock else "-"),
              r.points)
    return t


MAX_PROCESSOR_POINTS = 12  # columns of two: wider than this, the machines x workloads table says it better


def processor_tables(doc: Machines) -> list[Table]:
    """Seed 004's table 1, per experiment with a few points: processors as rows; per
    workload point, cycles per unit and % of the best processor at equal clock."""
    machines = list(dict.fromkeys(x.machine for x in doc.machines))
    if len(machines) < 2:
        return []
    by_exp: dict[str, list[MachineRow]] = defaultdict(list)
    for r in doc.machine_table:
        if r.cycles_per_unit:
            by_exp[r.experiment].append(r)
    out = []
    for exp, rows in by_exp.items():
        seen: dict[tuple, set[str]] = defaultdict(set)
        for r in rows:
            seen[(r.workload, r.variant, fmt_params(r.params, r.workload))].add(r.machine)
        points = sorted(pt for pt, ms in seen.items() if len(ms) > 1)  # a row is a comparison of processors
        if not 1 <= len(points) <= MAX_PROCESSOR_POINTS:
            continue
        at = {(r.machine, r.workload, r.variant, fmt_params(r.params, r.workload)): r for r in rows}
        names = ["processor"]
        for w, v, ps in points:
            names += [f"{w} {v} {'' if ps == '-' else ps} cycles/unit".replace("  ", " "), "% of max"]
        t = Table("processors", f"{exp}: processors as rows, cycles per unit and % of the best at equal clock "
                                "(seed 004's table 1)", columns(*names))
        for m in machines:
            cells: list[Any] = [m]
            for pt in points:
                r = at.get((m, *pt))
                best = min(x.cycles_per_unit for (_, *q), x in at.items() if tuple(q) == pt)
                cells += [Cell(r and r.cycles_per_unit),
                          Cell(r and best / r.cycles_per_unit, f"{100 * best / r.cycles_per_unit:.0f}%" if r else "-")]
            t.add(*cells)
        out.append(t)
    return out


def run_comparison_table(doc: RunPair) -> Table:
    """One run against another (analysis.between_runs.compare_runs): B's rate over A's at each point."""
    a, b = doc.a, doc.b
    t = Table("run comparison", f"run {b.run_id} ({b.machine or b.machine_id}) against run {a.run_id} "
                                f"({a.machine or a.machine_id})",
              columns("workload", "variant", "params", "A", "B", "B/A", "95% CI", "verdict", left=3),
              notes=[drift_sentence(doc.drift)])
    t.columns[-1].left = True
    for r in doc.comparisons:
        t.add(r.workload, r.variant, fmt_params(r.params, r.workload), Cell(r.a),
              Cell(r.b, f"{fmt_num(r.b)} {r.rate_unit}" if r.b else "-"), Cell(r.ratio),
              Cell(r.ci, f"{r.ci[0]:.3f}-{r.ci[1]:.3f}" if r.ci else "-"),
              Cell(r.verdict, str(r.verdict), verdict_tag(r.verdict)))
    return t
