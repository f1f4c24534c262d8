"""The HTML report: one self-contained file (styles and SVG plots inline, no scripts from
the network), drawn from a run's Summary: the tables of report/views.py, plots of the
results, and every analysis stored with the run.  It computes nothing and reads no store.
Every piece of text that comes from a plan, a variant name or a hostname goes through
Jinja's autoescape."""
from __future__ import annotations

import math
import time
from collections import defaultdict
from pathlib import Path

import jinja2

from cpulab.model import Machines, Result, Summary
from cpulab.params import cache_label
from cpulab.report import plots
from cpulab.report.tables import FOLD_ROWS
from cpulab.report.analysis_views import Views, analysis_plots, analysis_tables
from cpulab.report.machine_views import drift_sentence, machine_tables
from cpulab.report.event_views import event_tables
from cpulab.report.views import (
    carryover_line, comparison_list, fmt_params, geomean_table, legend, pivot_table, time_split_table,
    workload_of, workload_tables
)

TEMPLATES = Path(__file__).resolve().parent / "templates"


def _x_of(r: Result, key: str) -> float:
    """A sweep point's x: the working set the kernel reported, else the parameter."""
    return float(r.notes.get("working_set_bytes") or r.params[key])


def _series_name(r: Result, key: str | None, varying: list[str]) -> str:
    """Its label and the varying parameters it has (an imported tool's benchmarks of one
    workload may each have parameters of their own)."""
    return " ".join([r.label, *(f"{k}={r.params[k]}" for k in varying if k != key and k in r.params)])


def sweep_axis(ok: list[Result]) -> str | None:
    """The workload's declared sweep axis, when this run swept it over 3 or more values."""
    w = workload_of(ok[0].workload) if ok else None
    key = w.sweep_axis if w else None
    return key if key and len({r.params.get(key) for r in ok}) >= 3 else None


def rate_plots(wname: str, ok: list[Result], caches: list[dict]) -> list[str]:
    """A sweep: rate and speedup over the slowest against the sweep axis; else bars."""
    varying = [k for k in ok[0].params if len({r.params.get(k) for r in ok}) > 1]
    key = sweep_axis(ok)
    unit = ok[0].rate_unit
    if key is None:
        return [plots.bars([_series_name(r, None, varying) for r in ok], [r.median for r in ok],
                           [tuple(r.ci or (r.median, r.median)) for r in ok], unit, f"{wname}: median {unit} with 95% intervals")]
    slowest: dict[tuple, float] = {}
    for r in ok:
        slowest[r.point] = min(slowest.get(r.point, math.inf), r.median)
    rate, speedup = defaultdict(list), defaultdict(list)
    for r in ok:
        rate[_series_name(r, key, varying)].append((_x_of(r, key), r.median))
        speedup[_series_name(r, key, varying)].append((_x_of(r, key), r.median / slowest[r.point]))
    xlabel = "working set" if any("working_set_bytes" in r.notes for r in ok) else key
    return [plots.curves(rate, xlabel, unit, f"{wname}: {unit} against {xlabel}", caches),
            plots.curves(speedup, xlabel, "speedup over the slowest",
                         f"{wname}: speedup of each variant over the slowest at each point", caches)]


def _part(title: str, plots_=(), why=(), tables=()) -> dict:
    return {"title": title, "plots": list(plots_), "why": list(why), "tables": list(tables)}


def sections(s: Summary, views: Views) -> list[dict]:
    caches = s.machine.get("caches", [])
    tables, counted = workload_tables(s), event_tables(s)
    shown: set[int] = set()

    def analysis(kind: str, key: str):
        for i, a in enumerate(s.analyses):
            if a.kind == kind and a.key == key:
                shown.add(i)
                return a
        return None

    out = []
    for e in s.plan.experiments:
        parts = []
        exp_results = [r for r in s.results if r.experiment == e.name]
        if len(e.workloads) > 1 and (pivot := pivot_table(exp_results)):
            parts.append(_part("all workloads at a glance", tables=[pivot]))
        for wname in e.workloads:
            ok = [r for r in exp_results if r.workload == wname and r.median is not None]
            w = workload_of(wname)
            part = _part(wname, tables=[t[(e.name, wname)] for t in (tables, counted) if (e.name, wname) in t])
            own = [a for kind in (w.analyses if w else ()) if (a := analysis(kind, e.name)) is not None]
            for a in own:
                part["plots"] += analysis_plots(a.kind, a.data, caches, views)
                part["tables"] += analysis_tables(a.kind, a.data, views)
            found = analysis("findings", f"{e.name}/{wname}")
            if ok and not (w and w.view == "analysis" and own):
                part["plots"] += rate_plots(wname, ok, caches)
                part["why"] += found.data if found else []
            if code := analysis("explain", f"{e.name}/{wname}"):
                part["tables"] += analysis_tables("explain", code.data, views)
            parts.append(part)
        out.append({"id": e.name, "title": e.title or e.name, "tag": e.tag, "intro": e.intro, "parts": parts})
    for i, a in enumerate(s.analyses):  # every other stored analysis: a section of its own
        if i not in shown:
            ts = analysis_tables(a.kind, a.data, views)
            plot = analysis_plots(a.kind, a.data, caches, views)
            if not ts and not plot:  # drawn inside another view (a comparison's why, a workload's plots)
                continue
            out.append({"id": f"{a.kind}-{a.key}", "title": ts[0].title if ts else a.kind, "intro": "",
                        "parts": [_part(f"{a.kind} {a.key}".strip(), plot, tables=ts)]})
    return out


def render(s: Summary, views: Views) -> str:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True)
    tpl = env.get_template("report.html.j2")
    with plots.drawn_together():
        drawn = sections(s, views)
    return tpl.render(s=s, sections=drawn, geomeans=geomean_table(s), comparisons=comparison_list(s),
                      fold=FOLD_ROWS, fmt_params=fmt_params, legend=legend(s),
                      carryover=carryover_line(s), time_split=time_split_table(s),
                      caches=", ".join(cache_label(c) for c in s.machine.get("caches", [])) or "unknown",
                      started=time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(s.started)))


class ReportError(Exception):
    """The report could not be drawn or written (one line); the stored run is untouched."""


def render_machines(doc: Machines) -> str:
    """Machines side by side (analysis.between_runs.machines_summary): ranked, seed 004's
    table 1, machines x workloads, each machine's memory-latency curve overlaid, fingerprints."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True)
    what = f"run {doc.run_id}" if doc.run_id is not None else "runs " + ", ".join(map(str, doc.run_ids))
    caches = {m.machine: ", ".join(cache_label(c) for c in m.fingerprint.get("caches", [])) or "unknown"
              for m in doc.machines}
    plot = [plots.curves({k: [tuple(p) for p in v] for k, v in doc.memlat.items()}, "working set",
                         "ns per load", "memlat: load-to-use latency of each machine", logy=True)] \
        if doc.memlat else []
    return env.get_template("machines.html.j2").render(doc=doc, caches=caches, what=what, tables=machine_tables(doc),
                                                       plots=plot, fold=FOLD_ROWS, drift=drift_sentence(doc.drift))


def write(s: Summary | Machines, path: Path, views: Views) -> Path:
    """The report of a run (a Summary), or of machines side by side (a machines document)."""
    path = Path(path)
    try:
        text = render(s, views) if isinstance(s, Summary) else render_machines(s)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(text)
        tmp.replace(path)
    except Exception as e:  # drawing, templating or writing: the report is a view, the run is already stored
        detail = " ".join(f"{type(e).__name__}: {e}".split())  # one line, even for matplotlib's messages
        raise ReportError(f"report {path} cannot be drawn: {detail[:300]}") from e
    return path

