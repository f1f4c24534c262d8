"""`cpulab time`: whole commands timed in rounds, hyperfine's job with cpulab's verdicts.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from cpulab.cli.common import (
    RichProgress, FiniteRange, console, db_option, fail, json_option, open_store, out, progress_bar, write_output
)
from cpulab.cli.pipeline import carry, print_run
from cpulab.measure.execute.processes import Rounds
from cpulab.measure.schedule.session import Interrupted
from cpulab.measure.schedule.timed_commands import list_values, scan_values, time_commands
from cpulab.plan import plan as plans
from cpulab.plan.origin import origin_of
from cpulab.plan.programs import Check, CommandError
from cpulab.report import exports
from cpulab.report.terminal import print_summary
from cpulab.cli.kinds import VIEWS


@click.command("time")
@click.argument("commands", nargs=-1, required=True)
@click.option("-r", "--processes", "--runs", "processes", type=click.IntRange(1, 100000), default=None,
              help="Timed processes per command, in interleaved random rounds, exactly (--runs as in hyperfine). "
                   "Default: as `cpulab run` decides, the fewest rounds that can be significant, then more for "
                   "undecided comparisons at the looks while --budget lasts.")
@click.option("-w", "--warmup", type=click.IntRange(0, 10000), default=1, show_default=True,
              help="Untimed runs of each command first.")
@click.option("--budget", type=FiniteRange(*plans.LIMITS["budget"]), default=None,
              help=f"Seconds to spend adding rounds to undecided comparisons at the looks (0: a fixed count). "
                   f"Default: {plans.Plan.budget:g}, or 0 with --runs.")
@click.option("--metric", type=click.Choice(["time", "memory"]), default="time", show_default=True,
              help="What decides: the time, or each run's peak memory (wait4's peak RSS: smaller/larger).")
@click.option("-p", "--prepare", default=None, help="Command run before each run of each command (untimed).")
@click.option("-s", "--setup", default=None, help="Command run once before all runs.")
@click.option("-c", "--cleanup", default=None, help="Command run once after all runs.")
@click.option("-P", "--parameter-scan", "int_scans", nargs=3, multiple=True, metavar="NAME LO HI",
              help="Run each command with {NAME} = LO, LO+1, ..., HI.")
@click.option("-L", "--parameter-list", "list_scans", nargs=2, multiple=True, metavar="NAME A,B,C",
              help="Run each command with {NAME} = A, B and C.")
@click.option("-n", "--name", "names", multiple=True, help="Name of each command, in order (default: its text).")
@click.option("-S", "--shell", is_flag=True, help="Run commands through /bin/sh -c (default: split, no shell).")
@click.option("-i", "--ignore-failure", is_flag=True, help="Time commands whatever their exit status.")
@click.option("--cpu", type=int, default=None, help="CPU to pin to (default: the last one).")
@click.option("--timeout", type=FiniteRange(min=0.001), default=300.0, show_default=True,
              help="Seconds one run may take.")
@click.option("--random-seed", "--seed", "random_seed", type=int, default=None,
              help="The run's seed: every random draw (which placement each round runs, the round order, the "
                   "stack and heap pads) comes from it, and it is stored with the run; the same seed repeats a "
                   "run's draws. Default: a new one each run (--seed: deprecated alias).")
@click.option("--label", default="", help="A name for this run (e.g. a version), kept with it: 'cpulab runs --label', "
                                       "'cpulab history --label'.")
@click.option("--export-json", type=click.Path(dir_okay=False), default=None)
@click.option("--export-csv", type=click.Path(dir_okay=False), default=None)
@click.option("--export-markdown", type=click.Path(dir_okay=False), default=None)
@db_option
@json_option
def time_(commands, processes, warmup, budget, metric, prepare, setup, cleanup, int_scans, list_scans, names, shell, ignore_failure,
          cpu, timeout, random_seed, label, export_json, export_csv, export_markdown, db, as_json):
    """Time whole commands, the first being the baseline: wall, user and sys per run,
    peak RSS and context switches from wait4, verdicts as for kernels."""

    if cpu is not None and cpu not in os.sched_getaffinity(0):
        fail(f"--cpu {cpu}: not one of the CPUs this process may use")
    try:
        scans = {name: scan_values(lo, hi, name) for name, lo, hi in int_scans}
        scans.update({name: list_values(values, name) for name, values in list_scans})
    except CommandError as e:
        fail(str(e))
    for path in (export_json, export_csv, export_markdown):  # said now, not after the run
        if path and not (Path(path).parent.is_dir() and os.access(Path(path).parent, os.W_OK)):
            fail(f"{path}: cannot write: its directory is not a writable directory")
    store = open_store(db)
    how = Rounds(warmup=warmup, timeout=timeout)

    def measure() -> int:
        with progress_bar() as bar:
            try:
                return time_commands(
                    store, list(commands), names=list(names), scans=scans, how=how, processes=processes, budget=budget,
                    shell=shell, prepare=prepare, setup=setup, cleanup=cleanup,
                    check=Check(exit=None) if ignore_failure else Check(), cpu=cpu, seed=random_seed,
                    progress=RichProgress(bar), metric=metric, argv=sys.argv, label=label, origin=origin_of([Path.cwd()]))
            except CommandError as e:
                fail(str(e))
            except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM/SIGHUP as session.Interrupted
                stopped = e if isinstance(e, Interrupted) else Interrupted()
                console.print(f"[yellow]interrupted ({stopped}): run {store.latest_run()} keeps what was measured[/]")
                sys.exit(stopped.exit_status)

    summary, report_error = carry(store, measure)
    for fmt, path in (("json", export_json), ("csv", export_csv), ("markdown", export_markdown)):
        if path:
            write_output(path, exports.render(summary, fmt))
    print_run(store, summary, as_json, lambda: print_summary(summary, out, VIEWS), report_error)


COMMANDS = [time_]
