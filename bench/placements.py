#!/usr/bin/env python3
"""Where each built-in kernel's placements put its timed code, and proof that the code is
the same in all of them: per kernel (built at O2 here, cached as `cpulab run` builds it),
the offsets of k_run within a page over its first placements, how many orders of its
functions they link, and how many of kernel.o's functions were checked byte for byte
(outside relocated fields) and which differ.
Usage: python bench/placements.py [--placements N] [--json]
"""
from __future__ import annotations

import argparse
import json

from cpulab import workloads
from cpulab.compile import placement
from cpulab.compile.artifacts import BuildError, build_artifact
from cpulab.plan import toolchain
from cpulab.machine import toolchains


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--placements", type=int, default=48, help="placements to inspect per kernel (default 48)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    o2 = toolchain.get("O2")
    rows = []
    for name, w in sorted(workloads.registry().items()):
        if why := toolchains.libraries_reason(o2, w.requires, w.libs):
            rows.append({"kernel": name, "skipped": why})
            continue
        try:
            art = build_artifact(w, o2)
        except BuildError as e:
            rows.append({"kernel": name, "skipped": str(e)})
            continue
        got = placement.inspect(art, a.placements)
        rows.append({"kernel": name, "placements": a.placements, "offsets": list(got.offsets),
                     "orders": len(set(got.orders)),
                     "distinct_offsets": len(set(got.offsets)), "lines_64b": len({o // 64 for o in got.offsets}),
                     "functions_checked": got.functions, "differing": list(got.differing)})
    if a.json:
        print(json.dumps(rows, indent=1))
        return
    print(f"{'kernel':14} {'placements':>10} {'offsets (k_run mod 4096)':>28} {'64B lines':>9} {'orders':>6} "
          f"{'checked':>7}  differing")
    for r in rows:
        if "skipped" in r:
            print(f"{r['kernel']:14} skipped: {r['skipped']}")
            continue
        span = f"{min(r['offsets'])}..{max(r['offsets'])} ({r['distinct_offsets']} distinct)"
        print(f"{r['kernel']:14} {r['placements']:>10} {span:>28} {r['lines_64b']:>9} {r['orders']:>6} "
              f"{r['functions_checked']:>7}  "
              f"{', '.join(r['differing']) or 'none'}")


if __name__ == "__main__":
    main()
