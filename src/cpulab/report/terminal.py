"""Terminal views: the tables of report/views.py drawn with rich."""
from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape

from cpulab.model import Machines, Summary
from cpulab.report.tables import fmt_num, to_rich
from cpulab.report.analysis_views import Views, analysis_tables, explain_tables
from cpulab.report.machine_views import machine_tables
from cpulab.report.event_views import event_tables
from cpulab.report.views import (
    carryover_line, geomean_table, legend, observation_line, process_table, time_split_line, workload_tables
)


def run_status_note(summary: Summary) -> str:
    """What an unfinished run's tables are: partial, and how to finish them."""
    rid = summary.run_id
    if summary.status == "running":
        return f"run {rid} is still running: these results are partial"
    return (f"run {rid} stopped before its end ({summary.status}): these are the results measured by then"
            + (f"; 'cpulab run --resume {rid}' measures the rest" if summary.plan.kind == "plan" else ""))


def print_summary(summary: Summary, console: Console, views: Views) -> None:
    m, timing = summary.machine, summary.timing
    console.print(f"[bold]{escape(m['cpu_model'])}[/] ({m['cpus']} CPUs, {escape(m['kernel'])}); "
                  f"timer [bold]{timing.get('timer')}[/], "
                  f"TSC {fmt_num((timing.get('tsc_hz') or 0) / 1e9)} GHz, core/TSC {fmt_num(timing.get('core_per_tsc'))}")
    if summary.status != "done":
        console.print(f"[yellow]{escape(run_status_note(summary))}[/]", soft_wrap=True)
    counted = event_tables(summary)
    for key, t in workload_tables(summary).items():
        console.print(to_rich(t))
        if key in counted:
            console.print(to_rich(counted[key]))
    if (g := geomean_table(summary)) is not None:
        console.print(to_rich(g))
    if (pt := process_table(summary)) is not None:
        console.print(to_rich(pt))
    for a in summary.analyses:  # kernels under the machine's roofs, when the run measured them
        if a.kind == "roofline":
            print_analysis(a.kind, a.data, console, views)
    if line := carryover_line(summary):
        console.print(f"[dim]{escape(line)}.[/]")
    if line := time_split_line(summary):
        console.print(f"[dim]{escape(line)}.[/]")
    console.print(f"[dim]verdict: {escape(legend(summary))}. {escape(observation_line(summary))}. A "
                  "median interval marked (NN%) covers only that much: too few processes for 95%.[/]")


def print_analysis(kind: str, data: Any, console: Console, views: Views) -> None:
    """A stored analysis (probe, align, memlat levels, bandwidth, ...) as its tables."""
    for t in analysis_tables(kind, data, views):
        console.print(to_rich(t))


def print_explain(doc: dict, max_rows: int, console: Console) -> None:
    for t in explain_tables(doc, max_rows):
        console.print(to_rich(t))


def print_machines(summary: Machines, console: Console) -> None:
    """A cluster run, or several runs side by side: one table per workload, machines as rows."""
    for t in machine_tables(summary):
        console.print(to_rich(t))
