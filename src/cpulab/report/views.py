"""The tables of a run, built once from its Summary and drawn by every presenter.

Results and comparisons: workload_tables (one per experiment and workload), geomean_table,
result_list / comparison_list (every field, for exports), pivot_table (seed 004's
table 1 layout).  Stored analyses: one renderer per kind in ANALYSIS_VIEWS, each turning
the analysis' data into tables.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Any, Callable

from cpulab import workloads
from cpulab.measure import time_split
from cpulab.params import human_bytes
from cpulab.model import Comparison, Result, Status, Summary, Verdict
from cpulab.policy import DecisionPolicy
from cpulab.report.tables import Cell, Table, columns, fmt_delta, fmt_num, verdict_tag


def workload_of(name: str) -> workloads.Workload | None:
    """The workload's declaration, if this installation still has it (a store may be older)."""
    try:
        return workloads.get(name)
    except KeyError:
        return None


def fmt_params(params: dict, workload: str | None = None) -> str:
    """key=value ... without the parameters the workload declares hidden (a file's path)."""
    w = workload_of(workload) if workload else None
    hidden = w.hidden_params if w else ()
    return " ".join(f"{k}={v}" for k, v in params.items() if k not in hidden) or "-"


def comparisons_by_point(s: Summary) -> dict[tuple, Comparison]:
    return {(c.experiment, c.workload, c.point, c.variant): c for c in s.comparisons}


def _verdict(r: Result, c: Comparison | None) -> Cell:
    if r.status == Status.IDENTICAL:
        return Cell(Verdict.IDENTICAL_CODE, f"identical code (= {r.same_as})", "identical")
    if r.status != Status.OK:
        return Cell(r.status, f"{r.status}: {r.error}"[:100], "fail")
    if c is None:
        return Cell("baseline", tag="muted")
    return Cell(c.verdict, tag=verdict_tag(c.verdict))


def _placement_band(r: Result) -> Cell:
    """The spread over a result's placements (the central 80% of their estimates against
    its median) and how many placements ran."""
    if not r.placement_band:
        return Cell(None, "")
    lo, hi = r.placement_band
    return Cell(hi - lo, f"{100 * (lo - 1):+.1f}% .. {100 * (hi - 1):+.1f}% ({r.placements})")


def carryover_line(s: Summary) -> str:
    """One sentence on the run's carry-over contrast, or '' when nothing ran in turns."""
    c = s.carryover
    if not c:
        return ""
    return (f"Carry-over: samples that ran right after another build's sample were {fmt_delta(c['ratio'], c['ci'])} "
            f"against those right after their own process's ({c['processes']} processes; an interval around 0: "
            f"none measurable)")


def time_split_line(s: Summary) -> str:
    """Where the run's time went, in one sentence ('' for a run that did not record it)."""
    t = time_split.totals(s.time_split)
    if not t:
        return ""
    whole = sum(t.values())
    share = time_split.samples_share(s.time_split)
    parts = ", ".join(f"{p} {t[p]:.0f} s" for p in t if t[p] >= 0.5)
    shared = s.conditions.get("shared_machine")
    return (f"Time: {whole:.0f} s accounted for: {parts}"
            + (f"; samples are {100 * share:.0f}% of the measured processes' own time" if share is not None else "")
            + (f"; {', '.join(shared)} ran two at a time, one per CPU (they share the machine)" if shared else ""))


def time_split_table(s: Summary) -> Table | None:
    """Seconds per phase, one row per experiment and one for the run as a whole."""
    if not s.time_split:
        return None
    shared = s.conditions.get("shared_machine") or []
    t = Table("time split", "where the run's time went, seconds",
              columns("experiment", *time_split.PHASES, "samples share", "machine"))
    for where, phases in s.time_split.items():
        share = time_split.samples_share({where: phases})
        t.add(where or "(the run)", *[Cell(phases.get(p)) for p in time_split.PHASES],
              Cell(share, f"{100 * share:.0f}%" if share is not None else "-"),
              "shared, one CPU each" if where in shared else "alone" if where else "")
    return t


def workload_tables(s: Summary) -> dict[tuple[str, str], Table]:
    """One table per (experiment, workload): parameter points x variants, median with its
    interval, per clock, percent of the best variant at that point, delta and verdict
    against the baseline; real/user/sys per repetition where the workload asks for them."""
    comps = comparisons_by_point(s)
    groups: dict[tuple, list[Result]] = defaultdict(list)
    for r in s.results:
        groups[(r.experiment, r.workload)].append(r)
    tables = {}
    for (exp, wname), rows in groups.items():
        w = workload_of(wname)
        times = bool(w and w.times) or rows[0].unit == "runs"  # whole processes: cpulab time, programs
        best: dict[tuple, float] = defaultdict(float)
        for r in rows:
            if r.median:
                best[r.point] = max(best[r.point], r.median)
        base = next((c.baseline for c in s.comparisons if (c.experiment, c.workload) == (exp, wname)), "")
        conf = f"{100 * DecisionPolicy.from_plan(s.plan).confidence:.3g}%"
        names = ["params", "variant", rows[0].rate_unit, "95% CI", "cv", "placements", rows[0].per_clock_unit,
                 "% of max", "left out", f"vs {base}", "p", "verdict"] + (["real s", "user s", "sys s"] if times else [])
        t = Table("results", f"{wname} ({exp}): median [95% CI], delta vs {base} [{conf} CI]", columns(*names, left=2))
        t.columns[names.index("verdict")].left = True
        last = None
        for r in rows:
            c = comps.get((exp, wname, r.point, r.variant))
            params = fmt_params(r.params, wname)
            shown, last = (params if params != last else ""), params
            compared = c is not None and c.ratio is not None and c.verdict != Verdict.IDENTICAL_CODE
            cells = [Cell(params, shown), r.label,
                     Cell(r.median, f"= {r.same_as}" if r.status == Status.IDENTICAL else None),
                     Cell(r.ci, (f"{fmt_num(r.ci[0])} .. {fmt_num(r.ci[1])}" if r.ci else "")
                          + (f" (covers {100 * r.ci_coverage:.0f}%)" if r.ci and (r.ci_coverage or 1) < 0.95 else "")),
                     Cell(r.cv, f"{r.cv * 100:.1f}%" if r.cv is not None else ""),
                     _placement_band(r),
                     Cell(r.cycles_per_unit),
                     Cell(r.median / best[r.point] if r.median else None,
                          f"{100 * r.median / best[r.point]:.0f}%" if r.median else ""),
                     Cell(r.excluded_samples, f"{r.excluded_samples} sample{'s' * (r.excluded_samples > 1)}"
                          if r.excluded_samples else ""),
                     Cell(c.ratio if compared else None, fmt_delta(c.ratio, c.ci) if compared else ""),
                     Cell(c.p if compared else None, f"{c.p:.3f}" if compared and c.p is not None else ""),
                     _verdict(r, c)]
            if times:
                cells += [Cell(r.real_s), Cell(r.user_s), Cell(r.sys_s)]
            t.add(*cells)
        tables[(exp, wname)] = t
    return tables


def process_table(s: Summary) -> Table | None:
    """Whole processes (cpulab time, programs): median wall, user and sys per run, and the
    medians of what wait4 said besides time."""
    rows = [r for r in s.results if r.unit == "runs"]
    if not rows:
        return None
    t = Table("processes", "per process: medians",
              columns("workload", "params", "variant", "wall ms", "user ms", "sys ms", "max RSS KiB",
                      "ctx vol/invol", "status", left=3))
    t.columns[-1].left = True
    for r in rows:
        n = r.notes
        ctx = (f"{fmt_num(n['median_voluntary_switches'])}/{fmt_num(n['median_involuntary_switches'])}"
               if "median_voluntary_switches" in n else "-")
        status = r.status + (f": {r.error[:70]}" if r.error else "") + (f" [{n['cache']}]" if "cache" in n else "")
        t.add(r.workload, fmt_params(r.params, r.workload), r.label,
              *[Cell(v * 1e3 if v is not None else None) for v in (r.real_s, r.user_s, r.sys_s)],
              Cell(n.get("median_max_rss_kb")), ctx, status)
    return t


def machine_tables(doc: dict) -> list[Table]:
    """Machines side by side (between_runs.machines_summary, or a cluster run's): the
    ranking, seed 004's table 1 with processors as rows, machines x workloads (rate, cycles
    per unit, % of the best machine, verdict against the best or a named one), then the
    machines with their fingerprints."""
    what = f"run {doc['run_id']} ({doc['status']})" if "run_id" in doc else \
        "runs " + ", ".join(map(str, doc["run_ids"]))
    t = Table("machines x workloads", f"{what}: machines x workloads",
              columns("workload", "variant", "params", "machine", "rate", "cycles/unit", "% of best", "vs", "verdict",
                      left=4))
    t.columns[-1].left = True
    for r in doc["machine_table"]:
        t.add(r["workload"], r["variant"], fmt_params(r["params"], r["workload"]), r["machine"],
              Cell(r["median"], f"{fmt_num(r['median'])} {r['rate_unit']}" if r["median"] else "-"),
              Cell(r["cycles_per_unit"]),
              Cell(r["pct_of_best"], f"{r['pct_of_best']:.1f}%" if r["pct_of_best"] else "-"), r["reference"] or "-",
              Cell(r["verdict"], f"{r['verdict']} ({r['ratio']:.3f}x)" if r["verdict"] and r["ratio"] else
                   str(r["verdict"] or "reference"), verdict_tag(r["verdict"])))
    m = Table("machines", "machines", columns("machine", "run", "status", "fingerprint", "cpu", left=5),
              notes=[f"{lost['machine']}: {lost['error']}" for lost in doc["machines_lost"]])
    for x in doc["machines"]:
        fp = x["fingerprint"]
        m.add(x["machine"], x["run_id"], x["status"], x["machine_id"],
              f"{fp.get('cpu_model')} ({fp.get('cpus')} CPUs) on {fp.get('hostname')}")
    return ([ranking] if (ranking := ranking_table(doc)) else []) + processor_tables(doc) + [t, m]


def drift_sentence(drift: dict) -> str:
    """What verdicts across runs had to clear (analysis.between_runs.drift_note)."""
    if drift["fraction"] is None:
        return (f"no verdict across runs yet: the machines' drift between runs is known from {drift['pairs']} "
                f"pairs of runs of the same code, {drift['needed']} more needed")
    return (f"verdicts across runs clear the machines' run-to-run drift of ±{drift['fraction']:.1%} (a 95% bound "
            f"from {drift['pairs']} pairs of runs)")


def ranking_table(doc: dict) -> Table | None:
    if len(doc.get("ranking", [])) < 2:
        return None
    cpu = {x["machine"]: x["fingerprint"].get("cpu_model", "") for x in doc["machines"]}
    t = Table("ranking", "machines ranked: geometric mean over the points every machine measured",
              columns("rank", "machine", "cpu", "% of best (rate)", "% of best (per clock)", "points", left=3),
              notes=[drift_sentence(doc["drift"])])
    for r in doc["ranking"]:
        t.add(r["rank"], r["machine"], cpu.get(r["machine"], ""),
              Cell(r["pct_of_best_rate"], f"{r['pct_of_best_rate']:.1f}%" if r["pct_of_best_rate"] else "-"),
              Cell(r["pct_of_best_per_clock"],
                   f"{r['pct_of_best_per_clock']:.1f}%" if r["pct_of_best_per_clock"] else "-"), r["points"])
    return t


MAX_PROCESSOR_POINTS = 12  # columns of two: wider than this, the machines x workloads table says it better


def processor_tables(doc: dict) -> list[Table]:
    """Seed 004's table 1, per experiment with a few points: processors as rows; per
    workload point, cycles per unit and % of the best processor at equal clock."""
    machines = list(dict.fromkeys(x["machine"] for x in doc["machines"]))
    if len(machines) < 2:
        return []
    by_exp: dict[str, list[dict]] = defaultdict(list)
    for r in doc["machine_table"]:
        if r["cycles_per_unit"]:
            by_exp[r["experiment"]].append(r)
    out = []
    for exp, rows in by_exp.items():
        seen: dict[tuple, set[str]] = defaultdict(set)
        for r in rows:
            seen[(r["workload"], r["variant"], fmt_params(r["params"], r["workload"]))].add(r["machine"])
        points = sorted(pt for pt, ms in seen.items() if len(ms) > 1)  # a row is a comparison of processors
        if not 1 <= len(points) <= MAX_PROCESSOR_POINTS:
            continue
        at = {(r["machine"], r["workload"], r["variant"], fmt_params(r["params"], r["workload"])): r for r in rows}
        names = ["processor"]
        for w, v, ps in points:
            names += [f"{w} {v} {'' if ps == '-' else ps} cycles/unit".replace("  ", " "), "% of max"]
        t = Table("processors", f"{exp}: processors as rows, cycles per unit and % of the best at equal clock "
                                "(seed 004's table 1)", columns(*names))
        for m in machines:
            cells: list[Any] = [m]
            for pt in points:
                r = at.get((m, *pt))
                best = min(x["cycles_per_unit"] for (_, *q), x in at.items() if tuple(q) == pt)
                cells += [Cell(r and r["cycles_per_unit"]),
                          Cell(r and best / r["cycles_per_unit"], f"{100 * best / r['cycles_per_unit']:.0f}%" if r else "-")]
            t.add(*cells)
        out.append(t)
    return out


def run_comparison_table(doc: dict) -> Table:
    """One run against another (analysis.between_runs.compare_runs): B's rate over A's at each point."""
    a, b = doc["a"], doc["b"]
    t = Table("run comparison", f"run {b['run_id']} ({b['machine'] or b['machine_id']}) against run {a['run_id']} "
                                f"({a['machine'] or a['machine_id']})",
              columns("workload", "variant", "params", "A", "B", "B/A", "95% CI", "verdict", left=3),
              notes=[drift_sentence(doc["drift"])])
    t.columns[-1].left = True
    for r in doc["comparisons"]:
        t.add(r["workload"], r["variant"], fmt_params(r["params"], r["workload"]), Cell(r["a"]),
              Cell(r["b"], f"{fmt_num(r['b'])} {r['rate_unit']}" if r["b"] else "-"), Cell(r["ratio"]),
              Cell(r["ci"], f"{r['ci'][0]:.3f}-{r['ci'][1]:.3f}" if r["ci"] else "-"),
              Cell(r["verdict"], str(r["verdict"]), verdict_tag(r["verdict"])))
    return t


def geomean_table(s: Summary) -> Table | None:
    rows = [g for g in s.geomeans if g.points > 1]
    if not rows:
        return None
    t = Table("geomeans", "geometric mean of the ratio over parameter points, with an interval from the points' intervals",
              columns("experiment", "workload", "variant", "vs", "geomean", "points", left=4))
    for g in rows:
        t.add(g.experiment, g.workload, g.variant, g.baseline, Cell(g.ratio, fmt_delta(g.ratio, g.ci)), g.points)
    return t


RESULT_FIELDS = ["experiment", "workload", "variant", "params", "status", "unit", "rate_unit", "median", "ci_low",
                 "ci_high", "cv", "cycles_per_unit", "ns_per_unit", "real_s", "user_s", "sys_s", "processes",
                 "invocations", "excluded_samples", "ci_coverage", "placements", "placement_low", "placement_high",
                 "timer", "emulated", "error"]
COMPARISON_FIELDS = ["experiment", "workload", "params", "baseline", "variant", "ratio", "ci_low", "ci_high", "p",
                     "verdict", "method", "rounds"]


def _field_cells(x, names: list[str], workload: str) -> list[Cell]:
    ci = x.ci or [None, None]
    band = getattr(x, "placement_band", None) or [None, None]
    special = {"params": Cell(fmt_params(x.params, workload)), "ci_low": Cell(ci[0]), "ci_high": Cell(ci[1]),
               "placement_low": Cell(band[0]), "placement_high": Cell(band[1])}
    return [special.get(n) or Cell(getattr(x, n)) for n in names]


def result_list(s: Summary) -> Table:
    """Every result, one row each, every field (CSV, Markdown)."""
    t = Table("result", "results", columns(*RESULT_FIELDS, left=7))
    for r in s.results:
        t.add(*_field_cells(r, RESULT_FIELDS, r.workload))
    return t


def comparison_list(s: Summary) -> Table:
    """Every comparison, one row each (CSV, Markdown, the report's last table)."""
    t = Table("comparison", "every comparison: ratio of medians (variant / baseline, > 1 is faster)",
              columns(*COMPARISON_FIELDS, left=5))
    for c in s.comparisons:
        cells = _field_cells(c, COMPARISON_FIELDS, c.workload)
        cells[5] = Cell(c.ratio, f"{c.ratio:.3f}" if c.ratio is not None else "-")
        cells[8] = Cell(c.p, f"{c.p:.3g}" if c.p is not None else "")
        cells[9] = Cell(c.verdict, tag=verdict_tag(c.verdict))
        t.add(*cells)
    return t


def gate_table(s: Summary, regressions: list[Comparison]) -> Table:
    """cpulab ci: head against base at every point, the regressions marked."""
    rate = {(r.experiment, r.workload, r.point, r.variant): r for r in s.results}
    t = Table("ci", "head against base (rates; > 0% is faster)",
              columns("program", "point", "base", "head", "change [interval]", "verdict", left=2))
    for c in s.comparisons:
        if (c.baseline, c.variant) != ("base", "head"):
            continue
        b, h = rate.get((c.experiment, c.workload, c.point, "base")), rate.get((c.experiment, c.workload, c.point, "head"))
        t.add(c.workload, fmt_params(c.params, c.workload),
              Cell(b and b.median, f"{fmt_num(b.median)} {b.rate_unit}" if b and b.median else "-"),
              Cell(h and h.median, f"{fmt_num(h.median)} {h.rate_unit}" if h and h.median else "-"),
              Cell(c.ratio, fmt_delta(c.ratio, c.ci)),
              Cell(c.verdict, ("REGRESSION: " if c in regressions else "") + str(c.verdict),
                   tag=verdict_tag(c.verdict)))
    return t


def pivot_table(results: list[Result]) -> Table | None:
    """Seed 004's table 1 layout: variants as rows; for each workload and parameter point
    a column of cycles per unit and one of percent of the best rate there ("% of max")."""
    ok = [r for r in results if r.status == Status.OK and r.median]
    points = sorted({(r.workload, fmt_params(r.params, r.workload)) for r in ok})
    if not 2 <= len(points) <= 8 or len({r.unit for r in ok}) != 1:
        return None  # a sweep has its curves; this layout is for a few workloads side by side
    at = {(r.variant, r.workload, fmt_params(r.params, r.workload)): r for r in ok}
    best = {p: max(r.median for (_, *q), r in at.items() if tuple(q) == p) for p in points}
    names = ["variant"]
    for w, ps in points:
        names += [f"{w} {ps} {ok[0].per_clock_unit}", "% of max"]
    t = Table("pivot", "per clock, and percent of the best variant at each point (the seed's table 1 layout)",
              columns(*names))
    for v in dict.fromkeys(r.variant for r in ok):
        cells: list[Any] = [v]
        for p in points:
            r = at.get((v, *p))
            cells += [Cell(r.cycles_per_unit if r else None),
                      Cell(r.median / best[p] if r else None, f"{100 * r.median / best[p]:.0f}%" if r else "-")]
        t.add(*cells)
    return t


# ---- stored analyses: one renderer per kind ------------------------------------------

def probe_tables(data: dict) -> list[Table]:
    """`cpulab probe` (one loop) or the rows of seed 004's table 2, with the seed's own
    figures beside them when the rows carry them."""
    rows = data.get("rows") or [data]
    published = list(rows[0].get("seed_published", {})) if rows else []
    names = (["col", "seed's loop"] if published else []) + \
        ["loop", "instr.", "cycles/iter", "min..max", "IPC", "ns/iter", "llvm-mca", "timer"] + \
        [f"{c} (seed: cycles, IPC)" for c in published]
    title = ("004 · Table 2: cycles per iteration of tiny loops (RDTSC, calibrated to core cycles)" if published
             else "cycles per iteration (core cycles; median of the N and 2N runs; min..max over all runs)")
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


def explain_tables(doc: dict, max_rows: int | None = None) -> list[Table]:
    """The sentence of why and the counts of two kernels' code, then their hot regions
    side by side (changed rows tagged; with a profile, each instruction's share of the
    region's samples)."""
    a, b = doc["a_name"], doc["b_name"]
    t = Table("code", doc.get("title") or ("generated code" + ("  (identical executables)" if doc["identical"] else "")),
              columns("", a, b), notes=[doc["why"]] if doc.get("why") else [])
    t.add("kernel instructions", doc["a"]["kernel_instructions"], doc["b"]["kernel_instructions"])
    t.add("kernel bytes", doc["a"]["kernel_bytes"], doc["b"]["kernel_bytes"])
    ha, hb = doc["a"]["hot_loop"], doc["b"]["hot_loop"]
    profiled = doc.get("profiled")
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
              columns("at", "to", "ns/load", "cycles/load", "cause", "matches", "nearest", "huge pages keep it", left=0),
              notes=data["description"].splitlines())
    for st in data["steps"]:
        keeps = st["huge_pages_keep_it"]
        t.add(Cell(st["edge_bytes"], human_bytes(st["edge_bytes"])),
              Cell(st["next_bytes"], human_bytes(st["next_bytes"]) if st["next_bytes"] else "-"),
              Cell(st["to_ns"], f"{fmt_num(st['from_ns'])} -> {fmt_num(st['to_ns'])}"),
              Cell(st["to_cycles"], f"{fmt_num(st['from_cycles'])} -> {fmt_num(st['to_cycles'])}"),
              st["cause"], ", ".join(st["matches"]) or "-", ", ".join(st["nearest"]),
              "unknown" if keeps is None else "yes" if keeps else "no")
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
        out.append(Table("history", f"{s['workload']} {s['variant']} {params}: {s['unit']} over runs "
                                    f"({s['order']} order; machine {s['machine_id']})",
                         columns("run", "label", "commit", s["unit"], "interval", "change point"), rows))
    return out


ANALYSIS_VIEWS: dict[str, Callable[[Any], list[Table]]] = {
    "table": legacy_table,
    "probe": probe_tables,
    "align": align_tables,
    "memlat-levels": memlat_tables,
    "memlat-steps": memlat_steps_tables,
    "memlat-colour": memlat_colour_tables,
    "bandwidth": bandwidth_tables,
    "explain": explain_tables,
    "history": history_tables,
}


def analysis_tables(kind: str, data: Any) -> list[Table]:
    """The tables of a stored analysis; a kind this version cannot draw says so."""
    view = ANALYSIS_VIEWS.get(kind)
    if isinstance(data, dict) and "error" in data and "status" in data:  # a probe table that failed or was lost
        return [Table(kind, f"{kind}: {data['status']}: {data['error']}", columns("analysis"))]
    if view is None:
        return [Table(kind, f"{kind}: stored, but this version of cpulab has no view of it", columns("analysis"))]
    return view(data)
