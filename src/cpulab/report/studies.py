"""The words around the numbers: what each seed experiment asks, and what the data says
about why (the knee of a sweep against the cache sizes, the widest gap between
variants).  Derived from the results each time; nothing here is measured."""
from __future__ import annotations

from collections import defaultdict

from .. import machine
from ..analysis.cache_levels import human_bytes
from .terminal import fmt_params

INTROS = {
    "seed000": "Seed 000: the same RC5 key-cracking source built as a.out vs ELF and static vs dynamic gave "
               "16-66% different keys/s on 386/486 machines. Here: RC5-72 keys/s and cycles/key under today's "
               "link formats (static, dynamic, PIE, fixed-address), with percent faster than the slowest, and the "
               "generated code of the widest pair side by side.",
    "seed001": "Seed 001: dot product, euclidean distance and a radix-2 FFT on an ARM board, old ABI (FPA "
               "instructions trapped and emulated) vs EABI soft-float, MFLOPS against vector size, with a knee "
               "where the data outgrew the 16 KB D-cache. Here: a scalar x87 build (-m32 -mfpmath=387), the "
               "default SSE2 build and -O3 -march=native, MFLOPS against working set with the caches marked.",
    "seed002": "Seed 002: hashdeep SHA-256 over 10 MB to 1 GB files, -O2 vs -O3, real/user/sys on four servers. "
               "Here: the same over files in the page cache, with the SHA extensions kernel beside the portable "
               "one for the instruction-set effect.",
    "seed003": "Seed 003: lmbench memory latency against array size on an Alpha, with a sharp or a gradual L2 "
               "step depending on page colouring. Here: a dependent random chase, 4 KiB pages vs transparent "
               "huge pages, with the steps found in the curve and set against the cache sizes the OS reports.",
    "seed004": "Seed 004: DES and RC5 keys/s on Pentium, Pentium Pro, Pentium II and K6 at equal clock (% of "
               "max), RDTSC cycle counts of tiny loops (table 2) and load latency by alignment (table 3). Here: "
               "the same figures per clock on this core, across build variants.",
}


def intro(experiment: str) -> str:
    return INTROS.get(experiment, "")


def _label(size: float, caches: list[dict]) -> str:
    data = sorted((c for c in caches if c.get("type") != "Instruction" and c.get("size_bytes")),
                  key=lambda c: c["size_bytes"])
    for c in data:
        if size <= c["size_bytes"]:
            return f"fits in {machine.cache_label(c)}"
    return "larger than every cache" if data else "cache sizes unknown"


def knees(ok: list[dict], caches: list[dict]) -> list[str]:
    """For each series of a working-set sweep: the drops of more than 20% between
    neighbouring points where the working set crosses a cache boundary (a knee), or, if
    there is none, that the rate does not follow the caches at all."""
    series: dict[tuple, list[tuple[float, float]]] = defaultdict(list)
    for r in ok:
        ws = r["notes"].get("working_set_bytes")
        if ws:
            others = tuple(sorted((k, v) for k, v in r["params"].items() if k not in ("n", "size")))
            series[(r["variant"], others)].append((float(ws), r["median"]))
    out = []
    for (variant, others), pts in sorted(series.items()):
        pts.sort()
        if len(pts) < 4:
            continue
        name = " ".join([variant, *(f"{k}={v}" for k, v in others)])
        unit = ok[0]["rate_unit"]
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


def spread(ok: list[dict]) -> list[str]:
    """The widest gap between variants at one parameter point, per clock."""
    by_point: dict[tuple, list[dict]] = defaultdict(list)
    for r in ok:
        by_point[tuple(sorted(r["params"].items()))].append(r)
    best = None
    for rs in by_point.values():
        if len(rs) >= 2:
            lo, hi = min(rs, key=lambda r: r["median"]), max(rs, key=lambda r: r["median"])
            gap = hi["median"] / lo["median"]
            if best is None or gap > best[0]:
                best = (gap, lo, hi)
    if not best or best[0] < 1.01:
        return []
    gap, lo, hi = best
    per = lambda r: f"{r['cycles_per_unit']:.4g} {r['per_clock_unit']}" if r["cycles_per_unit"] else "?"
    return [f"Widest gap: {hi['variant']} is {100 * (gap - 1):.0f}% faster than {lo['variant']} "
            f"({per(hi)} against {per(lo)})."]


def notes_for(workload: str, ok: list[dict], s: dict) -> list[str]:
    if workload == "memlat":  # its levels say more than a knee of loads/s would
        return []
    return knees(ok, s["machine"].get("caches", [])) + spread(ok)


def analysis_sections(s: dict) -> list[dict]:
    """Stored analyses that carry a table ({title, columns, rows, notes}) as sections."""
    out = []
    for a in s.get("analyses", []):
        d = a["data"]
        if not isinstance(d, dict) or "rows" not in d or "columns" not in d:
            continue
        out.append({"id": f"{a['kind']}-{a['key']}", "title": d.get("title") or a["kind"], "intro": d.get("intro", ""),
                    "parts": [{"title": d.get("subtitle", ""), "plots": d.get("plots", []), "why": d.get("notes", []),
                               "tables": [{"columns": d["columns"], "rows": d["rows"], "left": d.get("left", 1),
                                           "classes": {}, "caption": ""}],
                               "explain": None}]})
    return out


def pivot_table(results: list[dict]) -> dict | None:
    """Seed 004's table 1 layout: variants as rows; for each workload and parameter point
    a column of cycles per unit and one of percent of the best rate there ("% of max")."""
    ok = [r for r in results if r["status"] == "ok" and r["median"]]
    points = sorted({(r["workload"], fmt_params(r["params"])) for r in ok})
    if not 2 <= len(points) <= 8 or len({r["unit"] for r in ok}) != 1:
        return None  # a sweep has its curves; this layout is for a few workloads side by side
    best = {p: max(r["median"] for r in ok if (r["workload"], fmt_params(r["params"])) == p) for p in points}
    variants = list(dict.fromkeys(r["variant"] for r in ok))
    cols = ["variant"]
    for w, ps in points:
        cols += [f"{w} {ps} {ok[0]['per_clock_unit']}", "% of max"]
    rows = []
    for v in variants:
        row = [v]
        for p in points:
            r = next((r for r in ok if r["variant"] == v and (r["workload"], fmt_params(r["params"])) == p), None)
            row += [f"{r['cycles_per_unit']:.4g}" if r and r["cycles_per_unit"] else "-",
                    f"{100 * r['median'] / best[p]:.0f}%" if r else "-"]
        rows.append(row)
    return {"caption": "per clock, and percent of the best variant at each point (the seed's table 1 layout)",
            "columns": cols, "rows": rows, "left": 1, "classes": {}}

