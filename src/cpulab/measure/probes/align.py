"""Seed 004's table 3 for this core: latency of a dependent load by alignment.

The points run the `align` workload's kernel (kernels/align.c), the same artifact a plan
measures, one process per (offset, width, level).
"""
from __future__ import annotations

import statistics

from cpulab.plan import toolchain
from cpulab import workloads
from cpulab.compile.artifacts import build_artifact
from cpulab.measure.execute.executor import Executor
from cpulab.measure.probes.sampling import measure, per_unit

ALIGN_GROUPS = [
    ("aligned", "naturally aligned"),
    ("within8", "misaligned, does not cross an 8-byte boundary"),
    ("cross8", "crosses an 8-byte but not a 16-byte boundary"),
    ("cross16", "crosses a 16-byte but not a 32-byte boundary"),
    ("cross32", "crosses a 32-byte boundary inside the line"),
    ("line", "crosses a 64-byte cache-line boundary"),
    ("page", "crosses a 4 KiB page boundary"),
]


def align_group(offset: int, width: int, page_end: bool = False) -> str:
    """The seed-style group of a load of `width` bytes at byte `offset` of a 64-byte line."""
    end = offset + width - 1  # last byte
    if end >= 64:
        return "page" if page_end else "line"
    if offset % width == 0:
        return "aligned"
    for b in (32, 16, 8):
        if offset // b != end // b:
            return {32: "cross32", 16: "cross16", 8: "cross8"}[b]
    return "within8"


def align_points(full: bool = False, widths=(4, 8)) -> list[dict]:
    """The (offset, width, at) points to measure: all 64 offsets with full=True, else up to
    three per group (first, middle, last), plus the page-crossing offsets."""
    pts = []
    for w in widths:
        by_group: dict[str, list[int]] = {}
        for off in range(64):
            by_group.setdefault(align_group(off, w), []).append(off)
        for g, offs in by_group.items():
            pick = offs if full else sorted({offs[0], offs[len(offs) // 2], offs[-1]})
            pts += [{"offset": o, "width": w, "at": "line", "group": g} for o in pick]
        line_offs = by_group["line"]
        pick = line_offs if full else sorted({line_offs[0], line_offs[-1]})
        pts += [{"offset": o, "width": w, "at": "page-end", "group": "page"} for o in pick]
    return pts


def align_table(full: bool = False, levels=("l1", "l2"), widths=(4, 8), samples: int = 10,
                timer: str = "auto", variant: str = "O2", addressing: str = "auto",
                min_sample_time: float | None = 0.002, estimator: str = "min",
                executor: Executor | None = None) -> dict:
    """Seed 004's Table 3 for this core: dependent-load latency by alignment.

    Returns {"rows": [...], "points": [...], ...}: one row per (group, width) with the
    offsets measured and cycles and ns per load at each level (median over the
    offsets of each run's fastest sample, or median sample with estimator="median").  `points` holds every measured run.
    """
    art = build_artifact(workloads.get("align"), toolchain.get(variant))
    points, meta = [], {}
    for pt in align_points(full, widths):
        for level in levels:
            d = measure(art.path, {"offset": str(pt["offset"]), "width": str(pt["width"]),
                                   "at": pt["at"], "level": level, "addressing": addressing},
                        samples, timer, min_sample_time, executor)
            meta = {"timer": d["timer"], "core_per_tsc": d["core_per_tsc"], "tsc_hz": d["tsc_hz"]}
            points.append({**pt, "level": level, "cycles_per_load": per_unit(d, "cycles", estimator),
                           "ns_per_load": per_unit(d, "ns", estimator), "notes": d.get("notes", {})})
    rows = []
    for key, label in ALIGN_GROUPS:
        for w in widths:
            pts = [p for p in points if p["group"] == key and p["width"] == w]
            if not pts:
                continue
            row = {"group": key, "interpretation": label, "width": w,
                   "offsets": sorted({p["offset"] + (4096 - 64 if p["at"] == "page-end" else 0) for p in pts})}
            for level in levels:
                lv = [p for p in pts if p["level"] == level]
                cy = [p["cycles_per_load"] for p in lv if p["cycles_per_load"] is not None]
                row[f"{level}_cycles"] = statistics.median(cy) if cy else None
                row[f"{level}_ns"] = statistics.median(p["ns_per_load"] for p in lv)
                row[f"{level}_indexed"] = any(p["notes"].get("indexed_addressing") for p in lv)
            rows.append(row)
    return {"rows": rows, "points": points, "levels": list(levels), "widths": list(widths),
            "full": full, "estimator": estimator, "artifact": art.path, "code_hash": art.code_hash, **meta,
            "note": ("offsets in the page group are counted from the page start (line 63 of a "
                     "4 KiB page + offset); 4-byte loads are direct (MAP_32BIT ring, no add) "
                     "unless *_indexed says the base+index form was used")}
