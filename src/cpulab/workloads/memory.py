"""The memory hierarchy: load-to-use latency (memlat) and STREAM bandwidth (bandwidth).

Each grid point is one artifact run (process start, timer calibration, rep calibration,
samples): about 0.1-0.2 s, more for the largest working sets (setting up and verifying a
256 MiB chain takes about 1 s).  Point counts, for planning:

  memlat quick     65 sizes (1 KiB..64 MiB, 4 per octave) x pages {4k, thp}          = 130
                   + the page-stride chase, 34 sizes (32 KiB..64 MiB, 3 per octave)  =  34
  memlat full      73 sizes (1 KiB..256 MiB) x pages {4k, thp, huge} x mode {random,
                   sequential} + the page-stride chase to 256 MiB, 40 sizes         = 478
  bandwidth quick  15 sizes (4 KiB..64 MiB, 1 per octave) x 4 ops                     =  60
  bandwidth full   33 sizes (4 KiB..256 MiB, 2 per octave) x 4 ops                    = 132
"""
from __future__ import annotations

import math

from cpulab.machine import os_cache_sizes
from cpulab.workloads import Param, Workload, size_bytes

KIB = 1024
MIB = 1024 * KIB


def memlat_sizes(lo: int, hi: int, per_octave: int, line: int = 64) -> list[int]:
    """Working-set sizes from lo to hi bytes, per_octave points per doubling.

    The points are lo * 2**(k / per_octave), rounded to a whole number of lines (at
    least one line); hi itself is always the last point.  Sorted, no duplicates.
    """
    if lo < 1 or hi < lo or per_octave < 1 or line < 1:
        raise ValueError(f"need 1 <= lo <= hi, per_octave >= 1, line >= 1; got {lo}, {hi}, {per_octave}, {line}")
    steps = math.floor(per_octave * math.log2(hi / lo) + 1e-9)
    raw = [lo * 2 ** (k / per_octave) for k in range(steps + 1)] + [hi]
    return sorted({max(line, round(s / line) * line) for s in raw})


# The page-stride chase (one load per page) measures the TLBs' reach, which explains a step
# of the line chase that no cache size does (analysis/steps.py): from 8 pages, below any
# first-level data TLB, in whole pages, 3 per octave (a reach is read within 1.26x; a step
# is explained within 1.5x of its edge).
STRIDE_FROM = 32 * KIB


def stride_sizes(hi: int) -> list[str]:
    return _strs(memlat_sizes(STRIDE_FROM, hi, 3, line=4096))


def page_colours(cache_bytes: int, ways: int, page: int = 4096) -> int:
    """Page colours of a physically indexed cache: pages whose frame numbers agree modulo
    this count map to the same sets (one way's bytes / page size; at least 1)."""
    return max(1, cache_bytes // ways // page)


def memlat_memory(point: dict[str, str]) -> int:
    """Workload.memory of memlat: its size, or a share of a cache (read where it runs;
    bounded here by this machine's largest), twice over when balancing colours."""
    pct = int(point.get("fraction", "0"))
    need = max((c["size_bytes"] for c in os_cache_sizes()), default=64 * MIB) * pct // 100 if pct \
        else int(point["size"])  # sysfs is read only for a share of a cache
    return need * (2 if point.get("colour") == "balanced" else 1)


def _strs(values: list[int]) -> list[str]:
    return [str(v) for v in values]


WORKLOADS = [
    Workload(
        name="memlat",
        kernel="memlat.c",
        unit="loads",
        description="load-to-use latency vs working-set size: dependent pointer chase "
                    "through every line, the pages in one random cycle (lat_mem_rd -t's order)",
        params={"size": Param(str(64 * KIB), "size", min=8), "pages": Param("4k", "choice", choices=("4k", "thp", "huge")),
                "mode": Param("random", "choice", choices=("random", "sequential", "pagestride")),
                "line": Param("64", "size", min=8, max=MIB), "seed": Param("1"),
                "colour": Param("any", "choice", choices=("any", "report", "balanced")),
                "colour_cache_bytes": Param("0", "size"), "colour_ways": Param("0", max=1024),
                "cache": Param("none", "choice", choices=("none", "L1d", "L2", "L3")),
                "fraction": Param("0", max=10000)},
        memory=memlat_memory,
        quick=[{"size": _strs(memlat_sizes(1 * KIB, 64 * MIB, 4)), "pages": ["4k", "thp"]},
               {"size": stride_sizes(64 * MIB), "mode": ["pagestride"]}],
        full=[{"size": _strs(memlat_sizes(1 * KIB, 256 * MIB, 4)), "pages": ["4k", "thp", "huge"],
               "mode": ["random", "sequential"]},
              {"size": stride_sizes(256 * MIB), "mode": ["pagestride"]}],
        sweep_axis="size",
        analyses=("memlat-levels", "memlat-steps", "memlat-colour"),
        view="analysis",
        simulate_caches=True,
    ),
    Workload(
        name="bandwidth",
        kernel="bandwidth.c",
        unit="bytes",
        description="STREAM-style read/write/copy/triad bandwidth vs working-set size, "
                    "plain C loops (bytes counted as STREAM does)",
        params={"op": Param("read", "choice", choices=("read", "write", "copy", "triad")),
                "size": Param(str(64 * KIB), "size", min=64)},
        memory=size_bytes,
        quick={"op": ["read", "write", "copy", "triad"], "size": _strs(memlat_sizes(4 * KIB, 64 * MIB, 1))},
        full={"op": ["read", "write", "copy", "triad"], "size": _strs(memlat_sizes(4 * KIB, 256 * MIB, 2))},
        sweep_axis="size",
        analyses=("bandwidth",),
        simulate_caches=True,
        # read: one add per double read; triad: a multiply and an add per 24 bytes
        flops_per_byte=lambda point: {"read": 1 / 8, "triad": 2 / 24}.get(point["op"]),
    ),
]
