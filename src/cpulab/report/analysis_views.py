"""The tables of stored analyses: one view per analysis kind (cli/kinds.py: probe
and alignment tables, memlat levels, steps and colours, bandwidth by level, the explained
code, history), each turning the analysis' data into tables for every presenter."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from cpulab.params import human_bytes
from cpulab.report.tables import Cell, Table, columns, fmt_delta, fmt_num, verdict_tag

def probe_tables(data: dict) -> list[Table]:
    """`cpulab probe` (one loop) or the rows of seed 004's table 2, with the seed's own
    figures beside them when the rows carry them."""
    rows = data.get("rows") or [data]
    published = list(rows[0].get("seed_published", {})) if rows else []
    names = (["col", "seed's loop"] if published else []) + \
        ["loop", "instr.", "cycles/iter", "min..max", "IPC", "ns/iter", "llvm-mca", "timer"] + \
        [f"{c} (seed: cycles, IPC)" for c in published]
    title = ("004 · Table 2: cycles per iteration of tiny loops (RDTSC, calibrated to core cycles)" if published
             else "cycles per iteration (core cycles; median of the N and 2N runs less the call's fixed cost; "
                  "min..max over all runs)")
    t = Table("probe", title, columns(*names, left=3 if published else 1))
    for r in rows:
        mca = r.get("mca_cycles_per_iteration", (r.get("mca") or {}).get("cycles_per_iteration"))
        cells: list[Any] = [r["column"], r["seed_sequence"]] if published else []
        cells += [r.get("sequence") or r.get("body"), r["instructions"], Cell(r["cycles_per_iteration"]),
                  Cell([r["cycles_min"], r["cycles_max"]], f"{fmt_num(r['cycles_min'])}..{fmt_num(r['cycles_max'])}"),
                  Cell(r["ipc"]), Cell(r["ns_per_iteration"]),
                  Cell(mca, (fmt_num(mca) + (" (disagrees)" if r.get("mca_disagrees") else "")) if mca else "-",
                       "fail" if r.get("mca_disagrees") else ""),
                  r["timer"]]
        cells += [Cell(r["seed_published"][c], "{:g}, {:g}".format(*r["seed_published"][c])) for c in published]
        t.add(*cells)
    if published:
        t.notes.append("Each loop runs as its own loop at N and 2N iterations in several processes; cycles per "
                       "iteration include the DEC/JNZ as in the seed and are the median over the runs, each run's "
                       "figure its fastest sample (other tenants of this core slow samples down); min..max is the "
                       "spread over every run.")
    t.notes += sorted({r["mca_note"] for r in rows if r.get("mca_disagrees") and r.get("mca_note")})
    return [t]


def align_tables(data: dict) -> list[Table]:
    """Seed 004's table 3: dependent-load latency per alignment group, width and level."""
    levels = data["levels"]
    t = Table("align", "004 · Table 3: load-to-use latency by alignment, L1 hit and L1 miss / L2 hit",
              columns(*(["group", "width", "offsets"] + [f"{lv.upper()} {u}" for lv in levels
                                                            for u in ("cycles", "ns")]), left=3))
    for r in data["rows"]:
        t.add(r["interpretation"], r["width"], Cell(r["offsets"]),
              *[Cell(r[f"{lv}_{u}"]) for lv in levels for u in ("cycles", "ns")])
    if data.get("note"):
        t.notes.append(data["note"])
    return [t]


def memlat_tables(curves: list[dict]) -> list[Table]:
    """Per curve: the levels found (against the OS's caches), then every point."""
    tables = []
    for c in curves:
        t = Table("levels", f"memlat {c['series']} ({c['variant']}): levels found",
                  columns("level", "up to", "ns/load", "cycles/load", "points", "OS cache it matches", left=0))
        for i, lv in enumerate(c["levels"], 1):
            match = Cell(lv["matches"]) if lv["matches"] else \
                Cell(None, f"none (nearest {lv.get('nearest', '-')})", "fail")
            t.add(i, Cell(lv["size_bytes"], human_bytes(lv["size_bytes"])), Cell(lv["ns"]), Cell(lv["cycles"]),
                  lv["points"], match)
        t.notes += c["description"].splitlines()
        pts = Table("points", f"memlat {c['series']} ({c['variant']}): points",
                    columns("working set", "ns/load", "cycles/load", left=0))
        for p in c["points"]:
            pts.add(Cell(p["size_bytes"], human_bytes(p["size_bytes"])), Cell(p["ns"]), Cell(p["cycles"]))
        tables += [t, pts]
    return tables


def memlat_colour_tables(doc: dict) -> list[Table]:
    """Arbitrary against colour-balanced pages, one row per cache and working set; without
    balanced points the table says why (no frame numbers without root)."""
    t = Table("page-colour", "memlat: arbitrary against colour-balanced pages (ns per load)",
              columns("variant", "cache", "x cache", "working set", "colours", "arbitrary", "balanced",
                      "balanced faster by", "verdict", "arbitrary pages/colour", "imbalance", left=2))
    def ns(v, ci):
        return Cell(v, f"{fmt_num(v)} [{fmt_num(ci[0])}, {fmt_num(ci[1])}]" if v and ci else None)
    for r in doc["rows"]:
        pages = r["arbitrary_pages"]
        t.add(r["variant"], Cell(r["cache"], f"{r['cache']} ({human_bytes(r['cache_bytes'])}, {r['ways']}-way)"
                                 if r["cache_bytes"] else r["cache"]),
              Cell(r["fraction"], f"{r['fraction'] / 100:g}" if r["fraction"] else "-"),
              Cell(r["size_bytes"], human_bytes(r["size_bytes"]) if r["size_bytes"] else "-"), r["colours"],
              ns(r["arbitrary_ns"], r["arbitrary_ns_ci"]) if r["arbitrary_ns"] else Cell(None, r["arbitrary_error"], "fail"),
              ns(r["balanced_ns"], r["balanced_ns_ci"]) if r["balanced_ns"] else Cell(None, r["balanced_error"], "fail"),
              Cell(r["ratio"], fmt_delta(r["ratio"], r["ci"])), Cell(r["verdict"], tag=verdict_tag(r["verdict"])),
              Cell(pages, f"{pages[0]:.0f}-{pages[1]:.0f}" if pages and pages[0] is not None else "-"),
              Cell(r["arbitrary_imbalance"]))
    t.notes.append("colours: pages whose frame numbers agree modulo this count share the cache's sets; "
                   "imbalance: the fullest colour's pages over the mean (1 = even); arbitrary = the pages "
                   "the kernel gave")
    if doc.get("missing"):
        t.notes.append(f"no balanced pages: {doc['missing']}; run as root to compare them")
    return [t]


def bandwidth_tables(rows: list[dict]) -> list[Table]:
    t = Table("bandwidth", "bandwidth (STREAM byte counting)",
              columns("variant", "op", "working set", "fits in", "MB/s", "95% CI", "bytes/cycle", left=2))
    for r in rows:
        ci = r["mb_per_s_ci"]
        t.add(r["variant"], r["op"], Cell(r["size_bytes"], human_bytes(r["size_bytes"])), r["level"],
              Cell(r["mb_per_s"]), Cell(ci, f"{fmt_num(ci[0])}..{fmt_num(ci[1])}" if ci else ""),
              Cell(r["bytes_per_cycle"]))
    return [t]


def profile_size(prof: dict) -> str:
    """How many samples a profile's shares are of (and over how many runs of a program)."""
    return f"{prof['ticks']}" + (f" in {prof['runs']} runs" if prof.get("runs") else "")


def explain_tables(doc: dict, max_rows: int | None = None) -> list[Table]:
    """The sentence of why and the counts of two kernels' code, then their hot regions
    side by side (changed rows tagged; with a profile, each instruction's share of the
    region's samples)."""
    a, b = doc["a_name"], doc["b_name"]
    t = Table("code", doc.get("title") or ("generated code" + ("  (identical executables)" if doc["identical"] else "")),
              columns("", a, b), notes=[doc["why"]] if doc.get("why") else [])
    what = doc.get("subject", "kernel")  # or a whole program's own functions (explain --program)
    t.add(f"{what} instructions", doc["a"]["kernel_instructions"], doc["b"]["kernel_instructions"])
    t.add(f"{what} bytes", doc["a"]["kernel_bytes"], doc["b"]["kernel_bytes"])
    ha, hb = doc["a"]["hot_loop"], doc["b"]["hot_loop"]
    profiled = doc.get("profiled")
    if profiled and all((doc[side].get("profile") or {}).get("ticks") for side in "ab"):
        t.add("samples in its own code", *[profile_size(doc[side]["profile"]) for side in "ab"])
    if ha and hb:
        t.add("hot region" + ("" if profiled else " (static guess)"),
              f"{ha['function']} @ {ha['start']}", f"{hb['function']} @ {hb['start']}")
        if profiled:
            t.add("share of samples", Cell(ha["sample_share"], f"{ha['sample_share']:.0%}"),
                  Cell(hb["sample_share"], f"{hb['sample_share']:.0%}"))
        for key in ("instructions", "bytes", "alignment"):
            t.add(key if key == "alignment" else f"{key} per iteration", ha[key], hb[key])
        for kind in ha.get("kinds", {}):
            t.add(f"  {kind}", ha["kinds"][kind], hb["kinds"][kind])
        if "vector_bits" in ha and "vector_bits" in hb:  # explained by this version (analysis/why.py reads them)
            t.add("widest vector (bits)", ha["vector_bits"], hb["vector_bits"])
            t.add("loop-carried chain", *[" ".join(h["chain"]) if h.get("chain") else "-" for h in (ha, hb)])
        if ha.get("mca") or hb.get("mca"):
            t.add("llvm-mca cycles/iteration (a model)",
                  *[Cell((h.get("mca") or {}).get("cycles_per_iteration")) for h in (ha, hb)])
    tables = [t]
    if doc.get("differences"):
        d = Table("differences", "functions whose code differs most (by symbol)",
                  columns("function", f"{a} bytes", f"{b} bytes", f"{a} instructions", f"{b} instructions"))
        for r in doc["differences"]:
            d.add(r["function"], Cell(r["a_bytes"]), Cell(r["b_bytes"]), Cell(r["a_instructions"]),
                  Cell(r["b_instructions"]))
        tables.append(d)
    if doc.get("executed"):
        e = Table("executed", "instructions executed per unit of work, by function "
                  "(valgrind, or stepped on the core)",
                  columns("function", a, b, "change"))
        for r in doc["executed"]:
            ra, rb = r["a_per_unit"], r["b_per_unit"]
            e.add(r["function"], Cell(ra), Cell(rb), Cell(rb / ra if ra and rb else None,
                                                          f"{(rb / ra - 1) * 100:+.1f}%" if ra and rb else ""))
        tables.append(e)
    if doc["rows"]:
        shown = doc["rows"][:max_rows] if max_rows else doc["rows"]
        share = profiled and ha and hb and "samples" in ha
        cols = (a, "%", "", b, "%") if share else (a, "", b)
        lt = Table("listing", f"hot regions side by side ({len(shown)} of {len(doc['rows'])} rows; "
                              "yellow: changed, red: only on one side)", columns(*cols, left=len(cols)), code=True)
        ia = ib = 0
        tot_a, tot_b = (sum(ha["samples"]) or 1, sum(hb["samples"]) or 1) if share else (1, 1)
        for left, right, tag in shown:
            style = {"=": "", "~": "changed", "<": "only", ">": "only"}[tag]
            cells = [Cell(left, tag=style if tag != ">" else "")]
            if share:
                n = ha["samples"][ia] if left else 0
                cells.append(Cell(n / tot_a if n else None, f"{100 * n / tot_a:.1f}" if n else ""))
            cells += [Cell(tag, "" if tag == "=" else tag), Cell(right, tag=style if tag != "<" else "")]
            if share:
                n = hb["samples"][ib] if right else 0
                cells.append(Cell(n / tot_b if n else None, f"{100 * n / tot_b:.1f}" if n else ""))
            ia, ib = ia + bool(left), ib + bool(right)
            lt.add(*cells)
        tables.append(lt)
    return tables


def memlat_steps_tables(data: dict) -> list[Table]:
    """Each step of the latency curve, what explains it and with which evidence."""
    t = Table("steps", "memlat: why each step",
              columns("at", "to", "ns/load", "cycles/load", "cause", "matches", "nearest", "huge pages keep it",
                      "last cache's share", left=0),
              notes=data["description"].splitlines())
    for st in data["steps"]:
        keeps = st["huge_pages_keep_it"]
        t.add(Cell(st["edge_bytes"], human_bytes(st["edge_bytes"])),
              Cell(st["next_bytes"], human_bytes(st["next_bytes"]) if st["next_bytes"] else "-"),
              Cell(st["to_ns"], f"{fmt_num(st['from_ns'])} -> {fmt_num(st['to_ns'])}"),
              Cell(st["to_cycles"], f"{fmt_num(st['from_cycles'])} -> {fmt_num(st['to_cycles'])}"),
              st["cause"], ", ".join(st["matches"]) or "-", ", ".join(st["nearest"]),
              "unknown" if keeps is None else "yes" if keeps else "no",
              Cell(st.get("share_bytes"), human_bytes(st["share_bytes"]) if st.get("share_bytes") else "-"))
    return [t]


def legacy_table(data: dict) -> list[Table]:
    """Stores written before analyses were data kept probe tables preformatted (kind "table")."""
    t = Table("table", data.get("title", "table"), columns(*data["columns"], left=data.get("left", 1)),
              notes=list(data.get("notes", [])))
    for row in data["rows"]:
        t.add(*row)
    return [t]


def history_tables(histories: list[dict]) -> list[Table]:
    """Per series: each run's estimate and interval in order, and where it changed."""
    out = []
    for s in histories:
        starts = {c["at"]: c for c in s.get("changes", [])}
        rows = []
        for i, p in enumerate(s["points"]):
            c = starts.get(i)
            rows.append([Cell(p["run"], str(p["run"])), Cell(p["label"], p["label"]),
                         Cell(p["commit"], (p["commit"][:10] + ("+dirty" if p["dirty"] else "")) if p["commit"] else ""),
                         Cell(p["median"], fmt_num(p["median"])),
                         Cell(p["ci"], f"{fmt_num(p['ci'][0])} .. {fmt_num(p['ci'][1])}" if p["ci"] else "-"),
                         Cell(c and c["change"], f"change {(c['change'] - 1) * 100:+.1f}%" if c else "")])
        params = " ".join(f"{k}={v}" for k, v in s["params"].items())
        out.append(Table("history", f"{s['experiment']}: {s['workload']} {s['variant']} {params}: {s['unit']} over runs "
                                    f"({s['order']} order; machine {s['machine_id']})",
                         columns("run", "label", "commit", s["unit"], "interval", "change point"), rows))
    return out


def roofs_tables(roofs: dict) -> list[Table]:
    """The roofline's roofs as measured (measure/probes/roofline.py)."""
    c = Table("roofs", "roofline: peak double flops per core cycle (independent chains of each instruction set)",
              columns("instruction set", "flops/cycle", "cycles per body", "body"))
    for r in roofs["compute"]:
        c.add(r["isa"], Cell(r["flops_per_cycle"]), Cell(r["cycles_per_body"]),
              f"{len(r['body'].split(';'))} x {r['body'].split(';')[0]}")
    m = Table("roofs", "roofline: read bandwidth per level (the bandwidth workload's read, the faster build)",
              columns("level", "working set", "bytes/cycle", "GB/s", "build"))
    for r in roofs["memory"]:
        m.add(r["level"], Cell(r["working_set_bytes"], human_bytes(r["working_set_bytes"])),
              Cell(r["bytes_per_cycle"]), Cell(r["gb_per_s"]), r["variant"])
    return [c, m]


def roofline_tables(data: dict) -> list[Table]:
    """Each floating-point or streaming result under the roofs: its intensity, its flops
    per cycle, the roof that bounds it and its share of that roof."""
    t = Table("roofline", "roofline: each kernel's flops per core cycle against the roof over it",
              columns("workload", "variant", "params", "flop/byte", "working set", "flops/cycle", "bound by",
                      "roof", "share", left=3),
              notes=["flop/byte: the workload's flops per byte of operands it moves; the roof is the lower of the "
                     "top compute peak (float: twice the double lanes) and flop/byte x the read bandwidth of the "
                     "level the working set fits in"])
    for p in data["points"]:
        t.add(p["workload"], p["variant"], " ".join(f"{k}={v}" for k, v in p["params"].items()),
              Cell(p["intensity"]), Cell(p["working_set_bytes"], human_bytes(p["working_set_bytes"])),
              Cell(p["flops_per_cycle"]), p["bound"], Cell(p["roof_flops_per_cycle"]),
              Cell(p["share"], f"{100 * p['share']:.0f}%"))
        if p.get("why") and not any(n.startswith(f"{p['workload']} {p['variant']}: ") for n in t.notes):
            t.notes.append(f"{p['workload']} {p['variant']}: {p['why']}")  # its first such point's; --json has each
    return [t]


def program_build_tables(data: dict) -> list[Table]:
    """How a program of the plan was built: its commands (a failed build is drawn as its error)."""
    t = Table("program-build", f"program build: {data['status']}", columns("command", left=1))
    for c in data.get("commands") or []:
        t.add(c if isinstance(c, str) else " ".join(map(str, c)))
    return [t]


@dataclass(frozen=True)
class View:
    """How every presenter draws one analysis kind: its tables (terminal, HTML, CSV,
    Markdown; None: it is drawn inside another view, never on its own) and, in the HTML
    report, its plots (data, the machine's caches -> images).  cli/kinds.py declares
    each kind's."""
    tables: Callable[[Any], list[Table]] | None
    plots: Callable[[Any, list[dict]], list[str]] | None = None


Views = Mapping[str, View]


def analysis_tables(kind: str, data: Any, views: Views) -> list[Table]:
    """The tables of a stored analysis; a kind this version cannot draw says so."""
    view = views.get(kind)
    if view is None:
        return [Table(kind, f"{kind}: stored, but this version of cpulab has no view of it", columns("analysis"))]
    if _lost(data):
        return [Table(kind, f"{kind}: {data['status']}: {data['error']}", columns("analysis"))]
    try:
        return view.tables(data) if view.tables else []
    except UNREADABLE as e:
        return [Table(kind, f"{kind}: stored in a shape this version cannot read ({type(e).__name__}: {e})",
                      columns("analysis"))]


# A stored analysis may come from an imported file (store/exchange.py checks its kind and key,
# not the shape of its data): one that a view cannot read is said in its place, and the rest
# of the report draws.
UNREADABLE = (TypeError, KeyError, ValueError, IndexError, AttributeError, ZeroDivisionError)


def analysis_plots(kind: str, data: Any, caches: list[dict], views: Views) -> list[str]:
    """The HTML report's plots of a stored analysis (none for a kind without any, or whose
    data cannot be read: its tables say so)."""
    view = views.get(kind)
    try:
        return view.plots(data, caches) if view and view.plots and not _lost(data) else []
    except UNREADABLE:
        return []


def _lost(data: Any) -> bool:
    """A probe table that failed or was lost: stored as its status and error, nothing to draw."""
    return isinstance(data, dict) and bool(data.get("error")) and "status" in data
