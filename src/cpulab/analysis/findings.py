"""The words around the numbers: what the results say about why (the knee of a sweep
against the cache sizes, the widest gap between variants), as sentences the analysis
stage stores (kind `findings`) and the report shows.  What each experiment asks is its
plan's `intro`."""
from __future__ import annotations

from collections import defaultdict

from cpulab.analysis.cache_levels import human_bytes, label_by_level
from cpulab.model import Result


def _label(size: float, caches: list[dict]) -> str:
    level = label_by_level(size, caches) if caches else None
    return {None: "cache sizes unknown", "memory": "larger than every cache"}.get(level, f"fits in {level}")


def knees(ok: list[Result], caches: list[dict], axis: str | None) -> list[str]:
    """For each series of a working-set sweep: the drops of more than 20% between
    neighbouring points where the working set crosses a cache boundary (a knee), or, if
    there is none, that the rate does not follow the caches at all."""
    series: dict[tuple, list[tuple[float, float]]] = defaultdict(list)
    for r in ok:
        ws = r.notes.get("working_set_bytes")
        if ws:
            others = tuple(sorted((k, v) for k, v in r.params.items() if k != axis))
            series[(r.variant, others)].append((float(ws), r.median))
    out = []
    for (variant, others), pts in sorted(series.items()):
        pts.sort()
        if len(pts) < 4:
            continue
        name = " ".join([variant, *(f"{k}={v}" for k, v in others)])
        unit = ok[0].rate_unit
        found = []
        for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
            if y1 < 0.8 * y0 and _label(x0, caches) != _label(x1, caches):
                found.append(f"{y0:.4g} to {y1:.4g} {unit} between {human_bytes(x0)} ({_label(x0, caches)}) and "
                             f"{human_bytes(x1)} ({_label(x1, caches)})")
        if found:
            out.append(f"{name}: the rate falls from " + "; and from ".join(found) +
                       ": a knee where the data leaves a cache and the loads wait on the next level.")
        else:
            tail = [y for x, y in pts if x > 4096]
            if tail and max(tail) < 1.25 * min(tail):
                out.append(f"{name}: no knee at any cache boundary; from 4 KiB on the rate stays within 25% "
                           f"({min(tail):.4g} to {max(tail):.4g} {unit}). The core bounds it, not the caches "
                           f"(in plain C without -ffast-math a reduction is one chain of dependent adds).")
    return out


def spread(ok: list[Result]) -> list[str]:
    """The widest gap between variants at one parameter point, per clock."""
    by_point: dict[tuple, list[Result]] = defaultdict(list)
    for r in ok:
        by_point[r.point].append(r)
    best = None
    for rs in by_point.values():
        if len(rs) >= 2:
            lo, hi = min(rs, key=lambda r: r.median), max(rs, key=lambda r: r.median)
            gap = hi.median / lo.median
            if best is None or gap > best[0]:
                best = (gap, lo, hi)
    if not best or best[0] < 1.01:
        return []
    gap, lo, hi = best
    per = lambda r: f"{r.cycles_per_unit:.4g} {r.per_clock_unit}" if r.cycles_per_unit else "?"
    return [f"Widest gap: {hi.variant} is {100 * (gap - 1):.0f}% faster than {lo.variant} "
            f"({per(hi)} against {per(lo)})."]
