"""Curves from a run's results: the memlat latency curve with its levels, and bandwidth
by working set labelled with the cache level it fits in.  Pure functions of the results
(and the OS's cache sizes); the analyse stage (stage.py) stores what they return."""
from __future__ import annotations

import math
from collections import defaultdict

from cpulab.model import Result, Status
from cpulab.analysis.cache_levels import describe_levels, detect_levels, label_by_level


def _series_key(params: dict, skip: tuple[str, ...]) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted(params.items()) if k not in skip)


def memlat_curves(results: list[Result], os_caches: list[dict]) -> list[dict]:
    """One curve per (variant, pages, mode, ...): points and the levels found in them."""
    groups: dict[tuple, list[Result]] = defaultdict(list)
    for r in results:
        if r.workload == "memlat" and r.status == Status.OK and r.ns_per_unit:
            groups[(r.experiment, r.variant, _series_key(r.params, ("size", "seed", "line")))].append(r)
    curves = []
    for (exp, variant, key), rs in sorted(groups.items()):
        points = sorted(({"size_bytes": int(r.params["size"]), "ns": r.ns_per_unit,
                          "cycles": r.cycles_per_unit} for r in rs), key=lambda p: p["size_bytes"])
        levels = detect_levels([(p["size_bytes"], p["ns"], math.nan if p["cycles"] is None else p["cycles"])
                                for p in points], os_caches)
        curves.append({"experiment": exp, "variant": variant, "series": key, "points": points, "levels": levels,
                       "description": describe_levels(levels, os_caches)})
    return curves


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
