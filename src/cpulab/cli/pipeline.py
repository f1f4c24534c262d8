"""The one way every run goes through the stages: measured (as its kind measures, with its
record stored when it starts), analysed from the store, drawn as an HTML report beside the
store, with the time each stage took kept in the run's time split.

Every command that makes a run (run, time, ci, bisect, memlat, bandwidth, the probe
commands, import, a cluster run) calls carry() with the measuring step of its kind and
prints what it wants of the Summary it returns.
"""
from __future__ import annotations

import sys
import time
from typing import Callable

from rich.markup import escape

from cpulab import analysis, time_split
from cpulab.cli.common import RichProgress, console, default_report_path, emit_json, fail, out, progress_bar
from cpulab.measure.schedule import runner
from cpulab.measure.schedule.session import Interrupted
from cpulab.model import Machines, Summary
from cpulab.plan.plan import Plan
from cpulab.report import html
from cpulab.store.db import Store
from cpulab.time_split import TimeSplit
from cpulab.cli.kinds import MAKERS, VIEWS


def analyse(store: Store, run_id: int) -> Summary:
    """The analyse stage with every kind's maker (cli/kinds.py)."""
    return analysis.analyse(store, run_id, MAKERS)


def carry(store: Store, measure: Callable[[], int],
          summarise: Callable[[Store, int], Summary | Machines] = analyse) -> tuple[Summary | Machines, str]:
    """Measure (measure() stores the run and returns its id), analyse and report a run:
    its Summary (a cluster run's: its Machines, with `summarise`), and why its report
    could not be drawn ("" when it was).  The analyses and the report are timed into the
    run's time split, which the report shows up to its own drawing."""
    started = time.time()
    run_id = measure()
    split = TimeSplit(store.run(run_id).conditions.get("time_split"))
    with split.timing(time_split.RUN, "analysis"):
        summary = summarise(store, run_id)
    summary.time_split = split.to_dict()
    with split.timing(time_split.RUN, "report"):
        try:
            summary.report, report_error = str(html.write(summary, default_report_path(store, run_id), VIEWS)), ""
        except html.ReportError as e:
            summary.report, report_error = None, str(e)
    summary.time_split = split.to_dict()
    store.add_conditions(run_id, {"time_split": summary.time_split})
    summary.wall_s = time.time() - started
    return summary, report_error


def print_run(store: Store, summary: Summary | Machines, as_json: bool, tables, report_error: str) -> None:
    """The --json document, or the tables with where the run and its report went; a
    report that could not be drawn is one line and exit status 2, after the results."""
    if as_json:
        emit_json(summary.to_dict())
    else:
        tables()
        console.print(f"[dim]run {summary.run_id} stored in {escape(str(store.path))} ({summary.wall_s:.0f} s)[/]")
        if summary.report:
            out.print(f"report: {summary.report}", markup=False)
    if report_error:
        fail(report_error)


def measure_plan(p: Plan, store: Store, resume: int | None = None, label: str = "",
                 origin: dict | None = None) -> int:
    """A plan measured here with a progress bar; on Ctrl-C, SIGTERM or SIGHUP say where the
    measured part is and exit with 128 + the signal (130 for Ctrl-C)."""
    with progress_bar() as bar:
        try:
            return runner.run_plan(p, store, progress=RichProgress(bar), argv=sys.argv, resume=resume,
                                   label=label, origin=origin)
        except Interrupted as e:
            if e.run_id is not None:
                console.print(f"[yellow]interrupted ({e}): run {e.run_id} keeps what was measured "
                              f"(cpulab compare {e.run_id}; cpulab run --resume {e.run_id} finishes it)[/]",
                              soft_wrap=True)
            sys.exit(e.exit_status)


def carry_plan(p: Plan, store: Store, label: str = "",
               origin: dict | None = None) -> tuple[Summary, str]:
    """A plan carried through every stage (carry, measure_plan)."""
    return carry(store, lambda: measure_plan(p, store, label=label, origin=origin))
