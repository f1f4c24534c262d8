"""Terminal views: the tables of report/views.py drawn with rich."""
from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape

from ..model import Summary
from .tables import fmt_num, to_rich
from .views import analysis_tables, explain_tables, geomean_table, process_table, workload_tables


def run_status_note(summary: Summary) -> str:
    """What an unfinished run's tables are: partial, and how to finish them."""
    rid = summary.run_id
    if summary.status == "running":
        return f"run {rid} is still running: these results are partial"
    return (f"run {rid} stopped before its end ({summary.status}): these are the results measured by then; "
            f"'cpulab run --resume {rid}' measures the rest")


def print_summary(summary: Summary, console: Console) -> None:
    m, timing = summary.machine, summary.timing
    console.print(f"[bold]{escape(m['cpu_model'])}[/] ({m['cpus']} CPUs, {escape(m['kernel'])}); "
                  f"timer [bold]{timing.get('timer')}[/], "
                  f"TSC {fmt_num((timing.get('tsc_hz') or 0) / 1e9)} GHz, core/TSC {fmt_num(timing.get('core_per_tsc'))}")
    if summary.status != "done":
        console.print(f"[yellow]{escape(run_status_note(summary))}[/]", soft_wrap=True)
    for t in workload_tables(summary).values():
        console.print(to_rich(t))
    if (g := geomean_table(summary)) is not None:
        console.print(to_rich(g))
    if (pt := process_table(summary)) is not None:
        console.print(to_rich(pt))
    comps = [c for c in summary.comparisons if c.method]
    how = ("paired: the ratio of variant to baseline in each round (run back to back), Wilcoxon signed-rank "
           "p and Hodges-Lehmann interval" if comps and comps[0].method == "paired"
           else "unpaired: Mann-Whitney p, bootstrap interval of the ratio of medians")
    alpha = comps[0].alpha if comps else 0.05
    console.print(f"[dim]verdict ({how}): faster/slower only when p < {alpha:.3g} after Holm"
                  + (" (0.05 spent over the looks of budget mode)" if alpha < 0.05 else "")
                  + ", the interval excludes 0 and |delta| >= 1% (layout noise); inconclusive when so few "
                  "processes could never be significant; otherwise same. Each observation is one process: its "
                  "fastest sample among those not left out (a sample is left out when its thread was off "
                  "the CPU for over 1% of it, or it migrated or saw steal time). A median interval marked "
                  "(NN%) covers only that much: too few processes for 95%.[/]")


def print_analysis(kind: str, data: Any, console: Console) -> None:
    """A stored analysis (probe, align, memlat levels, bandwidth, ...) as its tables."""
    for t in analysis_tables(kind, data):
        console.print(to_rich(t))


def print_explain(doc: dict, max_rows: int, console: Console) -> None:
    for t in explain_tables(doc, max_rows):
        console.print(to_rich(t))
