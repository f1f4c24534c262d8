"""The memory workloads' analyses: the memlat latency curve with its levels, arbitrary
against colour-balanced pages, and bandwidth by working set labelled with the cache
level it fits in.  Pure functions of the results (and the measuring machine's cache
sizes); the analyse stage (run_analyses.py) stores what they return."""
from __future__ import annotations

from collections import defaultdict

from cpulab import stats
from cpulab.params import human_bytes
from cpulab.model import Result, Status
from cpulab.spec.policy import DecisionPolicy
from cpulab.workloads.memory import page_colours
from cpulab.analysis.cache_levels import describe_levels, detect_levels, label_by_level
from cpulab.analysis.steps import explain_curves


# memlat parameters added after runs were stored: left out of a series' name at their
# defaults, so a curve keeps its name across runs of every version.
LATER_DEFAULTS = {"cache": "none", "fraction": "0"}


def _series_key(params: dict, skip: tuple[str, ...]) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted(params.items())
                    if k not in skip and LATER_DEFAULTS.get(k) != v)


def memlat_curves(results: list[Result], os_caches: list[dict]) -> list[dict]:
    """One curve per (variant, pages, mode, ...): points and the levels found in them."""
    groups: dict[tuple, list[Result]] = defaultdict(list)
    for r in results:
        if r.workload == "memlat" and r.status == Status.OK and r.ns_per_unit and r.params.get("fraction", "0") == "0":
            groups[(r.experiment, r.variant, _series_key(r.params, ("size", "seed", "line")))].append(r)
    curves = []
    for (exp, variant, key), rs in sorted(groups.items()):
        points = sorted(({"size_bytes": int(r.params["size"]), "ns": r.ns_per_unit,
                          "cycles": r.cycles_per_unit} for r in rs), key=lambda p: p["size_bytes"])
        levels = detect_levels([(p["size_bytes"], p["ns"], p["cycles"]) for p in points], os_caches)
        curves.append({"experiment": exp, "variant": variant, "series": key, "points": points, "levels": levels,
                       "description": describe_levels(levels, os_caches)})
    return curves


def memlat_steps(curves: list[dict], os_caches: list[dict], machine: dict) -> dict | None:
    """Each step of the latency curves matched to a cache level, a TLB level, or neither."""
    tlbs = machine.get("tlbs") or {}
    return explain_curves(curves, os_caches, tlbs.get("tlbs", []), tlbs.get("source", ""))


def memlat_colour(results: list[Result], policy: DecisionPolicy) -> dict | None:
    """Seed 003's question: arbitrary pages (colour=report: the pages the kernel gave, and
    their spread over the colours) against colour-balanced ones, at each (variant, cache,
    working set).  ratio: balanced rate / arbitrary rate (> 1: balancing helps), paired by
    round (both points run in every round).  `missing` says why no balanced point was
    measured (without root the kernel sees no frame numbers).  The rows are one family,
    decided under the run's policy (Holm over them)."""
    pairs: dict[tuple, dict[str, Result]] = defaultdict(dict)
    for r in results:
        if r.workload == "memlat" and r.params.get("colour") in ("report", "balanced"):
            p = r.params
            pairs[(r.variant, p.get("cache", "none"), int(p.get("fraction", "0")), int(p["size"]),
                   int(p["colour_cache_bytes"]), int(p["colour_ways"]))][p["colour"]] = r
    rows, why_missing, tested = [], set(), []
    for (variant, cache, pct, _, given_bytes, given_ways), side in sorted(pairs.items()):
        arb, bal = side.get("report"), side.get("balanced")
        notes = (arb or bal).notes
        cache_bytes, ways = notes.get("cache_bytes", given_bytes), notes.get("cache_ways", given_ways)
        row = {"variant": variant, "fraction": pct or None,
               "cache": cache if cache != "none" else f"{human_bytes(given_bytes)} {given_ways}-way",
               "size_bytes": notes.get("working_set_bytes"), "cache_bytes": cache_bytes, "ways": ways,
               "colours": page_colours(int(cache_bytes), int(ways)) if cache_bytes and ways else None,
               "arbitrary_imbalance": arb and arb.notes.get("colour_imbalance"),
               "arbitrary_pages": arb and [arb.notes.get("colour_pages_min"), arb.notes.get("colour_pages_max")],
               "ratio": None, "ci": None, "p": None, "verdict": None}
        for name, r in (("arbitrary", arb), ("balanced", bal)):
            ok = r is not None and r.status == Status.OK and bool(r.ns_per_unit)
            row[f"{name}_ns"], row[f"{name}_ns_ci"] = (r.ns_per_unit, _ns_ci(r)) if ok else (None, None)
            row[f"{name}_error"] = None if ok else "not measured" if r is None else r.error or (
                "no sample kept" if r.status == Status.OK else str(r.status))
        if row["arbitrary_ns"] and row["balanced_ns"]:
            t = stats.compare_pair(arb.observations, bal.observations, 1 - policy.alpha, "paired")
            row.update(ratio=t.ratio, ci=list(t.ci), p=t.p)
            tested.append((row, t))
        elif row["balanced_error"]:
            why_missing.add(row["balanced_error"])
        rows.append(row)
    for (row, _), (p_adj, verdict, t) in zip(tested, policy.decide([t for _, t in tested])):
        row.update(ratio=t.ratio, ci=list(t.ci), p=p_adj, verdict=verdict)
    return {"rows": rows, "missing": "; ".join(sorted(why_missing)) or None} if rows else None


def _ns_ci(r: Result) -> list[float] | None:
    """A result's rate interval as ns per unit (the bounds swap: a higher rate is fewer ns)."""
    return [r.ns_per_unit * r.median / hi for hi in reversed(r.ci)] if r.ci and r.median else None


def bandwidth_rows(results: list[Result], os_caches: list[dict]) -> list[dict]:
    """Each bandwidth point with MB/s, bytes per cycle and the level its working set fits in."""
    rows = []
    for r in results:
        if r.workload == "bandwidth" and r.status == Status.OK and r.median:
            size = int(r.params["size"])
            rows.append({"variant": r.variant, "op": r.params.get("op"), "size_bytes": size,
                         "mb_per_s": r.median, "mb_per_s_ci": r.ci,
                         "bytes_per_cycle": 1 / r.cycles_per_unit if r.cycles_per_unit else None,
                         "level": label_by_level(size, os_caches)})
    return sorted(rows, key=lambda x: (x["variant"], x["op"], x["size_bytes"]))
