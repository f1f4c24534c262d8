"""`cpulab time`: whole commands timed in rounds, hyperfine's job with cpulab's verdicts.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from cpulab.cli.common import (
    RichProgress, console, db_option, fail, json_option, open_store, out, progress_bar, write_output
)
from cpulab.cli.flags import grouped, setting_options
from cpulab.cli.pipeline import carry, print_run
from cpulab.machine import events
from cpulab.measure.schedule.process_rounds import Rounds
from cpulab.measure.schedule.session import Interrupted
from cpulab.measure.schedule.timed_commands import TIME_DEFAULTS, list_values, scan_values, time_commands
from cpulab.plan.model import PlanError
from cpulab.plan.overrides import Overrides
from cpulab.plan.origin import origin_of
from cpulab.plan.programs import Check, CommandError
from cpulab.report import exports
from cpulab.report.terminal import print_summary
from cpulab.cli.kinds import VIEWS


@click.command("time")
@click.argument("commands", nargs=-1, required=True)
@setting_options("processes", "budget", "metric", "timeout", "events", "seed")
@grouped("how", "warmup", "prepare", "setup", "cleanup", "names", "shell", "ignore_failure", "cpu")
@click.option("-w", "--warmup", type=click.IntRange(0, 10000), default=1, show_default=True,
              help="Untimed runs of each command first.")
@click.option("-p", "--prepare", default=None, help="Command run before each run of each command (untimed).")
@click.option("-s", "--setup", default=None, help="Command run once before all runs.")
@click.option("-c", "--cleanup", default=None, help="Command run once after all runs.")
@click.option("-n", "--name", "names", multiple=True, help="Name of each command, in order (default: its text).")
@click.option("-S", "--shell", is_flag=True, help="Run commands through /bin/sh -c (default: split, no shell).")
@click.option("-i", "--ignore-failure", is_flag=True, help="Time commands whatever their exit status.")
@click.option("--cpu", type=int, default=None, help="CPU to pin to (default: the last one).")
@grouped("scans", "int_scans", "list_scans")
@click.option("-P", "--parameter-scan", "int_scans", nargs=3, multiple=True, metavar="NAME LO HI",
              help="Run each command with {NAME} = LO, LO+1, ..., HI.")
@click.option("-L", "--parameter-list", "list_scans", nargs=2, multiple=True, metavar="NAME A,B,C",
              help="Run each command with {NAME} = A, B and C.")
@grouped("output", "label", "export_json", "export_csv", "export_markdown", "db", "as_json")
@click.option("--label", default="", help="A name for this run (e.g. a version), kept with it: 'cpulab runs --label', "
                                       "'cpulab history --label'.")
@click.option("--export-json", type=click.Path(dir_okay=False), default=None)
@click.option("--export-csv", type=click.Path(dir_okay=False), default=None)
@click.option("--export-markdown", type=click.Path(dir_okay=False), default=None)
@db_option
@json_option
def time_(commands, settings, how, scans, output):
    """Time whole commands, the first being the baseline: wall, user and sys per run,
    peak RSS and context switches from wait4, verdicts as for kernels (by time, or by
    --metric memory)."""
    if settings["metric"] == "instructions":
        fail("--metric instructions: cpulab time decides by time or memory (instructions are counted for kernels)")
    try:
        settings = Overrides(**settings).over(TIME_DEFAULTS)
    except PlanError as e:
        fail(str(e))
    try:
        counted = events.spec_of(settings.events)
    except events.EventError as e:
        fail(f"--events: {e}")
    if how.cpu is not None and how.cpu not in os.sched_getaffinity(0):
        fail(f"--cpu {how.cpu}: not one of the CPUs this process may use")
    try:
        points = {name: scan_values(lo, hi, name) for name, lo, hi in scans.int_scans}
        points.update({name: list_values(values, name) for name, values in scans.list_scans})
    except CommandError as e:
        fail(str(e))
    exports_to = {"json": output.export_json, "csv": output.export_csv, "markdown": output.export_markdown}
    for path in filter(None, exports_to.values()):  # said now, not after the run
        if not (Path(path).parent.is_dir() and os.access(Path(path).parent, os.W_OK)):
            fail(f"{path}: cannot write: its directory is not a writable directory")
    store = open_store(output.db)

    def measure() -> int:
        with progress_bar() as bar:
            try:
                return time_commands(
                    store, list(commands), settings, names=list(how.names), scans=points,
                    how=Rounds(how.warmup, settings.timeout, events=counted), shell=how.shell, prepare=how.prepare,
                    setup=how.setup, cleanup=how.cleanup, check=Check(exit=None) if how.ignore_failure else Check(),
                    cpu=how.cpu, progress=RichProgress(bar), argv=sys.argv, label=output.label,
                    origin=origin_of([Path.cwd()]))
            except CommandError as e:
                fail(str(e))
            except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM/SIGHUP as session.Interrupted
                stopped = e if isinstance(e, Interrupted) else Interrupted()
                console.print(f"[yellow]interrupted ({stopped}): run {store.latest_run()} keeps what was measured[/]")
                sys.exit(stopped.exit_status)

    summary, report_error = carry(store, measure)
    for fmt, path in exports_to.items():
        if path:
            write_output(path, exports.render(summary, fmt))
    print_run(store, summary, output.as_json, lambda: print_summary(summary, out, VIEWS), report_error)


COMMANDS = [time_]
