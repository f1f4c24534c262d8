"""The command line: parse, call, print.  No measurement logic lives here."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from cpulab import analysis
from cpulab import machine
from cpulab import params
from cpulab import paths
from cpulab.plan import plan as plans
from cpulab import policy
from cpulab.measure import runner
from cpulab.plan import variants as toolchain
from cpulab import workloads
from cpulab.model import Verdict
from cpulab.measure.execute import calibrate_timing
from cpulab.report import views
from cpulab.report.tables import to_rich
from cpulab.report.terminal import print_analysis, print_explain, print_summary
from cpulab.store.db import Store, StoreError

console = Console(stderr=True)
out = Console(width=None if sys.stdout.isatty() else 140)


def fail(msg: str) -> None:
    """One line naming the problem, exit status 2."""
    click.echo(f"cpulab: error: {msg}", err=True)
    sys.exit(2)


def open_store(db: str | None) -> Store:
    try:
        return Store(db or paths.default_db())
    except StoreError as e:
        fail(str(e))


def emit_json(doc) -> None:
    click.echo(json.dumps(doc, indent=1, default=str))


class RichProgress:
    """Adapter from run.Progress to a rich progress bar."""

    def __init__(self, progress: Progress):
        self.p, self.task = progress, None

    def phase(self, name, total):
        if self.task is not None:
            self.p.update(self.task, visible=False)
        self.task = self.p.add_task(name, total=total, status="")

    def advance(self, label):
        self.p.update(self.task, advance=1, status=label)

    def note(self, text):
        self.p.console.print(text)


db_option = click.option("--db", type=click.Path(dir_okay=False), default=None,
                         help="SQLite store (default: $XDG_DATA_HOME/cpulab/cpulab.sqlite, or $CPULAB_DB).")
json_option = click.option("--json", "as_json", is_flag=True, help="Print one JSON document instead of tables.")


def processes_option(**kw):
    """Processes per result; --runs is its old name, still accepted."""
    return click.option("--processes", "--runs", "processes", type=click.IntRange(1, kw.pop("most", 10000)),
                        help="Processes per result, in interleaved rounds (--runs: deprecated alias).", **kw)


def tls_options(f):
    """--tls-ca/--tls-cert/--tls-key: all three turn on TLS for every cluster connection."""
    for name, what in (("--tls-key", "this end's private key"), ("--tls-cert", "this end's certificate"),
                       ("--tls-ca", "the CA that signed every end's certificate")):
        f = click.option(name, type=click.Path(dir_okay=False), default=None, help=f"TLS: {what} (PEM).")(f)
    return f


def cluster_security(tls_ca, tls_cert, tls_key):
    require_dask()
    from cpulab.measure import cluster as distributed
    try:
        return distributed.security(tls_ca, tls_cert, tls_key)
    except distributed.ClusterError as e:
        fail(str(e))


def require_dask():
    try:
        import distributed  # noqa: F401
    except ImportError:
        fail("clusters need dask.distributed: pip install 'cpulab[distributed]'")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="cpulab")
def cli():
    """cpulab: is X faster than Y on this work, by how much, and why?"""


def main() -> None:
    """Entry point: click's usage errors become one line and exit status 2."""
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.UsageError as e:
        where = f"{e.ctx.command_path}: " if e.ctx else ""
        fail(f"{where}{e.format_message()}")
    except click.exceptions.Abort as e:  # click's wrapping of an interrupt outside a run
        sys.exit(e.__cause__.exit_status if isinstance(e.__cause__, runner.Interrupted) else 130)
    except click.ClickException as e:
        fail(e.format_message())
    except StoreError as e:
        fail(str(e))


@cli.command()
@click.argument("plan_file", required=False)
@click.option("-w", "--workload", "workload_names", multiple=True, help="Workload to run (repeatable).")
@click.option("-v", "--variant", "variant_names", multiple=True, help="Build variant (repeatable).")
@click.option("-p", "--param", "param_flags", multiple=True, help="key=value, key=a,b,c or key=16..1024 (powers of two).")
@click.option("--baseline", default=None, help="Variant the others are compared with (default O2).")
@processes_option(default=None)
@click.option("--budget", type=click.FloatRange(*plans.LIMITS["budget"]), default=None,
              help="Seconds per experiment to spend adding rounds to undecided comparisons (0: a fixed count).")
@click.option("--precision", type=click.FloatRange(*plans.LIMITS["precision"]), default=None,
              help="A comparison is decided when significant or its interval is within +-this (default 0.01).")
@click.option("--samples", type=click.IntRange(*plans.LIMITS["samples"]), default=None, help="Samples per process.")
@click.option("--min-sample-time", type=click.FloatRange(*plans.LIMITS["min_sample_time"]), default=None,
              help="Seconds one sample lasts at least.")
@click.option("--profile", type=click.Choice(["quick", "full"]), default=None, help="Parameter grids: quick or full.")
@click.option("--timer", type=click.Choice(["auto", "perf", "tsc", "clock"]), default=None)
@click.option("--random-seed", "--seed", "random_seed", type=int, default=None,
              help="Random seed for the round order and layout padding (--seed: deprecated alias).")
@click.option("--cold", is_flag=True, default=None,
              help="Programs: evict their input files from the page cache before each run.")
@click.option("--resume", type=int, default=None, metavar="RUN",
              help="Finish a stopped run: measure what it is missing, under the plan it stored.")
@click.option("--against", type=int, default=None, metavar="RUN",
              help="Measure RUN's stored executables (built on this machine) beside the new builds, in the same "
                   "rounds: each variant is compared with its own build from RUN (VARIANT@RUN).")
@click.option("--method", type=click.Choice(list(policy.METHODS)), default=None,
              help="How variants meet their baseline (default turns: a point's processes alive together, "
                   "samples in turns).")
@click.option("--dry-run", is_flag=True, help="Validate the plan and print it with canonical parameter values; "
                                              "build and measure nothing.")
@click.option("--cluster", default=None, metavar="ADDRESS",
              help="Run on every cpulab worker of this dask scheduler (tcp://HOST:PORT or tls://...).")
@click.option("--machines", default=None, help="With --cluster: only these workers, comma-separated names.")
@tls_options
@db_option
@json_option
def run(plan_file, workload_names, variant_names, param_flags, baseline, processes, budget, precision, samples,
        min_sample_time, profile, timer, random_seed, cold, resume, against, method, dry_run, cluster, machines,
        tls_ca, tls_cert, tls_key, db, as_json):
    """Build and measure a plan (default: the built-in plan), then compare."""
    if resume is not None:
        given = [name for name, value in (("PLAN", plan_file), ("--workload", workload_names),
                                          ("--variant", variant_names), ("--param", param_flags),
                                          ("--baseline", baseline), ("--processes/--runs", processes), ("--samples", samples),
                                          ("--min-sample-time", min_sample_time), ("--profile", profile),
                                          ("--timer", timer)) if value]
        if given:
            fail(f"--resume {resume} measures the plan the run stored; drop {', '.join(given)}")
        store = open_store(db)
        finish(resumable_plan(store, resume), store, random_seed, as_json, resume)
        return
    try:
        if workload_names or variant_names or param_flags:
            if plan_file:
                fail("give a plan file or --workload/--variant/--param, not both")
            p = plans.from_flags(list(workload_names), list(variant_names),
                                 plans.parse_param_flags(list(param_flags)), baseline)
        else:
            p = plans.load(plan_file or plans.DEFAULT_PLAN)
        if processes is not None and budget is None:
            budget = 0.0  # --processes alone: a fixed count
        for attr, value in (("runs", processes), ("samples", samples), ("min_sample_time", min_sample_time),
                            ("profile", profile), ("timer", timer), ("cold", cold), ("budget", budget),
                            ("precision", precision), ("method", method), ("against", against)):
            if value is not None:
                setattr(p, attr, value)
        for attr, value in (("runs", processes), ("samples", samples)):
            if value is not None:  # the command line wins over every experiment's own count
                for e in p.experiments:
                    setattr(e, attr, None)
        if baseline and not (workload_names or variant_names or param_flags):
            for e in p.experiments:
                e.baseline = baseline
        plans.validate(p, plan_file or "plan")
    except plans.PlanError as e:
        fail(str(e))
    if dry_run:
        print_plan(p, as_json)
        return
    if machines and not cluster:
        fail("--machines needs --cluster")
    if against is not None:
        store = open_store(db)
        try:
            store.run(against)
        except StoreError as e:
            fail(f"--against {against}: {e}")
    if cluster:
        run_on_cluster(p, open_store(db), cluster, machines, cluster_security(tls_ca, tls_cert, tls_key),
                       random_seed, as_json)
        return
    finish(p, open_store(db), random_seed, as_json)


def run_on_cluster(p: plans.Plan, store: Store, cluster: str, machines: str | None, sec, random_seed: int | None,
                   as_json: bool) -> None:
    """Measure a plan on a cluster's machines, then print the machine table."""
    started = time.time()
    run_id = execute_on_cluster(p, store, cluster, machines.split(",") if machines else None, sec, random_seed)
    summary = machines_mod().cluster_summary(store, run_id)
    summary["wall_s"] = time.time() - started
    if as_json:
        emit_json(summary)
    else:
        print_machine_table(summary)
        console.print(f"[dim]run {run_id} stored in {escape(str(store.path))} ({summary['wall_s']:.0f} s)[/]")


def execute_on_cluster(p: plans.Plan, store: Store, address: str, machine_names: list[str] | None, sec,
                       seed: int | None) -> int:
    """Run a plan across a cluster with one progress bar per machine.  Ctrl-C cancels the
    cluster's work (exit 130); the scheduler gone ends the run interrupted (exit 1)."""
    require_dask()
    from cpulab.measure import cluster as distributed
    client = None
    try:
        client = distributed.connect(address, sec)
        with Progress(TextColumn("{task.description:14}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      TextColumn("{task.fields[status]}"), console=console, transient=True) as bar:
            return distributed.run_on_cluster(p, store, client, machine_names,
                                              progress_for=lambda name: MachineProgress(bar, name),
                                              argv=sys.argv, seed=seed)
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


class MachineProgress(RichProgress):
    """One machine's bars: its phases carry its name."""

    def __init__(self, progress: Progress, machine_name: str):
        super().__init__(progress)
        self.machine_name = machine_name

    def phase(self, name, total):
        super().phase(f"{self.machine_name} {name}", total)


def machines_mod():
    from cpulab.analysis import between_runs as machines
    return machines


def print_machine_table(summary: dict) -> None:
    for t in views.machine_tables(summary):
        out.print(to_rich(t))




def resumable_plan(store: Store, run_id: int) -> plans.Plan:
    """The stored plan of a run that can be resumed here, or a one-line refusal."""
    try:
        r = store.run(run_id)
    except StoreError as e:
        fail(str(e))
    if r["status"] in ("running", "done"):
        fail(f"--resume {run_id}: the run is {r['status']}; only a stopped run (interrupted or failed) is resumed")
    if not r["plan"].get("experiments"):
        fail(f"--resume {run_id}: a {r['plan'].get('name', 'probe')} run has no plan to resume")
    if r["machine_id"] != machine.fingerprint_id(machine.fingerprint()):
        fail(f"--resume {run_id}: the run was measured on machine {r['machine_id']}; resume it there")
    try:
        return plans.from_stored(r["plan"], f"run {run_id}")
    except plans.PlanError as e:
        fail(str(e))


def finish(p: plans.Plan, store: Store, random_seed: int | None, as_json: bool, resume: int | None = None) -> None:
    """Measure (or finish) a plan, then print the comparison and write the report.  A report
    that cannot be drawn is one line and exit status 2, after the results are printed."""
    started = time.time()
    run_id = execute(p, store, random_seed, resume)
    summary = analysis.analyse(store, run_id)
    summary.wall_s = time.time() - started
    from cpulab.report import html
    report_error = ""
    try:
        summary.report = str(html.write(summary, default_report_path(store, run_id)))
    except html.ReportError as e:
        summary.report, report_error = None, str(e)
    if as_json:
        emit_json(summary.to_dict())
    else:
        print_summary(summary, out)
        console.print(f"[dim]run {run_id} stored in {escape(str(store.path))} ({summary.wall_s:.0f} s)[/]")
        if summary.report:
            out.print(f"report: {summary.report}", markup=False)
    if report_error:
        fail(report_error)


def print_plan(p: plans.Plan, as_json: bool) -> None:
    """A validated plan: its settings and, per experiment, the results it would make."""
    if as_json:
        emit_json(p.as_dict())
        return
    out.print(f"plan {p.name}: runs {p.runs}, samples {p.samples}, min_sample_time {p.min_sample_time:g} s, "
              f"profile {p.profile}")
    for e in p.experiments:
        n = len(e.variants) * sum(len(workloads.get(w).grid(p.profile, e.params.get(w))) for w in e.workloads)
        out.print(f"  {e.name}: {', '.join(e.workloads)} x {', '.join(e.variants)} (baseline {e.baseline}): "
                  f"{n} result{'s' if n != 1 else ''}")
        for w, given in e.params.items():
            out.print(f"    {w}: " + " ".join(f"{k}={','.join(v)}" for k, v in given.items()))
    if p.probe_tables:
        out.print(f"  probe tables: {', '.join(p.probe_tables)}")


def execute(p: plans.Plan, store: Store, seed: int | None = None, resume: int | None = None) -> int:
    """Run a plan with a progress bar; on Ctrl-C, SIGTERM or SIGHUP say where the measured
    part is and exit with 128 + the signal (130 for Ctrl-C)."""
    with Progress(TextColumn("{task.description:8}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.fields[status]}", markup=False), console=console, transient=True) as bar:
        try:
            return runner.run_plan(p, store, progress=RichProgress(bar), argv=sys.argv, seed=seed, resume=resume)
        except runner.Interrupted as e:
            if e.run_id is not None:
                console.print(f"[yellow]interrupted ({e}): run {e.run_id} keeps what was measured "
                              f"(cpulab compare {e.run_id}; cpulab run --resume {e.run_id} finishes it)[/]",
                              soft_wrap=True)
            sys.exit(e.exit_status)


def sweep_plan(workload: str, variant: str, sweep: dict[str, list[str]], processes: int) -> plans.Plan:
    try:
        p = plans.from_flags([workload], [variant], sweep, variant)
    except plans.PlanError as e:
        fail(str(e))
    p.runs, p.samples = processes, 3
    return p


@cli.command()
@click.argument("run_ids", type=int, nargs=-1)
@click.option("--baseline", default=None, help="Compare against this variant instead of the plan's baseline.")
@click.option("--by", type=click.Choice(["variant", "machine"]), default="variant", show_default=True,
              help="machine: a cluster run's machines x workloads table.")
@click.option("--against", default=None, help="With --by machine: the machine the others are compared with (default: the fastest).")
@click.option("--fail-on", default=None, callback=lambda ctx, param, v: _verdict_words(v),
              help="Exit 1 when any comparison's verdict is one of these words (a comma list, e.g. "
                   "slower,unclear), for CI.")
@click.option("--method", type=click.Choice(list(policy.METHODS)), default=None,
              help="Override the run's method: turns (per-cycle ratios of processes that took samples in turns), "
                   "paired (signed-rank over per-round ratios) or unpaired (Mann-Whitney over processes).")
@db_option
@json_option
def compare(run_ids, baseline, by, against, fail_on, method, db, as_json):
    """Compare a run's variants against a baseline (default: the latest run), a cluster
    run's machines (--by machine), or the same workloads in two runs (RUN_A RUN_B)."""
    store = open_store(db)
    if len(run_ids) > 2:
        fail("compare takes at most two runs")
    if len(run_ids) == 2:
        try:
            doc = machines_mod().compare_runs(store, _run_id(store, run_ids[0]), _run_id(store, run_ids[1]))
        except StoreError as e:
            fail(str(e))
        rows = doc["comparisons"]
        if as_json:
            emit_json(doc)
        else:
            print_run_comparison(doc)
    else:
        run_id = _run_id(store, run_ids[0] if run_ids else None)
        if by == "machine":
            if not store.machine_runs(run_id):
                fail(f"--by machine: run {run_id} did not run on a cluster")
            doc = machines_mod().cluster_summary(store, run_id, against)
            if against and not any(m["machine"] == against for m in doc["machines"]):
                fail(f"--against {against}: run {run_id} has no such machine")
            rows = doc["machine_table"]
            if as_json:
                emit_json(doc)
            else:
                print_machine_table(doc)
        else:
            summary = analysis.summarise(store, run_id, baseline, method)
            if baseline and not any(r.variant == baseline for r in summary.results):
                fail(f"--baseline {baseline}: run {run_id} has no such variant")
            rows = [c.to_dict() for c in summary.comparisons]
            if as_json:
                emit_json(summary.to_dict())
            else:
                print_summary(summary, out)
    if fail_on and any(r["verdict"] in fail_on for r in rows):
        sys.exit(1)


def _verdict_words(text: str | None) -> set[str]:
    """--fail-on's comma list, each word a verdict."""
    if not text:
        return set()
    words = {w.strip() for w in text.split(",")}
    known = {v.value for v in Verdict}
    if bad := sorted(words - known):
        raise click.BadParameter(f"{bad[0]!r} is not a verdict (one of: {', '.join(sorted(known))})")
    return words


def print_run_comparison(doc: dict) -> None:
    out.print(to_rich(views.run_comparison_table(doc)))


@cli.command("list")
@json_option
def list_(as_json):
    """Workloads, variants, and which variants can be built here."""
    wl = [{"name": w.name, "unit": w.unit, "description": w.description, "params": w.defaults(),
           "accepts": {k: p.describe() for k, p in w.params.items()},
           "quick": w.quick, "full": w.full, "requires": w.requires} for w in workloads.registry().values()]
    vs = []
    for v in toolchain.BUILTIN.values():
        why = toolchain.unavailable_reason(v)
        vs.append({**v.as_dict(), "available": not why, "reason": why,
                   "compiler_version": toolchain.compiler_version(v.compiler) if not why else ""})
    plan_names = sorted(f.stem for f in plans.PLAN_DIR.glob("*.toml"))
    if as_json:
        emit_json({"workloads": wl, "variants": vs, "plans": plan_names})
        return
    t = Table(title="workloads", title_justify="left")
    for c in ("name", "unit", "parameters: default (accepted)", "description"):
        t.add_column(c)
    for w in wl:
        t.add_row(w["name"], w["unit"], escape("\n".join(f"{k}={v} ({w['accepts'][k]})" for k, v in w["params"].items())),
                  escape(w["description"]))
    out.print(t)
    t = Table(title="variants", title_justify="left")
    for c in ("name", "here", "compiler", "flags", "description"):
        t.add_column(c)
    for v in vs:
        flags = " ".join(v["abi_flags"] + v["cflags"] + (["| link:"] + v["ldflags"] if v["ldflags"] else []))
        here = "[green]yes[/]" if v["available"] else f"[yellow]skipped: {escape(v['reason'])}[/]"
        t.add_row(escape(v["name"]), here, v["compiler"], escape(flags), escape(v["description"]))
    out.print(t)
    out.print(f"built-in plans: {', '.join(plan_names)}")


@cli.command()
@json_option
def doctor(as_json):
    """Timers, counters, toolchains, governor and load: what would make results noisy."""
    from cpulab.build import artifacts as build
    art = build.build_artifact(workloads.get("sha256"), toolchain.BUILTIN["O2"])
    timing = calibrate_timing(art.path)
    fp, cond = machine.fingerprint(timing), machine.conditions()
    tools = {}
    for name in ("gcc", "clang", "musl-gcc", "llvm-mca", "llvm-objdump", "objdump", "perf",
                 "arm-linux-gnueabi-gcc", "arm-linux-gnueabihf-gcc", "aarch64-linux-gnu-gcc", "qemu-arm", "qemu-aarch64"):
        tools[name] = toolchain.compiler_version(name) or None
    doc = {"machine": fp, "conditions": cond, "timing": timing, "tools": tools,
           "warnings": machine.warnings(cond, fp)}
    if as_json:
        emit_json(doc)
        return
    t = Table(title="cpulab doctor", title_justify="left", show_header=False)
    t.add_column(style="bold")
    t.add_column()
    t.add_row("cpu", f"{fp['cpu_model']} ({fp['cpus']} CPUs, {fp['arch']})")
    t.add_row("caches", ", ".join(machine.cache_label(c) for c in fp["caches"]) or "unknown")
    t.add_row("timer", f"{timing.get('timer')}" + (f" (counters: {timing.get('perf_error')})"
                                                     if timing.get("perf_error") else " (hardware counters)"))
    if timing.get("tsc_hz"):
        t.add_row("TSC", f"{timing['tsc_hz'] / 1e9:.3f} GHz; core/TSC {timing['core_per_tsc']:.3f} "
                         f"(core about {timing['tsc_hz'] * timing['core_per_tsc'] / 1e9:.2f} GHz under load)")
    for k, v in cond.items():
        t.add_row(k, str(v))
    for k, v in tools.items():
        t.add_row(k, escape(v) if v else "[yellow]not found[/]")
    out.print(t)
    for w in doc["warnings"]:
        out.print(f"[yellow]warning:[/] {w}")


def _run_id(store: Store, run_id: int | None) -> int:
    run_id = run_id or store.latest_run()
    if run_id is None:
        fail(f"no runs in {store.path}; start with 'cpulab run'")
    try:
        store.run(run_id)
    except StoreError as e:
        fail(str(e))
    return run_id


def default_report_path(store: Store, run_id: int) -> Path:
    """Beside the store, named after it: two stores never overwrite each other's reports."""
    return store.path.parent / "reports" / f"{store.path.stem}-run-{run_id}.html"


@cli.command()
@click.argument("run_id", type=int, required=False)
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="Where to write the HTML file (default: reports/STORE-run-N.html beside the store).")
@db_option
def report(run_id, output, db):
    """Write a self-contained HTML report of a run (default: the latest)."""
    from cpulab.report import html
    store = open_store(db)
    run_id = _run_id(store, run_id)
    path = Path(output) if output else default_report_path(store, run_id)
    try:
        path = html.write(analysis.summarise(store, run_id), path)
    except html.ReportError as e:
        fail(str(e))
    click.echo(str(path))


@cli.command()
@click.argument("run_id", type=int, required=False)
@click.option("--format", "fmt", type=click.Choice(["json", "csv", "markdown", "cpulab"]), default="json",
              help="cpulab: the whole run with every sample, for 'cpulab import' elsewhere.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None, help="File to write (default: stdout).")
@db_option
def export(run_id, fmt, output, db):
    """Export a run's results and comparisons as JSON, CSV or Markdown, or the run itself."""
    from cpulab.report import exports
    store = open_store(db)
    if fmt == "cpulab":
        from cpulab.store import exchange
        text = json.dumps(exchange.export_run(store, _run_id(store, run_id)))
    else:
        summary = analysis.summarise(store, _run_id(store, run_id))
        text = exports.render(summary, fmt)
    if output:
        Path(output).write_text(text)
    else:
        click.echo(text, nl=False)


@cli.command("import")
@click.argument("file", type=click.Path(dir_okay=False))
@db_option
@json_option
def import_(file, db, as_json):
    """Add a run exported with 'cpulab export --format cpulab' to the store (once)."""
    from cpulab.store import exchange
    try:
        doc = exchange.read_document(Path(file))
    except exchange.RunFileError as e:
        fail(str(e))
    store = open_store(db)
    ids = exchange.import_document(store, doc)
    if as_json:
        emit_json([{"run_id": rid, "added": added} for rid, added in ids])
        return
    for rid, added in ids:
        click.echo(f"run {rid}: " + ("added" if added else "already in the store"))


@cli.command()
@click.option("--host", default="", help="Address to listen on (default: every interface).")
@click.option("--port", type=click.IntRange(0, 65535), default=8786, show_default=True)
@tls_options
def scheduler(host, port, tls_ca, tls_cert, tls_key):
    """A dask scheduler for 'cpulab worker' and 'cpulab run --cluster'.  Anyone who can
    reach it can make every worker run anything: keep it on a trusted network, or use TLS."""
    require_dask()
    from cpulab.measure import cluster as distributed
    sec = cluster_security(tls_ca, tls_cert, tls_key)
    try:
        distributed.serve_scheduler(host or None, port, sec, on_ready=lambda a: click.echo(f"scheduler at {a}"))
    except KeyboardInterrupt:
        sys.exit(130)
    except OSError as e:
        fail(f"scheduler: cannot listen on port {port}: {e.strerror or e}")


@cli.command()
@click.argument("address")
@click.option("--name", default=None, help="This machine's name in the cluster (default: the hostname).")
@click.option("--cpu", type=click.IntRange(0), default=None, help="Run measured processes on this CPU (default: the last one).")
@tls_options
def worker(address, name, cpu, tls_ca, tls_cert, tls_key):
    """Join a cluster as one machine: one process, one thread, one measurement at a time.
    It builds and runs whatever plan the scheduler sends it."""
    require_dask()
    from cpulab.measure import cluster as distributed
    sec = cluster_security(tls_ca, tls_cert, tls_key)
    import os
    if cpu is not None and cpu not in os.sched_getaffinity(0):
        fail(f"--cpu {cpu}: not one of this process's CPUs {sorted(os.sched_getaffinity(0))}")

    def ready(n, ident):
        fp = ident["fingerprint"]
        click.echo(f"worker {n}: {fp['cpu_model']} ({fp['cpus']} CPUs), fingerprint {ident['machine_id']}, "
                   f"joining {address}")
    try:
        distributed.serve_worker(address, name or distributed.default_name(), cpu, sec, on_ready=ready)
    except KeyboardInterrupt:
        sys.exit(130)


@cli.command("explain")
@click.argument("variant_a")
@click.argument("variant_b")
@click.option("-w", "--workload", "workload_name", default="sha256", show_default=True)
@click.option("-p", "--param", "param_flags", multiple=True, help="key=value: the parameter point to profile at.")
@click.option("--profile-code/--no-profile-code", default=True, show_default=True,
              help="Find the hot region from a sampled profile of both builds (else a static guess).")
@click.option("--program", "program_name", default=None,
              help="Explain two builds of this program of --plan instead of a kernel.")
@click.option("--plan", "plan_file", default=None, help="The plan that declares --program.")
@click.option("--rows", type=int, default=60, show_default=True, help="Rows of the side-by-side listing to print.")
@json_option
def explain_(variant_a, variant_b, workload_name, param_flags, profile_code, program_name, plan_file, rows, as_json):
    """Where the kernel (or a program) spends its time under two variants, and that code
    side by side."""
    from cpulab.build import artifacts as build
    from cpulab.analysis.explain import code as explain
    if program_name:
        doc = explain_program(variant_a, variant_b, program_name, plan_file, param_flags, profile_code)
        if as_json:
            emit_json({"program": program_name, "a": variant_a, "b": variant_b, **doc})
        else:
            print_explain({**doc, "a_name": variant_a, "b_name": variant_b}, rows, out)
        return
    try:
        w = workloads.get(workload_name)
        va, vb = toolchain.get(variant_a), toolchain.get(variant_b)
        given = plans.parse_param_flags(list(param_flags))
        # canonical values, unknown parameters refused, as for a run
        swept = plans.from_flags([workload_name], [variant_a], given, variant_a).experiments[0].params
        params = {k: v[0] for k, v in swept.get(workload_name, {}).items()}
    except KeyError as e:
        fail(e.args[0])
    except plans.PlanError as e:
        fail(str(e))
    arts = []
    for v in (va, vb):
        if why := toolchain.unavailable_reason(v):
            fail(f"variant {v.name}: skipped: {why}")
        try:
            arts.append(build.build_artifact(w, v))
        except build.BuildError as e:
            fail(f"variant {v.name}: build failed: {e}")
    try:
        doc = explain.explain(arts[0].path, arts[1].path, {**w.defaults(), **params},
                              explain.PROFILE_SECONDS if profile_code else 0, (variant_a, variant_b))
    except RuntimeError as e:
        fail(str(e))
    if as_json:
        emit_json({"workload": workload_name, "a": variant_a, "b": variant_b, **doc})
        return
    print_explain({**doc, "a_name": variant_a, "b_name": variant_b}, rows, out)


def explain_program(variant_a: str, variant_b: str, name: str, plan_file: str | None, param_flags,
                    profile_code: bool) -> dict:
    """Build the plan's program under both variants and explain them (one-line errors)."""
    from cpulab.analysis.explain import code as explain
    from cpulab.plan import programs
    if not plan_file:
        fail("--program needs --plan FILE (the plan that declares it)")
    try:
        p_plan = plans.load(plan_file)
        p = p_plan.programs[name]
        va, vb = p_plan.variant(variant_a), p_plan.variant(variant_b)
        given = plans.parse_param_flags(list(param_flags))
        if unknown := sorted(set(given) - set(p.inputs)):
            fail(f"--param {unknown[0]}: program {name} has no input of that name (it has: {', '.join(p.inputs) or 'none'})")
        point = {**p.grid()[0], **given}
    except plans.PlanError as e:
        fail(str(e))
    except KeyError as e:
        fail(e.args[0] if e.args and " " in str(e.args[0]) else
             f"--program {name}: not in {plan_file} (it has: {', '.join(p_plan.programs) or 'none'})")
    runs = []
    for v in (va, vb):
        b = programs.build_program(p, v)
        if b.status != "ok" or not b.exe:
            fail(f"program {name} under {v.name}: {b.error or 'its run template names no built file'}")
        runs.append((b.exe, programs.point_argv(p, v, b, point)[1]))
    try:
        return explain.explain_programs(*runs[0], *runs[1], (variant_a, variant_b), profile_code)
    except RuntimeError as e:
        fail(str(e))


def parse_size(option: str, text: str) -> int:
    try:
        return params.parse_size(text)
    except params.ParamError as e:
        fail(f"{option}: {e}")


@cli.command()
@click.option("--pages", default=None, help="Page modes, comma-separated: 4k, thp, huge (default: 4k,thp; full adds huge).")
@click.option("--mode", default="random", show_default=True,
              help="Comma-separated: random (prefetchers defeated), sequential, pagestride (one load per page: the TLBs).")
@click.option("--max-size", default=None, help="Largest working set, e.g. 64M (default 64M quick, 256M full).")
@click.option("--per-octave", type=click.IntRange(1, 16), default=4, show_default=True)
@click.option("--colour", is_flag=True,
              help="Instead: arbitrary against colour-balanced pages at 0.5-1.25x the L2 and L3 sizes (root).")
@click.option("--variant", default="O2", show_default=True)
@processes_option(default=3, show_default=True, most=100)
@click.option("--profile", type=click.Choice(["quick", "full"]), default="quick")
@db_option
@json_option
def memlat(pages, mode, max_size, per_octave, colour, variant, processes, profile, db, as_json):
    """Load-to-use latency against working-set size, with the cache levels found in it."""
    from cpulab.workloads.memory import memlat_sizes
    if colour:
        memlat_colour(variant, processes, db, as_json)
        return
    hi = parse_size("--max-size", max_size) if max_size else (256 if profile == "full" else 64) * 1024 ** 2
    page_modes = (pages or ("4k,thp,huge" if profile == "full" else "4k,thp")).split(",")
    sizes = [str(x) for x in memlat_sizes(1024, hi, per_octave)]
    store = open_store(db)
    run_id = execute(sweep_plan("memlat", variant, {"size": sizes, "pages": page_modes, "mode": mode.split(",")}, processes),
                     store)
    summary = analysis.analyse(store, run_id)
    curves = next(a.data for a in summary.analyses if a.kind == "memlat-levels")
    failed = [r for r in summary.results if not r.status.measured]
    doc = {"run_id": run_id, "machine": summary.machine, "os_caches": summary.machine.get("caches", []),
           "points": [{**pt, "series": c["series"]} for c in curves for pt in c["points"]],
           "levels": [{**lv, "series": c["series"]} for c in curves for lv in c["levels"]],
           "steps": next((a.data for a in summary.analyses if a.kind == "memlat-steps"), None),
           "failures": [{"params": r.params, "status": r.status, "error": r.error} for r in failed]}
    if as_json:
        emit_json(doc)
        return
    print_analysis("memlat-levels", curves, out)
    if doc["steps"]:
        print_analysis("memlat-steps", doc["steps"], out)
    for f in doc["failures"]:
        failure = f"{f['params'].get('pages')} {f['params'].get('size')}: {f['status']}: {f['error']}"
        out.print(f"[yellow]{escape(failure)}[/]")


COLOUR_FRACTIONS = (0.5, 0.75, 1.0, 1.25)


def memlat_colour(variant: str, processes: int, db, as_json: bool) -> None:
    """memlat --colour: for the L2 and the L3 (sysfs), random chases at COLOUR_FRACTIONS of
    the cache's size on the pages the kernel gave (colour=report, which also notes their
    colour imbalance) and on pages balanced over that cache's colours; one run per cache."""
    from cpulab.workloads.memory import page_colours
    caches = [c for c in machine.os_cache_sizes() if c["level"] in (2, 3) and c["type"] != "Instruction"
              and c["ways"]]
    if not caches:
        fail("--colour: sysfs names no L2 or L3 with its ways (/sys/devices/system/cpu/cpu0/cache)")
    store = open_store(db)
    rows = []
    for c in caches:
        sizes = [str(int(c["size_bytes"] * f) // 4096 * 4096) for f in COLOUR_FRACTIONS]
        grid = {"size": sizes, "colour": ["report", "balanced"], "pages": ["4k"], "mode": ["random"],
                "colour_cache_bytes": [str(c["size_bytes"])], "colour_ways": [str(c["ways"])]}
        run_id = execute(sweep_plan("memlat", variant, grid, processes), store)
        by = {(r.params["size"], r.params["colour"]): r for r in analysis.analyse(store, run_id).results}
        for f, size in zip(COLOUR_FRACTIONS, sizes):
            arb, bal = by.get((size, "report")), by.get((size, "balanced"))
            rows.append({"cache": c["name"], "run_id": run_id, "fraction": f, "size": int(size),
                         "colours": page_colours(c["size_bytes"], c["ways"]),
                         "arbitrary_ns": arb and arb.ns_per_unit, "balanced_ns": bal and bal.ns_per_unit,
                         "arbitrary_imbalance": arb and arb.notes.get("colour_imbalance"),
                         "arbitrary_pages_max": arb and arb.notes.get("colour_pages_max"),
                         "arbitrary_pages_min": arb and arb.notes.get("colour_pages_min"),
                         "balanced_error": bal and bal.error})
    if as_json:
        emit_json({"rows": rows})
        return
    t = Table(title="memlat: arbitrary against colour-balanced pages (ns per load)", title_justify="left")
    for col in ("cache", "x size", "bytes", "colours", "arbitrary", "balanced", "bal/arb",
                "arb pages/colour min-max", "arb imbalance"):
        t.add_column(col, justify="left" if col == "cache" else "right")
    def num(v, fmt):
        return "-" if v is None else format(v, fmt)
    for r in rows:
        ratio = r["balanced_ns"] / r["arbitrary_ns"] if r["balanced_ns"] and r["arbitrary_ns"] else None
        spread = ("-" if r["arbitrary_pages_min"] is None else
                  f"{r['arbitrary_pages_min']:.0f}-{r['arbitrary_pages_max']:.0f}")
        t.add_row(r["cache"], f"{r['fraction']:g}", params.human_bytes(r["size"]), str(r["colours"]),
                  num(r["arbitrary_ns"], ".2f"), num(r["balanced_ns"], ".2f"), num(ratio, ".3f"), spread,
                  num(r["arbitrary_imbalance"], ".2f"))
    out.print(t)
    for r in rows:
        if r["balanced_error"]:
            out.print(f"[yellow]{escape(r['cache'])} {r['size']}: balanced: {escape(r['balanced_error'])}[/]")


@cli.command()
@click.option("--ops", default="read,write,copy,triad", show_default=True)
@click.option("--max-size", default=None, help="Largest working set, e.g. 64M (default 64M quick, 256M full).")
@click.option("--per-octave", type=click.IntRange(1, 16), default=1, show_default=True)
@click.option("--variant", default="O3-native", show_default=True)
@processes_option(default=3, show_default=True, most=100)
@click.option("--profile", type=click.Choice(["quick", "full"]), default="quick")
@db_option
@json_option
def bandwidth(ops, max_size, per_octave, variant, processes, profile, db, as_json):
    """Read, write, copy and triad bandwidth against working-set size, labelled by cache level."""
    from cpulab.workloads.memory import memlat_sizes
    hi = parse_size("--max-size", max_size) if max_size else (256 if profile == "full" else 64) * 1024 ** 2
    sizes = [str(x) for x in memlat_sizes(4096, hi, per_octave)]
    store = open_store(db)
    run_id = execute(sweep_plan("bandwidth", variant, {"size": sizes, "op": ops.split(",")}, processes), store)
    summary = analysis.analyse(store, run_id)
    rows = next(a.data for a in summary.analyses if a.kind == "bandwidth")
    if as_json:
        emit_json({"run_id": run_id, "machine": summary.machine, "rows": rows})
        return
    print_analysis("bandwidth", rows, out)


@cli.command()
@click.argument("body", required=False)
@click.option("--att", is_flag=True, help="The body is AT&T syntax (default: Intel).")
@click.option("--as-loop", is_flag=True, help="The body is its own loop: it decrements --counter and jumps back with 'jnz LOOP'.")
@click.option("--counter", default="rcx", show_default=True, help="The loop counter register with --as-loop.")
@click.option("--table", type=click.Choice(["seed004"]), default=None, help="Reproduce seed 004's table 2 instead.")
@click.option("--mca", is_flag=True, help="Put llvm-mca's prediction for the same loop beside the measurement.")
@click.option("--repeats", type=click.IntRange(1, 100), default=5, show_default=True, help="Runs of each length (N and 2N).")
@click.option("--timer", type=click.Choice(["auto", "perf", "tsc", "clock"]), default="auto")
@db_option
@json_option
def probe(body, att, as_loop, counter, table, mca, repeats, timer, db, as_json):
    """Cycles per iteration, IPC and ns of a few x86-64 instructions, e.g. 'imul rax, rbx'.

    The body is unrolled in an aligned loop and run at two lengths (N and 2N) in several
    processes; the fastest run per execution is the headline.  Registers: rsi points at a zeroed 4 KiB buffer
    whose first qword holds its own address; rax = rsi (so 'mov rax, [rax]' chases in L1)."""
    from cpulab.measure import probes
    if (body is None) == (table is None):
        fail("give an instruction sequence or --table seed004 (one of them)")
    store = open_store(db)
    with runner.recorded_run(store, {"name": "probe", "experiments": [], "body": body, "table": table},
                             timer) as run_id:
        try:
            if table:
                doc = {"run_id": run_id, "rows": probes.seed004_table(mca=mca, repeats=repeats, timer=timer)}
            else:
                doc = {"run_id": run_id, **probes.measure_loop(body, "att" if att else "intel", repeats=repeats,
                                                               timer=timer, as_loop=as_loop, counter=counter)}
                if mca:
                    doc["mca"] = probes.mca_predict(body, "att" if att else "intel", as_loop=as_loop)
        except probes.ProbeError as e:
            fail(str(e).replace("\n", "; "))
        store.add_analysis(run_id, "probe", doc, key=table or body)
    if as_json:
        emit_json(doc)
        return
    print_analysis("probe", doc, out)


@cli.command()
@click.option("--full", is_flag=True, help="Every offset 0..63 (default: a few per group).")
@click.option("--timer", type=click.Choice(["auto", "perf", "tsc", "clock"]), default="auto")
@db_option
@json_option
def align(full, timer, db, as_json):
    """Latency of a dependent load by alignment (seed 004 table 3): L1 hit and L2 hit,
    4- and 8-byte loads, grouped as the seed groups them."""
    from cpulab.measure import probes
    store = open_store(db)
    with runner.recorded_run(store, {"name": "align", "experiments": [], "full": full}, timer) as run_id:
        doc = {"run_id": run_id, **probes.align_table(full=full, timer=timer)}
        store.add_analysis(run_id, "align", doc)
    if as_json:
        emit_json(doc)
        return
    print_analysis("align", doc, out)


@cli.command("time")
@click.argument("commands", nargs=-1, required=True)
@click.option("-r", "--processes", "--runs", "runs", type=click.IntRange(1, 100000), default=10, show_default=True,
              help="Timed processes per command, in interleaved random rounds (--runs as in hyperfine).")
@click.option("-w", "--warmup", type=click.IntRange(0, 10000), default=1, show_default=True,
              help="Untimed runs of each command first.")
@click.option("--budget", type=click.FloatRange(*plans.LIMITS["budget"]), default=0.0, show_default=True,
              help="Seconds to spend adding rounds to undecided comparisons at the looks (0: exactly --runs).")
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
@click.option("--timeout", type=click.FloatRange(min=0.001), default=300.0, show_default=True,
              help="Seconds one run may take.")
@click.option("--random-seed", "--seed", "random_seed", type=int, default=None,
              help="Random seed for the round order and layout padding (--seed: deprecated alias).")
@click.option("--export-json", type=click.Path(dir_okay=False), default=None)
@click.option("--export-csv", type=click.Path(dir_okay=False), default=None)
@click.option("--export-markdown", type=click.Path(dir_okay=False), default=None)
@db_option
@json_option
def time_(commands, runs, warmup, budget, prepare, setup, cleanup, int_scans, list_scans, names, shell, ignore_failure,
          cpu, timeout, random_seed, export_json, export_csv, export_markdown, db, as_json):
    """Time whole commands, the first being the baseline: wall, user and sys per run,
    peak RSS and context switches from wait4, verdicts as for kernels."""
    import os
    from cpulab.measure import processes
    from cpulab.report import exports
    if cpu is not None and cpu not in os.sched_getaffinity(0):
        fail(f"--cpu {cpu}: not one of the CPUs this process may use")
    try:
        scans = {name: processes.scan_values(lo, hi, name) for name, lo, hi in int_scans}
        scans.update({name: processes.list_values(values, name) for name, values in list_scans})
    except processes.CommandError as e:
        fail(str(e))
    store = open_store(db)
    how = processes.Rounds(warmup=warmup, timeout=timeout)
    with Progress(TextColumn("{task.description:8}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.fields[status]}"), console=console, transient=True) as bar:
        try:
            run_id = processes.time_commands(
                store, list(commands), names=list(names), scans=scans, how=how, runs=runs, budget=budget, shell=shell,
                prepare=prepare,
                setup=setup, cleanup=cleanup, check=processes.Check(exit=None) if ignore_failure else processes.Check(),
                cpu=cpu, seed=random_seed, progress=RichProgress(bar), argv=sys.argv)
        except processes.CommandError as e:
            fail(str(e))
        except KeyboardInterrupt:
            console.print(f"[yellow]interrupted: run {store.latest_run()} keeps what was measured[/]")
            sys.exit(130)
    summary = analysis.summarise(store, run_id)
    for fmt, path in (("json", export_json), ("csv", export_csv), ("markdown", export_markdown)):
        if path:
            Path(path).write_text(exports.render(summary, fmt))
    if as_json:
        emit_json(summary.to_dict())
    else:
        print_summary(summary, out)
        console.print(f"[dim]run {run_id} stored in {store.path}[/]")


@cli.command("runs")
@db_option
@json_option
def runs_(db, as_json):
    """The runs in the store."""
    store = open_store(db)
    rows = store.runs()
    if as_json:
        emit_json(rows)
        return
    t = Table(title=str(store.path), title_justify="left")
    for c in ("run", "started", "status", "results", "machine"):
        t.add_column(c)
    for r in rows:
        t.add_row(str(r["id"]), time.strftime("%Y-%m-%d %H:%M", time.localtime(r["started"])), r["status"],
                  str(r["results"]), r["machine_id"] + (f" ({r['machine']}, of run {r['parent']})" if r["parent"] else ""))
    out.print(t)


if __name__ == "__main__":
    main()
