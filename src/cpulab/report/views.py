"""The tables of a run, built once from its Summary and drawn by every presenter.

Results and comparisons: workload_tables (one per experiment and workload), geomean_table,
result_list / comparison_list (every field, for exports), pivot_table (seed 004's
table 1 layout), the time split and the carry-over.  Stored analyses are drawn by
analysis_views.py, machines side by side by machine_views.py.
"""
from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from typing import Any

from cpulab import workloads
from cpulab import stats, time_split
from cpulab.model import Comparison, Result, Status, Summary, Verdict
from cpulab.report.tables import Cell, Table, columns, fmt_delta, fmt_num, verdict_tag


def workload_of(name: str) -> workloads.Workload | None:
    """The workload's declaration, if this installation still has it (a store may be older)."""
    try:
        return workloads.get(name)
    except KeyError:
        return None


def fmt_params(params: dict, workload: str | None = None) -> str:
    """key=value ... without the parameters the workload declares hidden (a file's path)."""
    w = workload_of(workload) if workload else None
    hidden = w.hidden_params if w else ()
    return " ".join(f"{k}={v}" for k, v in params.items() if k not in hidden) or "-"


def comparisons_by_point(s: Summary) -> dict[tuple, Comparison]:
    return {(c.experiment, c.workload, c.point, c.variant): c for c in s.comparisons}


def _verdict(r: Result, c: Comparison | None) -> Cell:
    if r.status == Status.IDENTICAL:
        return Cell(Verdict.IDENTICAL_CODE, f"identical code (= {r.same_as})", "identical")
    if r.status != Status.OK:
        return Cell(r.status, f"{r.status}: {r.error}"[:100], "fail")
    if c is None:
        return Cell("baseline", tag="muted")
    return Cell(c.verdict, tag=verdict_tag(c.verdict))


def _placement_band(r: Result) -> Cell:
    """The spread over a result's placements (the central 80% of their estimates against
    its median) and how many placements ran."""
    if not r.placement_band:  # a program that cannot be relinked says so (its notes: why)
        return Cell(None, "one layout" if (r.notes or {}).get("one_layout") else "")
    lo, hi = r.placement_band
    return Cell(hi - lo, f"{100 * (lo - 1):+.1f}% .. {100 * (hi - 1):+.1f}% ({r.placements})")


def legend(s: Summary) -> str:
    """The run's method in words (DecisionPolicy.legend), saying whether its rounds varied
    where the code sits (an imported run, which another tool measured: nothing is said);
    whole processes (programs, commands: one run a process, back to back in a round) are
    described as the paired test they are, alone or beside kernels in turns."""
    measured = [r for r in s.results if r.processes] if s.plan.kind != "imported" else []
    whole = [r.unit == "runs" for r in measured]
    policy = dataclasses.replace(s.policy, method="paired") if whole and all(whole) and s.policy.method == "turns" \
        else s.policy
    return policy.legend(placed=any(r.placements for r in measured), unplaced=any(not r.placements for r in measured),
                         whole_runs=any(whole))


def observation_line(s: Summary) -> str:
    """What one observation of the run's results is: a kernel's process, or a whole run of
    a program or command."""
    measured = [r for r in s.results if r.processes]
    kernel = (f"a kernel's is one process: the fastest of its first {stats.KEEP} samples not left out (a sample "
              "is left out when its thread was off the CPU for over 1% of it, or it migrated or saw steal time)")
    whole = "a program's or command's is one whole run of it, its wall time"
    said = [kernel] if not measured or any(r.unit != "runs" for r in measured) else []
    return "Each observation: " + "; ".join(said + ([whole] if any(r.unit == "runs" for r in measured) else []))


def carryover_line(s: Summary) -> str:
    """One sentence on the run's carry-over contrast, or '' when nothing ran in turns."""
    c = s.carryover
    if not c:
        return ""
    return (f"Carry-over: samples that ran right after another build's sample were {fmt_delta(c['ratio'], c['ci'])} "
            f"against those right after their own process's ({c['processes']} processes; an interval around 0: "
            f"none measurable)")


def time_split_line(s: Summary) -> str:
    """Where the run's time went, in one sentence ('' for a run that did not record it)."""
    t = time_split.totals(s.time_split)
    if not t:
        return ""
    whole = sum(t.values())
    share = time_split.samples_share(s.time_split)
    shown = [p for p in t if t[p] >= 0.5] or sorted(t, key=t.get, reverse=True)[:3]  # a short run: its largest
    parts = ", ".join(f"{p} {t[p]:.{0 if t[p] >= 0.5 else 1}f} s" for p in shown)
    shared = s.conditions.get("shared_machine")
    return (f"Time: {whole:.0f} s accounted for: {parts}"
            + (f"; samples are {100 * share:.0f}% of the measured processes' own time" if share is not None else "")
            + (f"; {', '.join(shared)} ran two at a time, one per CPU (they share the machine)" if shared else ""))


def time_split_table(s: Summary) -> Table | None:
    """Seconds per phase, one row per experiment and one for the run as a whole."""
    if not s.time_split:
        return None
    shared = s.conditions.get("shared_machine") or []
    t = Table("time split", "where the run's time went, seconds",
              columns("experiment", *time_split.PHASES, "samples share", "machine"))
    for where, phases in s.time_split.items():
        share = time_split.samples_share({where: phases})
        t.add(where or "(the run)", *[Cell(phases.get(p)) for p in time_split.PHASES],
              Cell(share, f"{100 * share:.0f}%" if share is not None else "-"),
              "shared, one CPU each" if where in shared else "alone" if where else "")
    return t


def confidence_words(levels: list[float]) -> str:
    """The confidence of a table's intervals: one figure, or the range its looks gave."""
    lo, hi = (min(levels), max(levels)) if levels else (0.95, 0.95)
    return f"{100 * lo:.3g}%" if f"{100 * lo:.3g}" == f"{100 * hi:.3g}" else f"{100 * lo:.3g}-{100 * hi:.3g}%"


BASE_IN_HEADER = 24  # characters of the baseline's name a column header holds


def workload_tables(s: Summary) -> dict[tuple[str, str], Table]:
    """One table per (experiment, workload): parameter points x variants, median with its
    interval, per clock, percent of the best variant at that point, delta and verdict
    against the baseline; real/user/sys per repetition where the workload asks for them."""
    comps = comparisons_by_point(s)
    groups: dict[tuple, list[Result]] = defaultdict(list)
    for r in s.results:
        groups[(r.experiment, r.workload)].append(r)
    tables = {}
    for (exp, wname), rows in groups.items():
        w = workload_of(wname)
        times = bool(w and w.times) or rows[0].unit == "runs"  # whole processes: cpulab time, programs
        best: dict[tuple, float] = defaultdict(float)
        for r in rows:
            if r.median:
                best[r.point] = max(best[r.point], r.median)
        base = next((c.baseline for c in s.comparisons if (c.experiment, c.workload) == (exp, wname)), "")
        conf = confidence_words([c.confidence for c in s.comparisons
                                 if (c.experiment, c.workload) == (exp, wname) and c.confidence])
        counted = any(r.instructions_per_unit or r.instructions_why for r in rows)
        # a command as long as a line (cpulab time's default name) made its header ten lines:
        # the title names it in full
        vs = f"vs {base}" if len(str(base)) <= BASE_IN_HEADER else "vs baseline"  # None: an import without one
        simulated = any(r.d1_misses_per_unit is not None for r in rows)
        names = ["params", "variant", rows[0].rate_unit, "95% CI", "cv", "placements", rows[0].per_clock_unit,
                 "% of max", "left out", vs, "p", "verdict"] + (["real s", "user s", "sys s"] if times else []) \
            + ([f"instructions/{rows[0].unit.rstrip('s')}", "IPC", f"instructions {vs}"] if counted else []) \
            + (["D1 misses (model)", "LL misses (model)"] if simulated else [])
        t = Table("results", f"{wname} ({exp}): median [95% CI], delta vs {base} [{conf} CI]", columns(*names, left=2))
        t.columns[names.index("verdict")].left = True
        last = None
        for r in rows:
            c = comps.get((exp, wname, r.point, r.variant))
            params = fmt_params(r.params, wname)
            shown, last = (params if params != last else ""), params
            compared = c is not None and c.ratio is not None and c.verdict != Verdict.IDENTICAL_CODE
            cells = [Cell(params, shown), r.label,
                     Cell(r.median, f"= {r.same_as}" if r.status == Status.IDENTICAL else None),
                     Cell(r.ci, (f"{fmt_num(r.ci[0])} .. {fmt_num(r.ci[1])}" if r.ci else "")
                          + (f" (covers {100 * r.ci_coverage:.0f}%)" if r.ci and (r.ci_coverage or 1) < 0.95 else "")),
                     Cell(r.cv, f"{r.cv * 100:.1f}%" if r.cv is not None else ""),
                     _placement_band(r),
                     Cell(r.cycles_per_unit),
                     Cell(r.median / best[r.point] if r.median else None,
                          f"{100 * r.median / best[r.point]:.0f}%" if r.median else ""),
                     Cell(r.excluded_samples, f"{r.excluded_samples} sample{'s' * (r.excluded_samples > 1)}"
                          if r.excluded_samples else ""),
                     Cell(c.ratio if compared else None, fmt_delta(c.ratio, c.ci) if compared else ""),
                     Cell(c.p if compared else None, f"{c.p:.3f}" if compared and c.p is not None else ""),
                     _verdict(r, c)]
            if times:
                cells += [Cell(r.real_s), Cell(r.user_s), Cell(r.sys_s)]
            if counted:
                cells += _witness_cells(r, c if compared else None, t.notes)
            if c is not None and c.basis != "time" and (note := f"compared in {c.basis}: the host moves the core "
                                                                "clock between processes") not in t.notes:
                t.notes.append(note)
            if c is not None and c.held:
                t.notes.append(f"{fmt_params(c.params, c.workload)} {c.variant}: {c.held}")
            if simulated:  # per unit, from valgrind's cache model with this machine's sizes
                cells += [Cell(r.d1_misses_per_unit), Cell(r.ll_misses_per_unit)]
            t.add(*cells)
        t.notes += one_layout_notes(rows)
        t.notes += cause_notes([c for c in s.comparisons if (c.experiment, c.workload) == (exp, wname)])
        tables[(exp, wname)] = t
    return tables


def one_layout_notes(rows: list[Result]) -> list[str]:
    """Why builds kept one layout (a program cpulab could not relink), once per reason
    with the variants it holds for: their rows say only "one layout"."""
    variants: dict[str, list[str]] = defaultdict(list)
    for r in rows:
        if (why := (r.notes or {}).get("one_layout")) and r.label not in variants[why]:
            variants[why].append(r.label)
    return [f"{', '.join(vs)}: {why}" for why, vs in variants.items()]


def cause_notes(comparisons: list[Comparison]) -> list[str]:
    """One line per variant and verdict: at how many points, and the cause at the widest
    gap (every point's is in --json and the report's data)."""
    groups: dict[tuple, list[Comparison]] = defaultdict(list)
    for c in comparisons:
        if c.why:
            groups[(c.variant, c.verdict)].append(c)
    out = []
    for (variant, verdict), cs in groups.items():
        widest = max(cs, key=lambda c: abs(math.log(c.ratio)))
        where = f" at {len(cs)} points" if len(cs) > 1 else ""
        at = f" ({'widest ' if len(cs) > 1 else ''}at {fmt_params(widest.params, widest.workload)})" \
            if widest.params else ""
        than = f"the same as {widest.baseline}" if verdict == Verdict.SAME else f"{verdict} than {widest.baseline}"
        out.append(f"why {variant} is {than}{where}: {widest.why['sentence']}{at}")
    return out


def _witness_cells(r: Result, c: Comparison | None, notes: list[str]) -> list[Cell]:
    """The instruction count beside the time: per unit, IPC, and against the baseline;
    why a result has no count, and where the two witnesses disagree, go to the notes."""
    _note_uncounted(r, notes)
    if c is not None and c.witness:
        notes.append(f"{fmt_params(c.params, c.workload)} {c.variant}: {c.witness}")
    ratio = c.instruction_ratio if c is not None else None
    return [Cell(r.instructions_per_unit),
            Cell(r.ipc, f"{r.ipc:.2f}" if r.ipc else ""),
            Cell(ratio, f"{(ratio - 1) * 100:+.2f}%" if ratio else "")]


def _note_uncounted(r: Result, notes: list[str]) -> None:
    """Why a result has no instruction count, once in a table's notes."""
    if r.instructions_why and (why := f"{r.label}: no instruction count: {r.instructions_why}") not in notes:
        notes.append(why)


def process_table(s: Summary) -> Table | None:
    """Whole processes (cpulab time, programs): median wall, user and sys per run, and the
    medians of what wait4 said besides time."""
    rows = [r for r in s.results if r.unit == "runs"]
    if not rows:
        return None
    t = Table("processes", "per process: medians",
              columns("workload", "params", "variant", "wall ms", "user ms", "sys ms", "max RSS KiB",
                      "ctx vol/invol", "status", left=3))
    t.columns[-1].left = True
    for r in rows:
        n = r.notes
        ctx = (f"{fmt_num(n['median_voluntary_switches'])}/{fmt_num(n['median_involuntary_switches'])}"
               if "median_voluntary_switches" in n else "-")
        status = r.status + (f": {r.error[:70]}" if r.error else "") + (f" [{n['cache']}]" if "cache" in n else "")
        t.add(r.workload, fmt_params(r.params, r.workload), r.label,
              *[Cell(v * 1e3 if v is not None else None) for v in (r.real_s, r.user_s, r.sys_s)],
              Cell(n.get("median_max_rss_kb")), ctx, status)
    return t


def geomean_table(s: Summary) -> Table | None:
    rows = [g for g in s.geomeans if g.points > 1]
    if not rows:
        return None
    t = Table("geomeans", "geometric mean of the ratio over parameter points, with an interval from the points' intervals",
              columns("experiment", "workload", "variant", "vs", "geomean", "points", left=4))
    for g in rows:
        t.add(g.experiment, g.workload, g.variant, g.baseline, Cell(g.ratio, fmt_delta(g.ratio, g.ci)), g.points)
    return t


RESULT_FIELDS = ["experiment", "workload", "variant", "params", "status", "unit", "rate_unit", "median", "ci_low",
                 "ci_high", "cv", "cycles_per_unit", "ns_per_unit", "real_s", "user_s", "sys_s", "processes",
                 "excluded_samples", "ci_coverage", "placements", "placement_low", "placement_high",
                 "instructions_per_unit", "ipc", "d1_misses_per_unit", "ll_misses_per_unit", "timer", "emulated",
                 "error"]
COMPARISON_FIELDS = ["experiment", "workload", "params", "baseline", "variant", "ratio", "ci_low", "ci_high", "p",
                     "verdict", "method", "rounds", "instruction_ratio"]


def _field_cells(x, names: list[str], workload: str) -> list[Cell]:
    ci = x.ci or [None, None]
    band = getattr(x, "placement_band", None) or [None, None]
    special = {"params": Cell(fmt_params(x.params, workload)), "ci_low": Cell(ci[0]), "ci_high": Cell(ci[1]),
               "placement_low": Cell(band[0]), "placement_high": Cell(band[1])}
    return [special.get(n) or Cell(getattr(x, n)) for n in names]


def result_list(s: Summary) -> Table:
    """Every result, one row each, every field (CSV, Markdown)."""
    t = Table("result", "results", columns(*RESULT_FIELDS, left=7))
    for r in s.results:
        t.add(*_field_cells(r, RESULT_FIELDS, r.workload))
    return t


def comparison_list(s: Summary) -> Table:
    """Every comparison, one row each (CSV, Markdown, the report's last table)."""
    t = Table("comparison", "every comparison: ratio of medians (variant / baseline, > 1 is faster)",
              columns(*COMPARISON_FIELDS, left=5))
    for c in s.comparisons:
        cells = _field_cells(c, COMPARISON_FIELDS, c.workload)
        cells[5] = Cell(c.ratio, f"{c.ratio:.3f}" if c.ratio is not None else "-")
        cells[8] = Cell(c.p, f"{c.p:.3g}" if c.p is not None else "")
        cells[9] = Cell(c.verdict, tag=verdict_tag(c.verdict))
        t.add(*cells)
    return t


def gate_table(s: Summary, regressions: list[Comparison], metric: str = "time") -> Table:
    """cpulab ci: head against base at every point, the regressions marked in the column
    of the metric that decided; with counts, the instructions beside the time."""
    rate = {(r.experiment, r.workload, r.point, r.variant): r for r in s.results}
    counted = any(r.instructions_per_unit or r.instructions_why for r in s.results)
    by_event = metric not in ("time", "instructions", "memory")
    t = Table("ci", "head against base (rates; > 0% is faster)",
              columns("program", "point", "base", "head", "change [interval]", "verdict",
                      *([f"{metric} vs base"] if by_event else []),
                      *(["instructions/run head", "instructions vs base"] if counted else []), left=2))
    for c in s.comparisons:
        if (c.baseline, c.variant) != ("base", "head"):
            continue
        b, h = rate.get((c.experiment, c.workload, c.point, "base")), rate.get((c.experiment, c.workload, c.point, "head"))
        mark = "REGRESSION: " if c in regressions else ""
        cells = [c.workload, fmt_params(c.params, c.workload),
                 Cell(b and b.median, f"{fmt_num(b.median)} {b.rate_unit}" if b and b.median else "-"),
                 Cell(h and h.median, f"{fmt_num(h.median)} {h.rate_unit}" if h and h.median else "-"),
                 Cell(c.ratio, fmt_delta(c.ratio, c.ci)),
                 Cell(c.verdict, (mark if metric == "time" else "") + str(c.verdict), tag=verdict_tag(c.verdict))]
        if metric not in ("time", "instructions", "memory"):  # a named event decided
            e = c.events.get(metric)
            cells.append(Cell(e and e["ratio"], mark + (f"{fmt_delta(e['ratio'], e['ci'])} {e['verdict']}" if e
                                                        else "not counted")))
        if counted:
            if b is not None:
                _note_uncounted(b, t.notes)
            count, _, ratio = _witness_cells(h, c, t.notes) if h else (Cell(None), None, Cell(None))
            cells += [count, Cell(ratio.value, (mark if metric == "instructions" else "") + str(ratio))]
            if c.instruction_ratio and c.instruction_ratio != 1:
                t.notes.append(f"{c.workload} {fmt_params(c.params, c.workload)}: where the instructions changed: "
                               + functions_moved(b, h))
        t.add(*cells)
    return t


def functions_moved(base: Result, head: Result, most: int = 3) -> str:
    """The functions whose instruction counts (measure/instructions.py) moved the most
    from base to head, in words."""
    a, b = (dict(r.notes.get("instructions_by_function") or []) for r in (base, head))
    moved = sorted(set(a) | set(b), key=lambda fn: -abs(b.get(fn, 0) - a.get(fn, 0)))[:most]
    return "; ".join(f"{fn} {fmt_num(a.get(fn, 0))} to {fmt_num(b.get(fn, 0))}" for fn in moved
                     if a.get(fn, 0) != b.get(fn, 0)) or "not in the counted functions"


def pivot_table(results: list[Result]) -> Table | None:
    """Seed 004's table 1 layout: variants as rows; for each workload and parameter point
    a column of cycles per unit and one of percent of the best rate there ("% of max")."""
    ok = [r for r in results if r.status == Status.OK and r.median]
    points = sorted({(r.workload, fmt_params(r.params, r.workload)) for r in ok})
    if not 2 <= len(points) <= 8 or len({r.unit for r in ok}) != 1:
        return None  # a sweep has its curves; this layout is for a few workloads side by side
    at = {(r.variant, r.workload, fmt_params(r.params, r.workload)): r for r in ok}
    best = {p: max(r.median for (_, *q), r in at.items() if tuple(q) == p) for p in points}
    names = ["variant"]
    for w, ps in points:
        names += [f"{w} {ps} {ok[0].per_clock_unit}", "% of max"]
    t = Table("pivot", "per clock, and percent of the best variant at each point (the seed's table 1 layout)",
              columns(*names))
    for v in dict.fromkeys(r.variant for r in ok):
        cells: list[Any] = [v]
        for p in points:
            r = at.get((v, *p))
            cells += [Cell(r.cycles_per_unit if r else None),
                      Cell(r.median / best[p] if r else None, f"{100 * r.median / best[p]:.0f}%" if r else "-")]
        t.add(*cells)
    return t


# ---- stored analyses: one renderer per kind ------------------------------------------
