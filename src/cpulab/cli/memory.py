"""The memory hierarchy: `memlat` (latency against working-set size, its steps, and page
colour) and `bandwidth`.
"""
from __future__ import annotations

import click
from rich.markup import escape
from rich.table import Table

from cpulab import analysis, machine, params
from cpulab.cli.common import (
    db_option, emit_json, fail, grid_option, json_option, open_store, out, processes_option, size_option
)
from cpulab.cli.run import execute, sweep_plan
from cpulab.report.terminal import print_analysis
from cpulab.workloads.memory import memlat_sizes, page_colours


@click.command()
@click.option("--pages", default=None, help="Page modes, comma-separated: 4k, thp, huge (default: 4k,thp; full adds huge).")
@click.option("--mode", default="random", show_default=True,
              help="Comma-separated: random (prefetchers defeated), sequential, pagestride (one load per page: the TLBs).")
@click.option("--max-size", default=None, help="Largest working set, e.g. 64M (default 64M quick, 256M full).")
@click.option("--per-octave", type=click.IntRange(1, 16), default=4, show_default=True)
@click.option("--colour", is_flag=True,
              help="Instead: arbitrary against colour-balanced pages at 0.5-1.25x the L2 and L3 sizes (root).")
@click.option("--variant", default="O2", show_default=True)
@processes_option(default=3, show_default=True, most=100)
@grid_option
@db_option
@json_option
def memlat(pages, mode, max_size, per_octave, colour, variant, processes, grid, db, as_json):
    """Load-to-use latency against working-set size, with the cache levels found in it."""
    if colour:
        memlat_colour(variant, processes, db, as_json)
        return
    hi = size_option("--max-size", max_size) if max_size else (256 if grid == "full" else 64) * 1024 ** 2
    page_modes = (pages or ("4k,thp,huge" if grid == "full" else "4k,thp")).split(",")
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


@click.command()
@click.option("--ops", default="read,write,copy,triad", show_default=True)
@click.option("--max-size", default=None, help="Largest working set, e.g. 64M (default 64M quick, 256M full).")
@click.option("--per-octave", type=click.IntRange(1, 16), default=1, show_default=True)
@click.option("--variant", default="O3-native", show_default=True)
@processes_option(default=3, show_default=True, most=100)
@grid_option
@db_option
@json_option
def bandwidth(ops, max_size, per_octave, variant, processes, grid, db, as_json):
    """Read, write, copy and triad bandwidth against working-set size, labelled by cache level."""
    hi = size_option("--max-size", max_size) if max_size else (256 if grid == "full" else 64) * 1024 ** 2
    sizes = [str(x) for x in memlat_sizes(4096, hi, per_octave)]
    store = open_store(db)
    run_id = execute(sweep_plan("bandwidth", variant, {"size": sizes, "op": ops.split(",")}, processes), store)
    summary = analysis.analyse(store, run_id)
    rows = next(a.data for a in summary.analyses if a.kind == "bandwidth")
    if as_json:
        emit_json({"run_id": run_id, "machine": summary.machine, "rows": rows})
        return
    print_analysis("bandwidth", rows, out)


COMMANDS = [memlat, bandwidth]
