"""The memory hierarchy: `memlat` (latency against working-set size, its steps, and page
colour) and `bandwidth`.
"""
from __future__ import annotations

import click
from rich.markup import escape

from cpulab.plan import plan as plans
from cpulab.cli import complete
from cpulab.cli.common import db_option, emit_json, fail, json_option, open_store, out, size_option
from cpulab.cli.flags import grouped, setting_options
from cpulab.cli.pipeline import carry_plan
from cpulab.report.terminal import print_analysis
from cpulab.workloads.memory import memlat_sizes
from cpulab.cli.kinds import VIEWS


@click.command()
@grouped("sweep", "pages", "mode", "max_size", "per_octave", "colour")
@click.option("--pages", default=None, help="Page modes, comma-separated: 4k, thp, huge (default: 4k,thp; full adds huge).")
@click.option("--mode", default=None,
              help="Comma-separated: random (prefetchers defeated), sequential, pagestride (one load per page: the "
                   "TLBs).  Default: the grid's, random (and sequential in full) and pagestride over sizes of its own, "
                   "which measures the TLB reach that explains a step; random where sizes or pages are given.")
@click.option("--max-size", default=None, help="Largest working set, e.g. 64M (default 64M quick, 256M full).")
@click.option("--per-octave", type=click.IntRange(1, 16), default=None, help="Sizes per doubling (default 4).")
@click.option("--colour", is_flag=True,
              help="Instead: the seeds plan's page-colour experiment: arbitrary against colour-balanced pages "
                   "at 0.5-1.25x the L2 and L3 sizes (balanced pages need root).")
@click.option("--variant", default="O2", show_default=True, shell_complete=complete.variant_names)
@setting_options("processes", "grid")
@grouped("output", "db", "as_json")
@db_option
@json_option
def memlat(sweep, variant, settings, output):
    """Load-to-use latency against working-set size, with the cache levels found in it
    (3 processes a size unless --processes; 8 with --colour, its comparison is paired by round),
    each process taking the seeds run's samples."""
    if sweep.colour:
        memlat_colour(variant, settings["processes"], output.db, output.as_json)
        return
    grid = settings["grid"] or "quick"
    exp = seeds_experiment("memory-latency")
    summary, _ = carry_plan(sweep_plan("memlat", variant, memlat_points(sweep, grid == "full"),
                                       settings["processes"] or exp.processes, grid, exp.samples),
                            open_store(output.db))
    as_json = output.as_json
    curves = next(a.data for a in summary.analyses if a.kind == "memlat-levels")
    failed = [r for r in summary.results if not r.status.measured]
    doc = {"run_id": summary.run_id, "machine": summary.machine, "os_caches": summary.machine.get("caches", []),
           "points": [{**pt, "series": c["series"]} for c in curves for pt in c["points"]],
           "levels": [{**lv, "series": c["series"]} for c in curves for lv in c["levels"]],
           "steps": next((a.data for a in summary.analyses if a.kind == "memlat-steps"), None),
           "failures": [{"params": r.params, "status": r.status, "error": r.error} for r in failed]}
    if as_json:
        emit_json(doc)
        return
    print_analysis("memlat-levels", curves, out, VIEWS)
    if doc["steps"]:
        print_analysis("memlat-steps", doc["steps"], out, VIEWS)
    for f in doc["failures"]:
        failure = f"{f['params'].get('pages')} {f['params'].get('size')}: {f['status']}: {f['error']}"
        out.print(f"[yellow]{escape(failure)}[/]")


def memlat_points(sweep, full: bool) -> dict[str, list[str]]:
    """The workload's own grid (the line chase, and the page-stride chase over sizes of its
    own) where no flag shapes the sweep; else the product the flags give, their defaults
    filling in: sizes to 64M (256M full) at 4 per octave, pages 4k,thp (and huge), random."""
    if not (sweep.max_size or sweep.per_octave or sweep.pages or sweep.mode):
        return {}
    return {"size": [str(x) for x in memlat_sizes(1024, max_size(sweep, full), sweep.per_octave or 4)],
            "pages": (sweep.pages or ("4k,thp,huge" if full else "4k,thp")).split(","),
            "mode": (sweep.mode or "random").split(",")}


def memlat_colour(variant: str, processes: int, db, as_json: bool) -> None:
    """memlat --colour: the seeds plan's page-colour experiment (arbitrary against
    colour-balanced pages near this machine's L2 and L3 sizes) as one run, and its analysis."""
    exp = seeds_experiment("page-colour")
    summary, _ = carry_plan(sweep_plan("memlat", variant, exp.params["memlat"], processes or exp.processes,
                                       samples=exp.samples), open_store(db))
    doc = next((a.data for a in summary.analyses if a.kind == "memlat-colour"), None)
    if as_json:
        emit_json({"run_id": summary.run_id, **(doc or {"rows": [], "missing": "no point was measured"})})
    elif doc:
        print_analysis("memlat-colour", doc, out, VIEWS)


@click.command()
@grouped("sweep", "ops", "max_size", "per_octave")
@click.option("--ops", default="read,write,copy,triad", show_default=True)
@click.option("--max-size", default=None, help="Largest working set, e.g. 64M (default 64M quick, 256M full).")
@click.option("--per-octave", type=click.IntRange(1, 16), default=1, show_default=True)
@click.option("--variant", default="O3-native", show_default=True, shell_complete=complete.variant_names)
@setting_options("processes", "grid")
@grouped("output", "db", "as_json")
@db_option
@json_option
def bandwidth(sweep, variant, settings, output):
    """Read, write, copy and triad bandwidth against working-set size, labelled by cache level
    (3 processes a size unless --processes)."""
    sizes = [str(x) for x in memlat_sizes(4096, max_size(sweep, settings["grid"] == "full"), sweep.per_octave)]
    summary, _ = carry_plan(sweep_plan("bandwidth", variant, {"size": sizes, "op": sweep.ops.split(",")},
                                       settings["processes"] or 3), open_store(output.db))
    rows = next(a.data for a in summary.analyses if a.kind == "bandwidth")
    if output.as_json:
        emit_json({"run_id": summary.run_id, "machine": summary.machine, "rows": rows})
        return
    print_analysis("bandwidth", rows, out, VIEWS)


def max_size(sweep, full: bool) -> int:
    """The largest working set of a sweep: --max-size, else the grid's (64 MiB quick, 256 MiB full)."""
    return size_option("--max-size", sweep.max_size) if sweep.max_size else (256 if full else 64) * 1024 ** 2


def seeds_experiment(name: str) -> plans.Experiment:
    """The seeds plan's experiment that a memory command runs alone: its processes and
    samples, so the command's curve is the one the default run draws."""
    return next(e for e in plans.load("seeds").experiments if e.name == name)


def sweep_plan(workload: str, variant: str, sweep: dict[str, list[str]], processes: int,
               grid: str = "quick", samples: int = 3) -> plans.Plan:
    """One workload's sweep of one variant (its `grid` where `sweep` does not say), a few
    short samples per process: a curve, no comparison."""
    try:
        p = plans.from_flags([workload], [variant], sweep, variant)
    except plans.PlanError as e:
        fail(str(e))
    return p.given(processes=processes, samples=samples, grid=grid)


COMMANDS = [memlat, bandwidth]
