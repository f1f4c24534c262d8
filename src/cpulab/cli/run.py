"""`cpulab run`: a plan (a file, the built-in one, or -w/-v/-p flags) validated, measured
here or on a cluster, analysed, printed and written as an HTML report.
"""
from __future__ import annotations

import dataclasses
import sys

import click

from cpulab import machine
from cpulab.analysis import between_runs
from cpulab.cli import complete, pipeline
from cpulab.cli.common import (
    RichProgress, cluster_security, console, db_option, emit_json, fail, json_option, open_store, out, progress_bar,
    require_dask, tls_options
)
from cpulab.cli.flags import grouped, setting_options
from cpulab.measure import probes
from cpulab.measure.schedule.session import Stopped
from cpulab.plan import plan as plans
from cpulab.plan.origin import origin_of, source_dirs
from cpulab.plan.overrides import Overrides
from cpulab.report.terminal import print_machines, print_summary
from cpulab.spec.settings import declared
from cpulab.store.db import Store, StoreError
from cpulab.store.rows import StoredRun
from cpulab.cli.kinds import VIEWS


@click.command()
@click.argument("plan_file", required=False, shell_complete=complete.plan_names)
@grouped("chosen", "workload_names", "kernel_files", "variant_names", "param_flags", "baseline", "resume")
@click.option("-w", "--workload", "workload_names", multiple=True, shell_complete=complete.workload_names, help="Workload to run (repeatable).")
@click.option("-k", "--kernel", "kernel_files", multiple=True, type=click.Path(dir_okay=False),
              help="A kernel file of your own (cpulab.h; repeatable): run without a plan, named after the file.")
@click.option("-v", "--variant", "variant_names", multiple=True, shell_complete=complete.variant_names, help="Build variant (repeatable).")
@click.option("-p", "--param", "param_flags", multiple=True, help="key=value, key=a,b,c or key=16..1024 (powers of two).")
@click.option("--baseline", default=None, help="Variant the others are compared with (default O2).")
@click.option("--resume", type=int, default=None, metavar="RUN",
              help="Finish a stopped run: measure what it is missing, under the plan it stored.")
@setting_options()
@grouped("cluster", "cluster", "machines", "tls_ca", "tls_cert", "tls_key")
@click.option("--cluster", default=None, metavar="ADDRESS",
              help="Run on every cpulab worker of this dask scheduler (tcp://HOST:PORT or tls://...).")
@click.option("--machines", default=None, help="With --cluster: only these workers, comma-separated names.")
@tls_options
@grouped("output", "dry_run", "label", "db", "as_json")
@click.option("--dry-run", is_flag=True, help="Validate the plan and print it with canonical parameter values; "
                                              "build and measure nothing.")
@click.option("--label", default="", help="A name for this run (e.g. a version), kept with it: 'cpulab runs --label', "
                                       "'cpulab history --label'.")
@db_option
@json_option
def run(plan_file, chosen, settings, cluster, output):
    """Build and measure a plan (default: the built-in plan), then compare."""
    if chosen.resume is not None:
        resume(chosen, plan_file, settings, output)
        return
    p = chosen_plan(plan_file, chosen, settings)
    if output.dry_run:
        print_plan(p, output.as_json)
        return
    origin = origin_of(source_dirs(p, plan_file))
    if cluster.machines and not cluster.cluster:
        fail("--machines needs --cluster")
    if p.settings.against is not None:
        measured_here(open_store(output.db, create=False), p.settings.against, "--against")
    if cluster.cluster:
        run_on_cluster(p, open_store(output.db), cluster.cluster, cluster.machines,
                       cluster_security(cluster.tls_ca, cluster.tls_cert, cluster.tls_key), output.as_json,
                       output.label, origin)
        return
    finish(p, open_store(output.db), output.as_json, label=output.label, origin=origin)


def chosen_plan(plan_file: str | None, chosen, settings: dict) -> plans.Plan:
    """The plan a user chose (a file, the built-in one, or -w/-k/-v/-p), with the settings
    given as flags over its own, validated; or a one-line refusal."""
    try:
        from_flags = bool(chosen.workload_names or chosen.kernel_files or chosen.variant_names or chosen.param_flags)
        if from_flags:
            if plan_file:
                fail("give a plan file or --workload/--kernel/--variant/--param, not both")
            p = plans.from_flags(list(chosen.workload_names), list(chosen.variant_names),
                                 plans.parse_param_flags(list(chosen.param_flags)), chosen.baseline,
                                 list(chosen.kernel_files))
        else:
            p = plans.load(plan_file or plans.DEFAULT_PLAN)
        # from flags: --baseline is in already
        p = Overrides(baseline=None if from_flags else chosen.baseline, **settings).apply(p)
        plans.validate(p, plan_file or "plan")
        probes.check_names(p.probe_tables, plan_file or "plan")
    except plans.PlanError as e:
        fail(str(e))
    return p


def resume(chosen, plan_file: str | None, settings: dict, output) -> None:
    """`--resume RUN`: the stopped run measured on under the plan it stored; a seed may be
    given (a run stored before seeds were), nothing else."""
    flags = {"workload_names": "--workload", "kernel_files": "--kernel", "variant_names": "--variant",
             "param_flags": "--param", "baseline": "--baseline", "label": "--label"}
    given = ["PLAN"] * bool(plan_file) + [flags[k] for k, v in {**vars(chosen), "label": output.label}.items()
                                          if v and k != "resume"] + \
        [declared(k)["flags"][0] for k, v in settings.items() if v is not None and k != "seed"]
    if given:
        fail(f"--resume {chosen.resume} measures the plan the run stored; drop {', '.join(given)}")
    store = open_store(output.db, create=False)
    p = resumable_plan(store, chosen.resume)
    if p.settings.seed is None and settings["seed"] is not None:
        p = dataclasses.replace(p, settings=p.settings.given(seed=settings["seed"]))
    finish(p, store, output.as_json, chosen.resume)


def run_on_cluster(p: plans.Plan, store: Store, cluster: str, machines: str | None, sec, as_json: bool,
                   label: str = "", origin: dict | None = None) -> None:
    """Measure a plan on a cluster's machines, then print the machine table."""
    summary, report_error = pipeline.carry(
        store, lambda: execute_on_cluster(p, store, cluster, machines.split(",") if machines else None, sec,
                                          label, origin), between_runs.cluster_summary)
    pipeline.print_run(store, summary, as_json, lambda: print_machines(summary, out), report_error)


def execute_on_cluster(p: plans.Plan, store: Store, address: str, machine_names: list[str] | None, sec,
                       label: str = "", origin: dict | None = None) -> int:
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
                                              argv=sys.argv, label=label, origin=origin)
    except distributed.ClusterError as e:
        fail(str(e))
    except Stopped as e:
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


def finish(p: plans.Plan, store: Store, as_json: bool, resume: int | None = None, label: str = "",
           origin: dict | None = None) -> None:
    """Measure (or finish) a plan, then print the comparison and write the report.  A report
    that cannot be drawn is one line and exit status 2, after the results are printed."""
    summary, report_error = pipeline.carry(
        store, lambda: pipeline.measure_plan(p, store, resume, label, origin))
    pipeline.print_run(store, summary, as_json, lambda: print_summary(summary, out, VIEWS), report_error)


def print_plan(p: plans.Plan, as_json: bool) -> None:
    """A validated plan: its settings and, per experiment, the results it would make."""
    if as_json:
        emit_json(p.as_dict())
        return
    out.print(f"plan {p.name}: samples {p.settings.samples}, min_sample_time {p.settings.min_sample_time:g} s, grid {p.settings.grid}")
    for e in p.experiments:
        n = len(e.variants) * p.points_of(e)
        out.print(f"  {e.name}: {', '.join(e.workloads)} x {', '.join(e.variants)} (baseline {e.baseline}): "
                  f"{n} result{'s' if n != 1 else ''}, {p.processes_of(e.name)} rounds"
                  f"{' at the first look' if p.settings.budget else ''}")
        for w, given in e.params.items():
            out.print(f"    {w}: " + " ".join(f"{k}={','.join(v)}" for k, v in given.items()))
    if p.probe_tables:
        out.print(f"  probe tables: {', '.join(p.probe_tables)}")


COMMANDS = [run]
