"""Terminal views: rich tables of a summary, of what is available, of the doctor's checks.
Names, parameters, errors and code come from plans and tools: they are escaped, so that
rich never reads "[rax]" or "a[/b]" as markup."""
from __future__ import annotations

from rich.console import Console
from rich.markup import escape
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
            t = tables[key] = Table(title=escape(f"{r['workload']} ({r['experiment']}): median [95% CI], "
                                                 f"delta vs {base} [95% CI]"), title_justify="left")
            for col, just in (("params", "left"), ("variant", "left"), (r["rate_unit"], "right"), ("cv", "right"),
                              (r["per_clock_unit"], "right"), ("vs " + base, "right"), ("p", "right"),
                              ("verdict", "left")):
                t.add_column(escape(col), justify=just)
        params = fmt_params(r["params"])
        shown = params if last_params.get(key) != params else ""
        last_params[key] = params
        c = comps.get((r["experiment"], r["workload"], params, r["variant"]))
        median = cv = per_clock = delta = p = ""
        if r["median"] is not None:
            median = f"{fmt_num(r['median'])} [{fmt_num(r['ci'][0])}, {fmt_num(r['ci'][1])}]"
            cv = f"{r['cv'] * 100:.1f}%"
            per_clock = fmt_num(r["cycles_per_unit"])
        if r["status"] == "identical":
            verdict, median = "identical code", f"= {r['same_as']}"
        elif r["status"] != "ok":
            verdict = (f"{r['status']}: {r['error']}" if r["error"] else r["status"])[:100]
        elif c is None:
            verdict = "baseline"
        else:
            verdict = c["verdict"]
            if c["ratio"] is not None and verdict != "identical code":
                delta, p = fmt_delta(c["ratio"], c["ci"]), f"{c['p']:.3f}"
        tables[key].add_row(escape(shown), escape(r["variant"]), escape(median), cv, per_clock, delta, p,
                            f"[{VERDICT_STYLE.get(verdict, 'yellow')}]{escape(verdict)}[/]")
    return list(tables.values())


def geomean_table(summary: dict) -> Table | None:
    rows = [g for g in summary["geomeans"] if g["points"] > 1]
    if not rows:
        return None
    t = Table(title="geometric mean of the ratio over parameter points", title_justify="left")
    for col in ("experiment", "workload", "variant", "vs", "geomean", "points"):
        t.add_column(col)
    for g in rows:
        t.add_row(escape(g["experiment"]), escape(g["workload"]), escape(g["variant"]), escape(g["baseline"]),
                  fmt_delta(g["ratio"], None), str(g["points"]))
    return t


def run_status_note(summary: dict) -> str:
    """What an unfinished run's tables are: partial, and how to finish them."""
    rid = summary["run_id"]
    if summary["status"] == "running":
        return f"run {rid} is still running: these results are partial"
    return (f"run {rid} stopped before its end ({summary['status']}): these are the results measured by then; "
            f"'cpulab run --resume {rid}' measures the rest")


def print_summary(summary: dict, console: Console) -> None:
    m, timing = summary["machine"], summary["timing"]
    console.print(f"[bold]{escape(m['cpu_model'])}[/] ({m['cpus']} CPUs, {escape(m['kernel'])}); "
                  f"timer [bold]{timing.get('timer')}[/], "
                  f"TSC {fmt_num((timing.get('tsc_hz') or 0) / 1e9)} GHz, core/TSC {fmt_num(timing.get('core_per_tsc'))}")
    if summary["status"] != "done":
        console.print(f"[yellow]{escape(run_status_note(summary))}[/]", soft_wrap=True)
    for t in results_tables(summary):
        console.print(t)
    if (g := geomean_table(summary)) is not None:
        console.print(g)
    console.print("[dim]verdict: faster/slower only when p < 0.05 after Holm, the interval excludes 0 and "
                  "|delta| >= 1% (layout noise); inconclusive when so few runs could never reach p < 0.05 "
                  "(use more --runs); otherwise same. Each observation is one process (the median of its "
                  "samples).[/]")


def explain_tables(doc: dict, a: str, b: str, max_rows: int) -> list[Table]:
    """Counts of the two kernels, then the hot loops aligned (changed rows marked)."""
    t = Table(title="generated code" + ("  (identical executables)" if doc["identical"] else ""),
              title_justify="left")
    for col in ("", a, b):
        t.add_column(escape(col), justify="right")
    t.add_row("kernel instructions", str(doc["a"]["kernel_instructions"]), str(doc["b"]["kernel_instructions"]))
    t.add_row("kernel bytes", str(doc["a"]["kernel_bytes"]), str(doc["b"]["kernel_bytes"]))
    ha, hb = doc["a"]["hot_loop"], doc["b"]["hot_loop"]
    if ha and hb:
        t.add_row("hot loop", escape(f"{ha['function']} @ {ha['start']}"), escape(f"{hb['function']} @ {hb['start']}"))
        for key in ("instructions", "bytes", "alignment"):
            t.add_row(f"hot loop {key}", str(ha[key]), str(hb[key]))
    tables = [t]
    if doc["rows"]:
        lt = Table(title=f"hot loops side by side (first {min(max_rows, len(doc['rows']))} of {len(doc['rows'])} rows)",
                   title_justify="left")
        lt.add_column(escape(a))
        lt.add_column("", width=1)
        lt.add_column(escape(b))
        style = {"=": "", "~": "yellow", "<": "red", ">": "red"}
        for left, right, tag in doc["rows"][:max_rows]:
            lt.add_row(escape(left), tag if tag != "=" else "", escape(right), style=style[tag])
        tables.append(lt)
    return tables


def memlat_tables(curves: list[dict]) -> list[Table]:
    """Per curve: the levels found (against the OS's caches), then every point."""
    tables = []
    for c in curves:
        t = Table(title=escape(f"memlat {c['series']} ({c['variant']}): levels"), title_justify="left")
        for col in ("level", "up to", "ns/load", "cycles/load", "points", "OS cache"):
            t.add_column(col, justify="right")
        for i, lv in enumerate(c["levels"], 1):
            match = escape(lv["matches"]) if lv["matches"] else \
                "[yellow]none[/] (nearest " + escape(lv.get("nearest", "-")) + ")"
            t.add_row(str(i), human_bytes(lv["size_bytes"]), fmt_num(lv["ns"]), fmt_num(lv["cycles"]), str(lv["points"]),
                      match)
        tables.append(t)
        pts = Table(title=escape(f"memlat {c['series']}: points"), title_justify="left")
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
        t.add_row(escape(r["variant"]), escape(r["op"]), human_bytes(r["size_bytes"]), r["level"],
                  fmt_num(r["mb_per_s"]),
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
        t.add_row(escape(r.get("sequence") or r.get("body")), str(r["instructions"]),
                  fmt_num(r["cycles_per_iteration"]),
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
