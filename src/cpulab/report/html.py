"""The HTML report: one self-contained file (styles and SVG plots inline, no scripts from
the network), made from a run's summary.  Every piece of text that comes from a plan, a
variant name or a hostname goes through Jinja's autoescape."""
from __future__ import annotations

import math
import time
from collections import defaultdict
from pathlib import Path

import jinja2

from .. import explain, machine
from ..analysis.memory import human_bytes
from ..store import Store
from . import plots, studies
from .terminal import fmt_num, fmt_params

TEMPLATES = Path(__file__).resolve().parent / "templates"


def verdict_class(v: str | None) -> str:
    return {"faster": "faster", "slower": "slower", "same": "same", "identical code": "identical",
            "inconclusive": "fail"}.get(v or "", "fail")


def _is_number(v: str) -> bool:
    try:
        float(v)
        return True
    except (TypeError, ValueError):
        return False


def sweep_key(results: list[dict]) -> str | None:
    """The numeric parameter a workload was swept over (3 or more values), if any."""
    best = None
    for k in results[0]["params"] if results else []:
        values = {r["params"].get(k) for r in results}
        if len(values) >= 3 and all(_is_number(v) for v in values):
            if best is None or len(values) > best[1]:
                best = (k, len(values))
    return best[0] if best else None


def _x_of(r: dict, key: str) -> float:
    """A sweep point's x: the working set the kernel reported, else the parameter."""
    return float(r["notes"].get("working_set_bytes") or r["params"][key])


def _series_name(r: dict, key: str | None, varying: list[str]) -> str:
    extra = [f"{k}={r['params'][k]}" for k in varying if k != key]
    return " ".join([r["variant"], *extra])


def results_table(rows: list[dict], comps: dict, show_times: bool) -> dict:
    """Rows of a workload: median [CI], per clock, % of the best at the same point, delta
    vs baseline, verdict; real/user/sys per repetition where the work is a file."""
    best: dict[tuple, float] = defaultdict(float)
    for r in rows:
        if r["median"]:
            best[_pkey(r)] = max(best[_pkey(r)], r["median"])
    unit = rows[0]["rate_unit"] if rows else ""
    per_clock = rows[0]["per_clock_unit"] if rows else ""
    slowest: dict[tuple, float] = {}
    for r in rows:
        if r["median"]:
            slowest[_pkey(r)] = min(slowest.get(_pkey(r), math.inf), r["median"])
    cols = ["params", "variant", unit, "95% CI", per_clock, "% of max", "vs slowest", "vs baseline", "verdict"]
    if show_times:
        cols += ["real s", "user s", "sys s"]
    out = []
    for r in rows:
        c = comps.get((r["experiment"], r["workload"], _pkey(r), r["variant"]))
        verdict = ("identical code (= " + r["same_as"] + ")" if r["status"] == "identical" else
                   f"{r['status']}: {r['error']}" if r["status"] != "ok" else c["verdict"] if c else "baseline")
        delta = "" if not c or c["ratio"] is None or c["verdict"] == "identical code" else \
            f"{(c['ratio'] - 1) * 100:+.1f}% [{(c['ci'][0] - 1) * 100:+.1f}, {(c['ci'][1] - 1) * 100:+.1f}]"
        row = [fmt_params(r["params"]), r["variant"], fmt_num(r["median"]),
               (f"{fmt_num(r['ci'][0])} .. {fmt_num(r['ci'][1])}" if r["ci"] else "")
               + (f" (covers {100 * r['ci_coverage']:.0f}%)" if r["ci"] and (r.get("ci_coverage") or 1) < 0.95 else "")
               + (f"; {r['excluded_samples']} samples left out" if r.get("excluded_samples") else ""),
               fmt_num(r["cycles_per_unit"]),
               f"{100 * r['median'] / best[_pkey(r)]:.0f}%" if r["median"] else "",
               f"{100 * (r['median'] / slowest[_pkey(r)] - 1):+.0f}%" if r["median"] else "", delta, verdict]
        if show_times:
            row += [fmt_num(r["real_s"]), fmt_num(r["user_s"]), fmt_num(r["sys_s"])]
        out.append(row)
    return {"columns": cols, "rows": out, "left": 2,
            "classes": {"faster": "faster", "slower": "slower", "same": "same", "baseline": "muted"}}


def _pkey(r: dict) -> tuple:
    return tuple(sorted(r["params"].items()))


def workload_part(s: dict, exp: str, wname: str, store: Store | None) -> dict:
    rows = [r for r in s["results"] if r["experiment"] == exp and r["workload"] == wname]
    comps = {(c["experiment"], c["workload"], tuple(sorted(c["params"].items())), c["variant"]): c
             for c in s["comparisons"] if c["experiment"] == exp and c["workload"] == wname}
    ok = [r for r in rows if r["median"] is not None]
    part = {"title": wname, "plots": [], "tables": [], "why": [], "explain": None}
    caches = s["machine"].get("caches", [])
    varying = [k for k in (rows[0]["params"] if rows else {}) if len({r["params"].get(k) for r in rows}) > 1]
    key = sweep_key(ok)
    unit, per_clock = (ok[0]["rate_unit"], ok[0]["per_clock_unit"]) if ok else ("", "")
    if wname == "memlat" and ok:
        memlat_part(part, ok, caches)
    elif ok and key:
        series: dict[str, list] = defaultdict(list)
        for r in ok:
            series[_series_name(r, key, varying)].append((_x_of(r, key), r["median"]))
        xlabel = "working set" if any("working_set_bytes" in r["notes"] for r in ok) else key
        part["plots"].append(plots.curves(series, xlabel, unit, f"{wname}: {unit} against {xlabel}", caches))
        part["plots"].append(plots.curves(speedup_series(ok, key, varying), xlabel, "speedup over the slowest",
                                          f"{wname}: speedup of each variant over the slowest at each point",
                                          caches))
    elif ok:
        labels = [_series_name(r, None, varying) for r in ok]
        part["plots"].append(plots.bars(labels, [r["median"] for r in ok], [tuple(r["ci"]) for r in ok], unit,
                                        f"{wname}: median {unit} with 95% intervals"))
    part["tables"].append(results_table(rows, comps, any("file_bytes" in r["notes"] for r in rows)))
    part["why"] += studies.notes_for(wname, ok, s)
    if store is not None:
        part["explain"] = explain_largest(s, exp, wname, store)
    return part


def memlat_part(part: dict, ok: list[dict], caches: list[dict]) -> None:
    """Latency against working set per page mode, the levels found, and what they mean."""
    from ..analysis import sweeps
    curves = sweeps.memlat_curves(ok, [{**c, "name": machine.cache_label(c)} for c in caches])
    series = {f"{c['variant']} {c['series']}": [(p["size_bytes"], p["ns"]) for p in c["points"]] for c in curves}
    part["plots"].append(plots.curves(series, "working set", "ns per load", "memlat: load-to-use latency",
                                      caches, logy=True, levels=curves[0]["levels"] if curves else None))
    for c in curves:
        part["why"].append(f"{c['variant']} {c['series']}: " + c["description"])
        part["tables"].append({
            "caption": f"levels found in {c['variant']} {c['series']}",
            "columns": ["level", "up to", "ns/load", "cycles/load", "points", "OS cache it matches"], "left": 1,
            "classes": {},
            "rows": [[i, human_bytes(lv["size_bytes"]), fmt_num(lv["ns"]), fmt_num(lv["cycles"]), lv["points"],
                      lv["matches"] or f"none (nearest {lv.get('nearest', '-')})"]
                     for i, lv in enumerate(c["levels"], 1)]})


def speedup_series(ok: list[dict], key: str, varying: list[str]) -> dict[str, list]:
    """At each point, each variant's rate over the slowest variant's there."""
    slowest: dict[tuple, float] = {}
    for r in ok:
        point = _pkey(r)
        slowest[point] = min(slowest.get(point, math.inf), r["median"])
    series: dict[str, list] = defaultdict(list)
    for r in ok:
        series[_series_name(r, key, varying)].append((_x_of(r, key), r["median"] / slowest[_pkey(r)]))
    return series


def explain_largest(s: dict, exp: str, wname: str, store: Store) -> dict | None:
    """The hot loops of the baseline and the variant with the largest real difference."""
    comps = [c for c in s["comparisons"] if c["experiment"] == exp and c["workload"] == wname
             and c["verdict"] in ("faster", "slower") and c["ratio"]]
    if not comps:
        return None
    c = max(comps, key=lambda c: abs(math.log(c["ratio"])))
    arts = {}
    for r in store.results(s["run_id"]):
        if r["experiment"] == exp and r["workload"] == wname and r["variant"] in (c["baseline"], c["variant"]):
            art = store.artifact(r["artifact_hash"]) if r["artifact_hash"] else None
            if art:
                arts[r["variant"]] = art["path"]
    if len(arts) < 2 or not all(Path(p).exists() for p in arts.values()):
        return None
    try:
        e = explain.explain(arts[c["baseline"]], arts[c["variant"]])
    except (RuntimeError, OSError):
        return None
    pct = (c["ratio"] - 1) * 100
    return {**e, "a_name": c["baseline"], "b_name": c["variant"],
            "title": f"{c['variant']} is {abs(pct):.1f}% {'faster' if pct > 0 else 'slower'} than {c['baseline']} "
                     f"({fmt_params(c['params'])}); their generated code"}


def sections(s: dict, store: Store | None) -> list[dict]:
    out = []
    for e in s["plan"]["experiments"]:
        parts = [workload_part(s, e["name"], w, store) for w in e["workloads"]]
        if len(e["workloads"]) > 1 and (pivot := studies.pivot_table(
                [r for r in s["results"] if r["experiment"] == e["name"]])):
            parts.insert(0, {"title": "all workloads at a glance", "plots": [], "why": [], "tables": [pivot],
                             "explain": None})
        out.append({"id": e["name"], "title": e.get("title") or e["name"], "intro": studies.intro(e["name"]),
                    "parts": parts})
    out += studies.analysis_sections(s)
    return out


def render(s: dict, store: Store | None = None) -> str:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True)
    tpl = env.get_template("report.html.j2")
    commands = []
    if store is not None:
        seen = set()
        for r in store.results(s["run_id"]):
            if r["artifact_hash"] and (r["workload"], r["variant"]) not in seen:
                seen.add((r["workload"], r["variant"]))
                art = store.artifact(r["artifact_hash"])
                if art:
                    commands.append((f"{r['workload']} / {r['variant']}", art["commands"]))
    return tpl.render(s=s, sections=sections(s, store), commands=commands, fmt_params=fmt_params,
                      verdict_class=verdict_class,
                      caches=", ".join(machine.cache_label(c) for c in s["machine"].get("caches", [])) or "unknown",
                      started=time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(s["started"])))


def write(s: dict, path: Path, store: Store | None = None) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(render(s, store))
    tmp.replace(path)
    return path
