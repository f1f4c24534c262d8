"""The roofline: each floating-point or streaming result placed under this machine's roofs.

The roofs are measured by the `roofline` probe (measure/probes/roofline.py): double flops
per core cycle for each instruction set, and bytes per core cycle read from each cache
level and from memory.  A result sits at x = its arithmetic intensity (the workload's
flops per byte at that point) and y = its flops per core cycle (1 / cycles per flop; a
streaming kernel's bytes per cycle times its intensity).  What bounds it is the lower of
the top compute roof (float: twice the double lanes) and the intensity times the
bandwidth of the level its working set fits in; its share is y over that bound.  A point
above that bound is not a fast kernel but a model that does not fit it: the intensity
counts each operand once, while a kernel that passes over its data several times (an
FFT's stages) re-reads what a nearer level holds; or the kernel's streams draw more from
the level than the probe's one pattern did (dot's two prefetched streams read an Intel
L3 at 7.2 bytes a cycle where the probe measured 5.3).  Such a point is placed under the
farthest nearer level whose roof holds it, and says why (`why`), with the bytes a cycle
it moved against the level's measured roof.
Everything is per core cycle, so a run's kernels read against roofs measured on the same
kind of core at any clock.
"""
from __future__ import annotations

from cpulab import workloads
from cpulab.model import Result


def level_of(working_set: int, memory: list[dict]) -> dict:
    """The roof of the smallest level holding the working set (memory beyond them all)."""
    return next((m for m in memory if m["holds_bytes"] and working_set <= m["holds_bytes"]), memory[-1])


def place(r: Result, roofs: dict) -> dict | None:
    """One result under the roofs, or None where it has no flops or no cycles."""
    w = workloads.registry().get(r.workload)
    if not r.cycles_per_unit or r.emulated:
        return None
    point = {**(w.defaults() if w else {}), **r.params}
    # declared by a built-in workload, or noted by a kernel of one's own (cpulab.h: k_note)
    intensity = w.flops_per_byte(point) if w and w.flops_per_byte else (r.notes or {}).get("flops_per_byte")
    memory = [m for m in roofs["memory"] if m["bytes_per_cycle"]]
    compute = [c for c in roofs["compute"] if c["flops_per_cycle"]]
    if not intensity or not memory or not compute:
        return None
    flops_per_cycle = (1 if r.unit == "flop" else intensity) / r.cycles_per_unit
    working_set = int((r.notes or {}).get("working_set_bytes") or (w.memory(point) if w and w.memory else 0))
    level = level_of(working_set, memory)
    top = max(compute, key=lambda c: c["flops_per_cycle"])
    lanes = 2 if point.get("precision") == "float" else 1
    compute_roof, memory_roof = top["flops_per_cycle"] * lanes, intensity * level["bytes_per_cycle"]
    roof = min(compute_roof, memory_roof)
    placed = {"experiment": r.experiment, "workload": r.workload, "variant": r.variant, "params": r.params,
              "intensity": intensity, "flops_per_cycle": flops_per_cycle, "working_set_bytes": working_set,
              "level": level["level"], "roof_flops_per_cycle": roof,
              "bound": f"{level['level']} bandwidth" if memory_roof <= compute_roof else f"{top['isa']} peak",
              "share": flops_per_cycle / roof}
    if flops_per_cycle > roof and memory_roof < compute_roof:
        placed.update(served_from(flops_per_cycle, intensity, level, memory, compute_roof))
    return placed


def served_from(flops_per_cycle: float, intensity: float, level: dict, memory: list[dict],
                compute_roof: float) -> dict:
    """A point above the roof of its working set's level, placed under the farthest nearer
    level whose roof holds it (memory is listed nearest first), with why."""
    nearer = memory[:memory.index(level)]
    holds = [m for m in nearer if min(intensity * m["bytes_per_cycle"], compute_roof) >= flops_per_cycle]
    if not holds:
        return {"why": f"above every roof at {intensity:.3g} flop/byte: the kernel does more flops per byte "
                       "it moves than its intensity counts"}
    m = holds[-1]
    roof = min(intensity * m["bytes_per_cycle"], compute_roof)
    moved = flops_per_cycle / intensity
    return {"roof_flops_per_cycle": roof, "bound": f"{m['level']} bandwidth", "share": flops_per_cycle / roof,
            "why": f"above the {level['level']} roof of its working set ({moved:.3g} bytes a cycle at its intensity, "
                   f"where the probe read {level['level']} at {level['bytes_per_cycle']:.3g}): it re-reads part of "
                   f"its data from {m['level']} or nearer (passes over what {m['level']} holds), or its streams "
                   f"draw more from {level['level']} than the probe's pattern; placed under {m['level']}'s roof"}


def roofline(roofs: dict, results: list[Result]) -> dict | None:
    """The roofs and every placeable result under them (None: nothing to place)."""
    points = [p for r in results if r.median is not None and (p := place(r, roofs)) is not None]
    return {"roofs": roofs, "points": points} if points else None
