"""Load latency by alignment (seed 004, table 3): a dependent chase whose loads sit at a
chosen byte offset of their line, as an L1 hit or as an L1 miss that hits L2.

Quick profile: the representative offsets 0 1 5 13 29 60 63 (aligned, inside 8 bytes,
across 8, across 16, across 32, across the line for 8-byte loads, both for 63) x widths
4, 8 x levels l1, l2 = 28 runs.  Full: all 64 offsets x 2 widths x 2 levels x at
{line, page-end} = 512 runs.  The grouped table is cpulab.probes.align_table.
"""
from cpulab.workloads import Param, Workload

_QUICK_OFFSETS = ["0", "1", "5", "13", "29", "60", "63"]

WORKLOADS = [
    Workload(
        name="align",
        kernel="align.c",
        unit="loads",
        description="dependent-load latency by byte offset in the line (4/8-byte loads), "
                    "L1 hit or L1 miss / L2 hit, incl. line and page crossings (seed 004 table 3)",
        params={"offset": Param("0", max=63), "width": Param("8", "choice", choices=("4", "8")),
                "level": Param("l1", "choice", choices=("l1", "l2")),
                "at": Param("line", "choice", choices=("line", "page-end")),
                "addressing": Param("auto", "choice", choices=("auto", "direct", "indexed")),
                "nodes": Param("0", max=256),  # 0: the level's default; MAX_NODES in align.c
                "seed": Param("1")},
        quick={"offset": _QUICK_OFFSETS, "width": ["4", "8"], "level": ["l1", "l2"]},
        full={"offset": [str(o) for o in range(64)], "width": ["4", "8"], "level": ["l1", "l2"],
              "at": ["line", "page-end"]},
        sweep_axis="offset",
    ),
]
