"""Named counters (--events) beside the time: one table per experiment and workload that
counted any, each event per unit of work with its interval and, against the baseline,
its ratio from the same rounds with its verdict (larger, smaller, same, unclear); the
level-1 top-down shares where counted; and, once, the events this machine could not
count and why."""
from __future__ import annotations

from collections import defaultdict

from cpulab.model import Result, Summary
from cpulab.report.tables import Cell, Table, columns, fmt_delta, fmt_num
from cpulab.report.views import comparisons_by_point, fmt_params


def event_tables(s: Summary) -> dict[tuple[str, str], Table]:
    comps = comparisons_by_point(s)
    groups: dict[tuple, list[Result]] = defaultdict(list)
    for r in s.results:
        if r.events_per_unit or r.events_unavailable:
            groups[(r.experiment, r.workload)].append(r)
    tables = {}
    for (exp, wname), rows in groups.items():
        names = list(dict.fromkeys(k for r in rows for k in r.events_per_unit))
        unit = rows[0].unit.rstrip("s")
        base = next((c.baseline for c in s.comparisons if (c.experiment, c.workload) == (exp, wname)), "")
        t = Table("events", f"{wname} ({exp}): counters per {unit} [95% CI], ratio vs {base} [CI] from the same "
                            "rounds", columns("params", "variant", *(h for n in names for h in (n, f"{n} vs"))))
        for r in rows:
            c = comps.get((exp, wname, r.point, r.variant))
            cells = [fmt_params(r.params, wname), r.label]
            for n in names:
                ci = r.events_per_unit_ci.get(n)
                cells.append(Cell(r.events_per_unit.get(n), _with_ci(r.events_per_unit.get(n), ci)))
                e = (c.events if c is not None else {}).get(n)
                cells.append(Cell(e["ratio"] if e else None, f"{fmt_delta(e['ratio'], e['ci'])} {e['verdict']}"
                                  if e else ""))
            t.add(*cells)
        t.notes += [f"{r.label}: top-down level 1: " + ", ".join(f"{k} {100 * v:.0f}%" for k, v in r.topdown.items())
                    for r in rows if r.topdown]
        unavailable = {k: v for r in rows for k, v in r.events_unavailable.items()}
        t.notes += [f"{k}: not counted here: {why}" for k, why in unavailable.items()]
        tables[(exp, wname)] = t
    return tables


def _with_ci(v: float | None, ci: list[float] | None) -> str:
    if v is None:
        return "-"
    return fmt_num(v) + (f" [{fmt_num(ci[0])} .. {fmt_num(ci[1])}]" if ci and ci[0] != ci[1] else "")
