"""The command line: parse, call, print.  No measurement logic lives here."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from . import analyse, machine, paths, plan as plans, run as runner, toolchain, workloads
from .execute import calibrate_timing
from .store import Store, StoreError

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
    except click.exceptions.Abort:
        sys.exit(130)
    except click.ClickException as e:
        fail(e.format_message())


@cli.command()
@click.argument("plan_file", required=False)
@click.option("-w", "--workload", "workload_names", multiple=True, help="Workload to run (repeatable).")
@click.option("-v", "--variant", "variant_names", multiple=True, help="Build variant (repeatable).")
@click.option("-p", "--param", "param_flags", multiple=True, help="key=value, key=a,b,c or key=16..1024 (powers of two).")
@click.option("--baseline", default=None, help="Variant the others are compared with (default O2).")
@click.option("--runs", type=click.IntRange(1, 10000), default=None,
              help="Processes per result, in interleaved rounds: a fixed count (the first look with --budget).")
@click.option("--budget", type=click.FloatRange(min=0), default=None,
              help="Seconds per experiment to spend adding rounds to undecided comparisons (0: fixed --runs).")
@click.option("--precision", type=click.FloatRange(0.0001, 0.5), default=None,
              help="A comparison is decided when significant or its interval is within +-this (default 0.01).")
@click.option("--samples", type=click.IntRange(1, 10000), default=None, help="Samples per process.")
@click.option("--min-sample-time", type=click.FloatRange(min=0.0001), default=None, help="Seconds one sample lasts at least.")
@click.option("--profile", type=click.Choice(["quick", "full"]), default=None, help="Parameter grids: quick or full.")
@click.option("--timer", type=click.Choice(["auto", "perf", "tsc", "clock"]), default=None)
@click.option("--seed", type=int, default=None, help="Seed for the round order and layout padding.")
@db_option
@json_option
def run(plan_file, workload_names, variant_names, param_flags, baseline, runs, budget, precision, samples,
        min_sample_time, profile, timer, seed, db, as_json):
    """Build and measure a plan (default: the built-in plan), then compare."""
    try:
        if workload_names or variant_names or param_flags:
            if plan_file:
                fail("give a plan file or --workload/--variant/--param, not both")
            p = plans.from_flags(list(workload_names), list(variant_names),
                                 plans.parse_param_flags(list(param_flags)), baseline)
        else:
            p = plans.load(plan_file or plans.DEFAULT_PLAN)
        if runs is not None and budget is None:
            budget = 0.0  # --runs alone: a fixed count
        for attr, value in (("runs", runs), ("samples", samples), ("min_sample_time", min_sample_time),
                            ("profile", profile), ("timer", timer), ("budget", budget), ("precision", precision)):
            if value is not None:
                setattr(p, attr, value)
        for attr, value in (("runs", runs), ("samples", samples)):
            if value is not None:  # the command line wins over every experiment's own count
                for e in p.experiments:
                    setattr(e, attr, None)
        if baseline and not (workload_names or variant_names or param_flags):
            for e in p.experiments:
                e.baseline = baseline
        plans.validate(p, plan_file or "plan")
    except plans.PlanError as e:
        fail(str(e))
    store = open_store(db)
    started = time.time()
    run_id = execute(p, store, seed)
    summary = analyse.summarise(store, run_id)
    summary["wall_s"] = time.time() - started
    from .report import html
    summary["report"] = str(html.write(summary, default_report_path(store, run_id), store))
    if as_json:
        emit_json(summary)
    else:
        analyse_print(summary)
        console.print(f"[dim]run {run_id} stored in {store.path} ({summary['wall_s']:.0f} s)[/]")
        out.print(f"report: {summary['report']}")


def execute(p: plans.Plan, store: Store, seed: int | None = None) -> int:
    """Run a plan with a progress bar; on Ctrl-C say where the measured part is, exit 130."""
    with Progress(TextColumn("{task.description:8}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.fields[status]}"), console=console, transient=True) as bar:
        try:
            return runner.run_plan(p, store, progress=RichProgress(bar), argv=sys.argv, seed=seed)
        except KeyboardInterrupt:
            rid = store.latest_run()
            console.print(f"[yellow]interrupted: run {rid} keeps what was measured "
                          f"(cpulab compare {rid})[/]")
            sys.exit(130)


def sweep_plan(workload: str, variant: str, params: dict[str, list[str]], runs: int) -> plans.Plan:
    try:
        p = plans.from_flags([workload], [variant], params, variant)
    except plans.PlanError as e:
        fail(str(e))
    p.runs, p.samples = runs, 3
    return p


def analyse_print(summary: dict) -> None:
    from .report.terminal import print_summary
    print_summary(summary, out)


@cli.command()
@click.argument("run_id", type=int, required=False)
@click.option("--baseline", default=None, help="Compare against this variant instead of the plan's baseline.")
@click.option("--method", type=click.Choice(["unpaired", "paired"]), default="unpaired",
              help="unpaired: Mann-Whitney over processes; paired: signed-rank over per-round ratios.")
@db_option
@json_option
def compare(run_id, baseline, method, db, as_json):
    """Compare the variants of a run (default: the latest) against a baseline."""
    store = open_store(db)
    run_id = _run_id(store, run_id)
    summary = analyse.summarise(store, run_id, baseline, method)
    if baseline and not any(r["variant"] == baseline for r in summary["results"]):
        fail(f"--baseline {baseline}: run {run_id} has no such variant")
    if as_json:
        emit_json(summary)
    else:
        analyse_print(summary)


@cli.command("list")
@json_option
def list_(as_json):
    """Workloads, variants, and which variants can be built here."""
    wl = [{"name": w.name, "unit": w.unit, "description": w.description, "params": w.params,
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
    for c in ("name", "unit", "parameters (default)", "description"):
        t.add_column(c)
    for w in wl:
        t.add_row(w["name"], w["unit"], " ".join(f"{k}={v}" for k, v in w["params"].items()), w["description"])
    out.print(t)
    t = Table(title="variants", title_justify="left")
    for c in ("name", "here", "compiler", "flags", "description"):
        t.add_column(c)
    for v in vs:
        flags = " ".join(v["abi_flags"] + v["cflags"] + (["| link:"] + v["ldflags"] if v["ldflags"] else []))
        t.add_row(v["name"], "[green]yes[/]" if v["available"] else f"[yellow]skipped: {v['reason']}[/]",
                  v["compiler"], flags, v["description"])
    out.print(t)
    out.print(f"built-in plans: {', '.join(plan_names)}")


@cli.command()
@json_option
def doctor(as_json):
    """Timers, counters, toolchains, governor and load: what would make results noisy."""
    from . import build
    art = build.build_artifact(workloads.get("sha256"), toolchain.BUILTIN["O2"])
    timing = calibrate_timing(art.path)
    fp, cond = machine.fingerprint(timing), machine.conditions()
    tools = {}
    for name in ("gcc", "clang", "musl-gcc", "llvm-mca", "llvm-objdump", "objdump", "perf"):
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
        t.add_row(k, v or "[yellow]not found[/]")
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
    from .report import html
    store = open_store(db)
    run_id = _run_id(store, run_id)
    path = html.write(analyse.summarise(store, run_id), Path(output) if output else default_report_path(store, run_id), store)
    click.echo(str(path))


@cli.command()
@click.argument("run_id", type=int, required=False)
@click.option("--format", "fmt", type=click.Choice(["json", "csv", "markdown"]), default="json")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None, help="File to write (default: stdout).")
@db_option
def export(run_id, fmt, output, db):
    """Export a run's results and comparisons as JSON, CSV or Markdown."""
    from .report import exports
    store = open_store(db)
    summary = analyse.summarise(store, _run_id(store, run_id))
    text = exports.render(summary, fmt)
    if output:
        Path(output).write_text(text)
    else:
        click.echo(text, nl=False)


@cli.command("explain")
@click.argument("variant_a")
@click.argument("variant_b")
@click.option("-w", "--workload", "workload_name", default="sha256", show_default=True)
@click.option("--rows", type=int, default=60, show_default=True, help="Rows of the side-by-side listing to print.")
@json_option
def explain_(variant_a, variant_b, workload_name, rows, as_json):
    """The kernel's hot loop under two variants, side by side, with counts and alignment."""
    from . import build, explain
    try:
        w = workloads.get(workload_name)
        va, vb = toolchain.get(variant_a), toolchain.get(variant_b)
    except KeyError as e:
        fail(e.args[0])
    arts = []
    for v in (va, vb):
        if why := toolchain.unavailable_reason(v):
            fail(f"variant {v.name}: skipped: {why}")
        try:
            arts.append(build.build_artifact(w, v))
        except build.BuildError as e:
            fail(f"variant {v.name}: build failed: {e}")
    doc = explain.explain(arts[0].path, arts[1].path)
    if as_json:
        emit_json({"workload": workload_name, "a": variant_a, "b": variant_b, **doc})
        return
    from .report.terminal import explain_tables
    for t in explain_tables(doc, variant_a, variant_b, rows):
        out.print(t)


def parse_size(text: str) -> int:
    try:
        return plans.parse_size(text)
    except plans.PlanError as e:
        fail(str(e))


@cli.command()
@click.option("--pages", default=None, help="Page modes, comma-separated: 4k, thp, huge (default: 4k,thp; full adds huge).")
@click.option("--mode", default="random", show_default=True, help="random (prefetchers defeated) or sequential.")
@click.option("--max-size", default=None, help="Largest working set, e.g. 64M (default 64M quick, 256M full).")
@click.option("--per-octave", type=click.IntRange(1, 16), default=4, show_default=True)
@click.option("--variant", default="O2", show_default=True)
@click.option("--runs", type=click.IntRange(1, 100), default=3, show_default=True)
@click.option("--profile", type=click.Choice(["quick", "full"]), default="quick")
@db_option
@json_option
def memlat(pages, mode, max_size, per_octave, variant, runs, profile, db, as_json):
    """Load-to-use latency against working-set size, with the cache levels found in it."""
    from .analysis import memory, sweeps
    from .workloads.memory import memlat_sizes
    hi = parse_size(max_size) if max_size else (256 if profile == "full" else 64) * 1024 ** 2
    page_modes = (pages or ("4k,thp,huge" if profile == "full" else "4k,thp")).split(",")
    sizes = [str(x) for x in memlat_sizes(1024, hi, per_octave)]
    store = open_store(db)
    run_id = execute(sweep_plan("memlat", variant, {"size": sizes, "pages": page_modes, "mode": [mode]}, runs), store)
    summary = analyse.summarise(store, run_id)
    caches = memory.os_cache_sizes()
    curves = sweeps.memlat_curves(summary["results"], caches)
    store.add_analysis(run_id, "memlat-levels", curves)
    failed = [r for r in summary["results"] if r["status"] not in ("ok", "identical")]
    doc = {"run_id": run_id, "machine": summary["machine"], "os_caches": caches,
           "points": [{**pt, "series": c["series"]} for c in curves for pt in c["points"]],
           "levels": [{**lv, "series": c["series"]} for c in curves for lv in c["levels"]],
           "failures": [{"params": r["params"], "status": r["status"], "error": r["error"]} for r in failed]}
    if as_json:
        emit_json(doc)
        return
    from .report.terminal import memlat_tables
    for t in memlat_tables(curves):
        out.print(t)
    for c in curves:
        out.print(f"[bold]{c['series']}[/]: " + c["description"].replace("\n", "\n  "))
    for f in doc["failures"]:
        out.print(f"[yellow]{f['params'].get('pages')} {f['params'].get('size')}: {f['status']}: {f['error']}[/]")


@cli.command()
@click.option("--ops", default="read,write,copy,triad", show_default=True)
@click.option("--max-size", default=None, help="Largest working set, e.g. 64M (default 64M quick, 256M full).")
@click.option("--per-octave", type=click.IntRange(1, 16), default=1, show_default=True)
@click.option("--variant", default="O3-native", show_default=True)
@click.option("--runs", type=click.IntRange(1, 100), default=3, show_default=True)
@click.option("--profile", type=click.Choice(["quick", "full"]), default="quick")
@db_option
@json_option
def bandwidth(ops, max_size, per_octave, variant, runs, profile, db, as_json):
    """Read, write, copy and triad bandwidth against working-set size, labelled by cache level."""
    from .analysis import memory, sweeps
    from .workloads.memory import memlat_sizes
    hi = parse_size(max_size) if max_size else (256 if profile == "full" else 64) * 1024 ** 2
    sizes = [str(x) for x in memlat_sizes(4096, hi, per_octave)]
    store = open_store(db)
    run_id = execute(sweep_plan("bandwidth", variant, {"size": sizes, "op": ops.split(",")}, runs), store)
    summary = analyse.summarise(store, run_id)
    rows = sweeps.bandwidth_rows(summary["results"], memory.os_cache_sizes())
    store.add_analysis(run_id, "bandwidth", rows)
    if as_json:
        emit_json({"run_id": run_id, "machine": summary["machine"], "rows": rows})
        return
    from .report.terminal import bandwidth_table
    out.print(bandwidth_table(rows))


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
    from . import probes
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
    from .report.terminal import probe_table
    out.print(probe_table(doc))


@cli.command()
@click.option("--full", is_flag=True, help="Every offset 0..63 (default: a few per group).")
@click.option("--timer", type=click.Choice(["auto", "perf", "tsc", "clock"]), default="auto")
@db_option
@json_option
def align(full, timer, db, as_json):
    """Latency of a dependent load by alignment (seed 004 table 3): L1 hit and L2 hit,
    4- and 8-byte loads, grouped as the seed groups them."""
    from . import probes
    store = open_store(db)
    with runner.recorded_run(store, {"name": "align", "experiments": [], "full": full}, timer) as run_id:
        doc = {"run_id": run_id, **probes.align_table(full=full, timer=timer)}
        store.add_analysis(run_id, "align", doc)
    if as_json:
        emit_json(doc)
        return
    from .report.terminal import align_table
    out.print(align_table(doc))


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
                  str(r["results"]), r["machine_id"])
    out.print(t)


if __name__ == "__main__":
    main()
