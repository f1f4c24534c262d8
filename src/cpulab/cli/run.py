"""`cpulab run`: a plan (a file, the built-in one, or -w/-v/-p flags) validated, measured
here or on a cluster, analysed, printed and written as an HTML report.
"""
from __future__ import annotations

import sys

import click

from cpulab import machine
from cpulab.spec import policy
from cpulab.analysis import between_runs
from cpulab.cli import complete, pipeline
from cpulab.cli.common import (
    RichProgress, FiniteRange, cluster_security, console, db_option, emit_json, fail, json_option, open_store,
    out, processes_option, progress_bar, require_dask, tls_options
)
from cpulab.measure import probes
from cpulab.measure.schedule import runner
from cpulab.plan import plan as plans
from cpulab.plan.origin import origin_of, source_dirs
from cpulab.plan.overrides import Overrides
from cpulab.report.terminal import print_machines, print_summary
from cpulab.store.db import Store, StoreError
from cpulab.store.rows import StoredRun
from cpulab.cli.kinds import VIEWS


@click.command()
@click.argument("plan_file", required=False, shell_complete=complete.plan_names)
@click.option("-w", "--workload", "workload_names", multiple=True, shell_complete=complete.workload_names, help="Workload to run (repeatable).")
@click.option("-k", "--kernel", "kernel_files", multiple=True, type=click.Path(dir_okay=False),
              help="A kernel file of your own (cpulab.h; repeatable): run without a plan, named after the file.")
@click.option("-v", "--variant", "variant_names", multiple=True, shell_complete=complete.variant_names, help="Build variant (repeatable).")
@click.option("-p", "--param", "param_flags", multiple=True, help="key=value, key=a,b,c or key=16..1024 (powers of two).")
@click.option("--baseline", default=None, help="Variant the others are compared with (default O2).")
@processes_option(default=None)
@click.option("--budget", type=FiniteRange(*plans.LIMITS["budget"]), default=None,
              help="Seconds per experiment to spend adding rounds to undecided comparisons (0: a fixed count).")
@click.option("--precision", type=FiniteRange(*plans.LIMITS["precision"]), default=None,
              help="A comparison is decided when significant or its interval is within +-this (default 0.01).")
@click.option("--samples", type=click.IntRange(*plans.LIMITS["samples"]), default=None, help="Samples per process.")
@click.option("--min-sample-time", type=FiniteRange(*plans.LIMITS["min_sample_time"]), default=None,
              help="Seconds one sample lasts at least.")
@click.option("--grid", "--profile", "grid", type=click.Choice(["quick", "full"]), default=None,
              help="Parameter grids: quick or full (--profile: its old name).")
@click.option("--timer", type=click.Choice(["auto", "perf", "tsc", "clock"]), default=None)
@click.option("--random-seed", "--seed", "random_seed", type=int, default=None,
              help="The run's seed: every random draw (which placement each round runs, the round order, the "
                   "stack and heap pads) comes from it, and it is stored with the run; the same seed repeats a "
                   "run's draws. Default: a new one each run (--seed: deprecated alias).")
@click.option("--cold", is_flag=True, default=None,
              help="Programs: evict their input files from the page cache before each run.")
@click.option("--resume", type=int, default=None, metavar="RUN",
              help="Finish a stopped run: measure what it is missing, under the plan it stored.")
@click.option("--against", type=int, default=None, metavar="RUN", shell_complete=complete.run_ids,
              help="Measure RUN's stored executables (built on this machine) beside the new builds, in the same "
                   "rounds: each variant is compared with its own build from RUN (VARIANT@RUN).")
@click.option("--method", type=click.Choice(list(policy.METHODS)), default=None,
              help="How variants meet their baseline (default turns: a point's processes alive together, "
                   "samples in turns).")
@click.option("--instructions", is_flag=True, default=None,
              help="Also count each result's instructions per unit under valgrind, or stepped "
                   "on the core where valgrind cannot run it (exact, beside the time; "
                   "IPC where no counters exist).")
@click.option("--metric", type=click.Choice(list(policy.METRICS)), default=None,
              help="What the verdicts are read from (default time): instructions counts every result under valgrind "
                   "and calls a change of at least --precision faster/slower (exact, for noisy machines; a proxy "
                   "for time, which is measured and shown beside it).")
@click.option("--dry-run", is_flag=True, help="Validate the plan and print it with canonical parameter values; "
                                              "build and measure nothing.")
@click.option("--cluster", default=None, metavar="ADDRESS",
              help="Run on every cpulab worker of this dask scheduler (tcp://HOST:PORT or tls://...).")
@click.option("--machines", default=None, help="With --cluster: only these workers, comma-separated names.")
@click.option("--label", default="", help="A name for this run (e.g. a version), kept with it: 'cpulab runs --label', "
                                       "'cpulab history --label'.")
@tls_options
@db_option
@json_option
def run(plan_file, workload_names, kernel_files, variant_names, param_flags, baseline, processes, budget, precision, samples,
        min_sample_time, grid, timer, random_seed, cold, resume, against, method, instructions, metric, dry_run, cluster,
        machines, label, tls_ca, tls_cert, tls_key, db, as_json):
    """Build and measure a plan (default: the built-in plan), then compare."""
    if resume is not None:
        given = [name for name, value in (("PLAN", plan_file), ("--workload", workload_names), ("--kernel", kernel_files),
                                          ("--variant", variant_names), ("--param", param_flags),
                                          ("--baseline", baseline), ("--processes/--runs", processes), ("--samples", samples),
                                          ("--min-sample-time", min_sample_time), ("--grid", grid),
                                          ("--timer", timer), ("--metric", metric), ("--label", label)) if value]
        if given:
            fail(f"--resume {resume} measures the plan the run stored; drop {', '.join(given)}")
        store = open_store(db, create=False)
        finish(resumable_plan(store, resume), store, random_seed, as_json, resume)
        return
    try:
        from_flags = bool(workload_names or kernel_files or variant_names or param_flags)
        if from_flags:
            if plan_file:
                fail("give a plan file or --workload/--kernel/--variant/--param, not both")
            p = plans.from_flags(list(workload_names), list(variant_names),
                                 plans.parse_param_flags(list(param_flags)), baseline, list(kernel_files))
        else:
            p = plans.load(plan_file or plans.DEFAULT_PLAN)
        p = Overrides(processes=processes, samples=samples, min_sample_time=min_sample_time, grid=grid, timer=timer,
                      cold=cold, budget=budget, precision=precision, method=method, against=against,
                      baseline=None if from_flags else baseline,  # from flags: --baseline is in already
                      instructions=instructions, metric=metric).apply(p)
        plans.validate(p, plan_file or "plan")
        probes.check_names(p.probe_tables, plan_file or "plan")
    except plans.PlanError as e:
        fail(str(e))
    if dry_run:
        print_plan(p, as_json)
        return
    origin = origin_of(source_dirs(p, plan_file))
    if machines and not cluster:
        fail("--machines needs --cluster")
    if against is not None:
        measured_here(open_store(db, create=False), against, "--against")
    if cluster:
        run_on_cluster(p, open_store(db), cluster, machines, cluster_security(tls_ca, tls_cert, tls_key),
                       random_seed, as_json, label, origin)
        return
    finish(p, open_store(db), random_seed, as_json, label=label, origin=origin)


def run_on_cluster(p: plans.Plan, store: Store, cluster: str, machines: str | None, sec, random_seed: int | None,
                   as_json: bool, label: str = "", origin: dict | None = None) -> None:
    """Measure a plan on a cluster's machines, then print the machine table."""
    summary, report_error = pipeline.carry(
        store, lambda: execute_on_cluster(p, store, cluster, machines.split(",") if machines else None, sec,
                                          random_seed, label, origin), between_runs.cluster_summary)
    pipeline.print_run(store, summary, as_json, lambda: print_machines(summary, out), report_error)


def execute_on_cluster(p: plans.Plan, store: Store, address: str, machine_names: list[str] | None, sec,
                       seed: int | None, label: str = "", origin: dict | None = None) -> int:
    """Run a plan across a cluster with one progress bar per machine.  Ctrl-C cancels the
    cluster's work (exit 130); the scheduler gone ends the run interrupted (exit 1)."""
    require_dask()
    from cpulab.measure import cluster as distributed  # needs dask, an optional extra
    client = None
    try:
        client = distributed.connect(address, sec)
        with progress_bar(14) as bar:
            return distributed.run_on_cluster(p, store, client, machine_names,
                                              progress_for=lambda name: RichProgress(bar, name),
                                              argv=sys.argv, seed=seed, label=label, origin=origin)
    except distributed.ClusterError as e:
        fail(str(e))
    except runner.Stopped as e:
        rid = store.latest_run()
        console.print(f"[red]run {rid} stopped: {e}; it keeps what came home (cpulab compare --by machine {rid})[/]")
        sys.exit(1)
    except KeyboardInterrupt:
        rid = store.latest_run()
        console.print(f"[yellow]interrupted: the cluster's work is cancelled; run {rid} keeps what came home[/]")
        sys.exit(130)
    finally:
        if client is not None:
            client.close(timeout=5)


def measured_here(store: Store, run_id: int, option: str) -> StoredRun:
    """A run this cpulab measured on this machine, or a one-line refusal: an imported run
    (whatever machine it names) or another machine's is data, and nothing it stores (a
    variant's flags, an executable's path) is ever built or run."""
    try:
        r = store.run(run_id)
    except StoreError as e:
        fail(f"{option} {run_id}: {e}")
    if r.imported:
        fail(f"{option} {run_id}: the run was imported ({r.imported.partition(':')[0]} file): an imported run is "
             "data, nothing of it is built or run here; run its plan again")
    if r.machine_id != machine.fingerprint_id(machine.fingerprint()):
        fail(f"{option} {run_id}: the run was measured on machine {r.machine_id}, not this one")
    return r


def resumable_plan(store: Store, run_id: int) -> plans.Plan:
    """The stored plan of a run that can be resumed here, or a one-line refusal."""
    r = measured_here(store, run_id, "--resume")
    if r.status in ("running", "done"):
        fail(f"--resume {run_id}: the run is {r.status}; only a stopped run (interrupted or failed) is resumed")
    if r.record.kind != "plan":
        fail(f"--resume {run_id}: a {r.record.kind} run has no plan to resume")
    try:
        return plans.from_stored(r.record, f"run {run_id}")
    except plans.PlanError as e:
        fail(str(e))


def finish(p: plans.Plan, store: Store, random_seed: int | None, as_json: bool, resume: int | None = None,
           label: str = "", origin: dict | None = None) -> None:
    """Measure (or finish) a plan, then print the comparison and write the report.  A report
    that cannot be drawn is one line and exit status 2, after the results are printed."""
    summary, report_error = pipeline.carry(
        store, lambda: pipeline.measure_plan(p, store, random_seed, resume, label, origin))
    pipeline.print_run(store, summary, as_json, lambda: print_summary(summary, out, VIEWS), report_error)


def print_plan(p: plans.Plan, as_json: bool) -> None:
    """A validated plan: its settings and, per experiment, the results it would make."""
    if as_json:
        emit_json(p.as_dict())
        return
    out.print(f"plan {p.name}: samples {p.samples}, min_sample_time {p.min_sample_time:g} s, grid {p.grid}")
    for e in p.experiments:
        n = len(e.variants) * p.points_of(e)
        out.print(f"  {e.name}: {', '.join(e.workloads)} x {', '.join(e.variants)} (baseline {e.baseline}): "
                  f"{n} result{'s' if n != 1 else ''}, {p.processes_of(e.name)} rounds"
                  f"{' at the first look' if p.budget else ''}")
        for w, given in e.params.items():
            out.print(f"    {w}: " + " ".join(f"{k}={','.join(v)}" for k, v in given.items()))
    if p.probe_tables:
        out.print(f"  probe tables: {', '.join(p.probe_tables)}")


COMMANDS = [run]
