"""Terminal views: rich tables of a summary, of what is available, of the doctor's checks."""
from __future__ import annotations

from rich.console import Console
from rich.table import Table

from ..analysis.memory import human_bytes

VERDICT_STYLE = {"faster": "bold green", "slower": "bold red", "same": "dim", "identical code": "cyan",
                 "inconclusive": "yellow"}


def fmt_num(v: float | None, digits: int = 4) -> str:
    if v is None:
        return "-"
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 10 ** digits:
        return f"{v:,.0f}"
    return f"{v:.{max(0, digits - 1 - int(f'{a:e}'.split('e')[1]))}f}" if a >= 1 else f"{v:.{digits}g}"


def fmt_params(params: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in params.items() if k not in ("path", "expect")) or "-"


def fmt_delta(ratio: float | None, ci: list[float] | None) -> str:
    if ratio is None:
        return "-"
    s = f"{(ratio - 1) * 100:+.1f}%"
    if ci:
        s += f" [{(ci[0] - 1) * 100:+.1f}, {(ci[1] - 1) * 100:+.1f}]"
    return s


def results_tables(summary: dict) -> list[Table]:
    """One table per (experiment, workload): rows are parameter points x variants."""
    comps = {(c["experiment"], c["workload"], fmt_params(c["params"]), c["variant"]): c
             for c in summary["comparisons"]}
    tables: dict[tuple, Table] = {}
    last_params: dict[tuple, str] = {}
    for r in summary["results"]:
        key = (r["experiment"], r["workload"])
        if key not in tables:
            base = next((c["baseline"] for c in summary["comparisons"] if (c["experiment"], c["workload"]) == key), "")
            t = tables[key] = Table(title=f"{r['workload']} ({r['experiment']}): median [95% CI], "
                                          f"delta vs {base} [95% CI]", title_justify="left")
            for col, just in (("params", "left"), ("variant", "left"), (r["rate_unit"], "right"), ("cv", "right"),
                              (r["per_clock_unit"], "right"), ("left out", "right"), ("vs " + base, "right"),
                              ("p", "right"), ("verdict", "left")):
                t.add_column(col, justify=just)
        params = fmt_params(r["params"])
        shown = params if last_params.get(key) != params else ""
        last_params[key] = params
        c = comps.get((r["experiment"], r["workload"], params, r["variant"]))
        median = cv = per_clock = delta = p = ""
        if r["median"] is not None:
            median = f"{fmt_num(r['median'])} [{fmt_num(r['ci'][0])}, {fmt_num(r['ci'][1])}]"
            if (r.get("ci_coverage") or 1) < 0.95:  # too few processes: say what the range covers
                median += f" ({r['ci_coverage'] * 100:.0f}%)"
            cv = f"{r['cv'] * 100:.1f}%"
            per_clock = fmt_num(r["cycles_per_unit"])
        if r["status"] == "identical":
            verdict, median = "identical code", f"= {r['same_as']}"
        elif r["status"] != "ok":
            verdict = f"{r['status']}: {r['error']}"[:100]
        elif c is None:
            verdict = "baseline"
        else:
            verdict = c["verdict"]
            if c["ratio"] is not None and verdict != "identical code":
                delta, p = fmt_delta(c["ratio"], c["ci"]), f"{c['p']:.3f}"
        left_out = f"{r['excluded_samples']}" if r.get("excluded_samples") else ""
        tables[key].add_row(shown, r["variant"], median, cv, per_clock, left_out, delta, p,
                            f"[{VERDICT_STYLE.get(verdict, 'yellow')}]{verdict}[/]")
    return list(tables.values())


def geomean_table(summary: dict) -> Table | None:
    rows = [g for g in summary["geomeans"] if g["points"] > 1]
    if not rows:
        return None
    t = Table(title="geometric mean of the ratio over parameter points", title_justify="left")
    for col in ("experiment", "workload", "variant", "vs", "geomean", "points"):
        t.add_column(col)
    for g in rows:
        t.add_row(g["experiment"], g["workload"], g["variant"], g["baseline"], fmt_delta(g["ratio"], None),
                  str(g["points"]))
    return t


def print_summary(summary: dict, console: Console) -> None:
    m, timing = summary["machine"], summary["timing"]
    console.print(f"[bold]{m['cpu_model']}[/] ({m['cpus']} CPUs, {m['kernel']}); timer [bold]{timing.get('timer')}[/], "
                  f"TSC {fmt_num((timing.get('tsc_hz') or 0) / 1e9)} GHz, core/TSC {fmt_num(timing.get('core_per_tsc'))}")
    for t in results_tables(summary):
        console.print(t)
    if (g := geomean_table(summary)) is not None:
        console.print(g)
    comps = [c for c in summary["comparisons"] if c.get("method")]
    how = ("paired: the ratio of variant to baseline in each round (run back to back), Wilcoxon signed-rank "
           "p and Hodges-Lehmann interval" if comps and comps[0]["method"] == "paired"
           else "unpaired: Mann-Whitney p, bootstrap interval of the ratio of medians")
    alpha = comps[0]["alpha"] if comps else 0.05
    console.print(f"[dim]verdict ({how}): faster/slower only when p < {alpha:.3g} after Holm"
                  + (" (0.05 spent over the looks of budget mode)" if alpha < 0.05 else "")
                  + ", the interval excludes 0 and |delta| >= 1% (layout noise); inconclusive when so few "
                  "rounds could never be significant; otherwise same. Each observation is one process: its "
                  "fastest sample among those not left out (a sample is left out when its thread was off "
                  "the CPU for over 1% of it, or it migrated or saw steal time). A median interval marked "
                  "(NN%) covers only that much: too few processes for 95%.[/]")


def explain_tables(doc: dict, a: str, b: str, max_rows: int) -> list[Table]:
    """Counts of the two kernels, then the hot loops aligned (changed rows marked)."""
    t = Table(title="generated code" + ("  (identical executables)" if doc["identical"] else ""),
              title_justify="left")
    for col in ("", a, b):
        t.add_column(col, justify="right")
    t.add_row("kernel instructions", str(doc["a"]["kernel_instructions"]), str(doc["b"]["kernel_instructions"]))
    t.add_row("kernel bytes", str(doc["a"]["kernel_bytes"]), str(doc["b"]["kernel_bytes"]))
    ha, hb = doc["a"]["hot_loop"], doc["b"]["hot_loop"]
    if ha and hb:
        t.add_row("hot loop", f"{ha['function']} @ {ha['start']}", f"{hb['function']} @ {hb['start']}")
        for key in ("instructions", "bytes", "alignment"):
            t.add_row(f"hot loop {key}", str(ha[key]), str(hb[key]))
    tables = [t]
    if doc["rows"]:
        lt = Table(title=f"hot loops side by side (first {min(max_rows, len(doc['rows']))} of {len(doc['rows'])} rows)",
                   title_justify="left")
        lt.add_column(a)
        lt.add_column("", width=1)
        lt.add_column(b)
        style = {"=": "", "~": "yellow", "<": "red", ">": "red"}
        for left, right, tag in doc["rows"][:max_rows]:
            lt.add_row(left, tag if tag != "=" else "", right, style=style[tag])
        tables.append(lt)
    return tables


def memlat_tables(curves: list[dict]) -> list[Table]:
    """Per curve: the levels found (against the OS's caches), then every point."""
    tables = []
    for c in curves:
        t = Table(title=f"memlat {c['series']} ({c['variant']}): levels", title_justify="left")
        for col in ("level", "up to", "ns/load", "cycles/load", "points", "OS cache"):
            t.add_column(col, justify="right")
        for i, lv in enumerate(c["levels"], 1):
            match = lv["matches"] or ("[yellow]none[/] (nearest " + lv.get("nearest", "-") + ")")
            t.add_row(str(i), human_bytes(lv["size_bytes"]), fmt_num(lv["ns"]), fmt_num(lv["cycles"]), str(lv["points"]),
                      match)
        tables.append(t)
        pts = Table(title=f"memlat {c['series']}: points", title_justify="left")
        for col in ("working set", "ns/load", "cycles/load"):
            pts.add_column(col, justify="right")
        for p in c["points"]:
            pts.add_row(human_bytes(p["size_bytes"]), fmt_num(p["ns"]), fmt_num(p["cycles"]))
        tables.append(pts)
    return tables


def bandwidth_table(rows: list[dict]) -> Table:
    t = Table(title="bandwidth (STREAM byte counting)", title_justify="left")
    for col in ("variant", "op", "working set", "fits in", "MB/s", "95% CI", "bytes/cycle"):
        t.add_column(col, justify="right")
    for r in rows:
        ci = r["mb_per_s_ci"]
        t.add_row(r["variant"], r["op"], human_bytes(r["size_bytes"]), r["level"], fmt_num(r["mb_per_s"]),
                  f"{fmt_num(ci[0])}..{fmt_num(ci[1])}" if ci else "", fmt_num(r["bytes_per_cycle"]))
    return t


def probe_table(doc: dict) -> Table:
    """One probe, or the rows of seed 004's table 2."""
    rows = doc.get("rows") or [doc]
    t = Table(title="cycles per iteration (core cycles; fastest of the N and 2N runs; min..max over all runs)",
              title_justify="left")
    for col in ("loop", "instr.", "cycles/iter", "min..max", "IPC", "ns/iter", "llvm-mca", "timer"):
        t.add_column(col, justify="left" if col == "loop" else "right")
    for r in rows:
        mca = r.get("mca_cycles_per_iteration", (r.get("mca") or {}).get("cycles_per_iteration"))
        flag = " [yellow](disagrees)[/]" if r.get("mca_disagrees") else ""
        t.add_row(r.get("sequence") or r.get("body"), str(r["instructions"]), fmt_num(r["cycles_per_iteration"]),
                  f"{fmt_num(r['cycles_min'])}..{fmt_num(r['cycles_max'])}", fmt_num(r["ipc"]),
                  fmt_num(r["ns_per_iteration"]), (fmt_num(mca) + flag) if mca else "-", r["timer"])
    return t


def align_table(doc: dict) -> Table:
    t = Table(title="dependent-load latency by alignment (seed 004 table 3)", title_justify="left")
    for col in ["group", "width", "offsets"] + [f"{lv} {u}" for lv in doc["levels"] for u in ("cycles", "ns")]:
        t.add_column(col, justify="left" if col in ("group", "offsets") else "right")
    for r in doc["rows"]:
        t.add_row(r["interpretation"], str(r["width"]), " ".join(map(str, r["offsets"])),
                  *[fmt_num(r[f"{lv}_{u}"]) for lv in doc["levels"] for u in ("cycles", "ns")])
    return t
