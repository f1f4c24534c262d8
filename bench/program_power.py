#!/usr/bin/env python3
"""Power of the method on a program of yours, relinked into a layout of its own every round
(compile/relink.py): layout-only twins, a planted 1% more work, and 40 rounds' layouts.

A toy program outside the package (written into a temporary source tree: three C files,
a Makefile that compiles them to objects and links them), which reads a file of random
bytes and mixes it PASSES times (100; 101 with -DCPULAB_EXTRA: 1% more work, so its
true ratio is 100/101), measured as any plan's [program] is, under the default policy:

* twin experiments (`--twins`), each the file at 2 sizes, O2 against two builds that
  differ only in where code and data sit: its objects linked in the reverse order
  (-DCPULAB_REVERSE, which only the Makefile reads) and another unused -D: any
  faster/slower is false;
* injected experiments (`--injected`), 2 sizes each: O2 against -DCPULAB_EXTRA;
* one build's 40 layouts read back (placement.inspect_program): how many distinct.

Prints each rate with an exact binomial interval, the relink cost per round, and the
run's wall time.  Usage: python bench/program_power.py [--twins 5] [--injected 10] [--json]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from power import rate, show  # noqa: E402

from cpulab import analysis  # noqa: E402
from cpulab.compile import artifacts, placement  # noqa: E402
from cpulab.compile.programs import build_program  # noqa: E402
from cpulab.compile.relink import Relink  # noqa: E402
from cpulab.measure.schedule import runner  # noqa: E402
from cpulab.plan import plan as plans  # noqa: E402
from cpulab.store.db import Store  # noqa: E402

MIX_C = r"""
#include <stddef.h>
#include <stdint.h>
uint64_t mix(const unsigned char *p, size_t n, uint64_t h)
{
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}
"""
PASSES_C = r"""
#include <stddef.h>
#include <stdint.h>
uint64_t mix(const unsigned char *p, size_t n, uint64_t h);
#ifdef CPULAB_EXTRA
#define PASSES 101
#else
#define PASSES 100
#endif
uint64_t passes(const unsigned char *p, size_t n)
{
    uint64_t h = 14695981039346656037ull;
    for (int r = 0; r < PASSES; r++)
        h = mix(p, n, h + (uint64_t)r);
    return h;
}
"""
MAIN_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
uint64_t passes(const unsigned char *p, size_t n);
int main(int argc, char **argv)
{
    FILE *f = fopen(argv[1], "rb");
    if (!f) return 2;
    static unsigned char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    printf("%016llx\n", (unsigned long long)passes(buf, n));
    return 0;
}
"""
MAKEFILE = """OBJS := $(if $(findstring CPULAB_REVERSE,$(CFLAGS)),passes.o mix.o main.o,main.o mix.o passes.o)
prog: $(OBJS)
\t$(CC) $(LDFLAGS) -o prog $(OBJS)
%.o: %.c
\t$(CC) $(CFLAGS) -c $< -o $@
"""
SIZES = ["128K", "192K"]


def source_tree(folder: Path) -> Path:
    src = folder / "toy"
    src.mkdir()
    for name, text in (("mix.c", MIX_C), ("passes.c", PASSES_C), ("main.c", MAIN_C), ("Makefile", MAKEFILE)):
        (src / name).write_text(text)
    return src


def make_plan(src: Path, twins: int, injected: int) -> plans.Plan:
    variants, experiments = {}, []
    for i in range(twins):
        names = [f"t{i}-O2", f"t{i}-rev", f"t{i}-D"]
        flags = [[f"-DCPULAB_TWIN=t{i}"], [f"-DCPULAB_TWIN=t{i}", "-DCPULAB_REVERSE"], [f"-DCPULAB_TWIN=t{i}x"]]
        variants |= {n: {"cflags": ["-O2", *f]} for n, f in zip(names, flags)}
        experiments.append({"name": f"twins{i}", "workloads": ["toy"], "variants": names})
    for i in range(injected):
        names = [f"i{i}-O2", f"i{i}-extra"]
        variants |= {names[0]: {"cflags": ["-O2", f"-DCPULAB_TWIN=i{i}"]},
                     names[1]: {"cflags": ["-O2", f"-DCPULAB_TWIN=i{i}", "-DCPULAB_EXTRA"]}}
        experiments.append({"name": f"inj{i}", "workloads": ["toy"], "variants": names})
    program = {"source": str(src), "build": ["make CC={cc} CFLAGS='{cflags}' LDFLAGS='{ldflags}'"],
               "run": "{build}/prog {file}", "check": {"stdout_regex": "^[0-9a-f]{16}$"},
               "inputs": {"file": {"random_file": SIZES}}}
    return plans.from_dict({"name": "program-power", "variants": variants, "experiment": experiments,
                            "program": {"toy": program}}, "program-power.toml")


def layouts_of_40(src: Path, cache: Path) -> dict:
    """One build's 40 layouts (as 40 rounds draw them): distinct orders and offsets, the
    code unchanged, and what a relink costs."""
    p = make_plan(src, 1, 0)
    b = build_program(p.programs["toy"], p.variant("t0-O2"), cache_dir=cache)
    relink = Relink(b.exe, b.hash, b.link)
    costs = []
    try:
        for i in range(40):
            t0 = time.perf_counter()
            relink.place(i)
            costs.append(time.perf_counter() - t0)
        seen = placement.inspect_program(relink, list(range(40)))
    finally:
        artifacts.remove_placements()
    return {"layouts": 40, "distinct_layouts": len(set(zip(seen.orders, seen.offsets))),
            "distinct_orders": len(set(seen.orders)), "distinct_main_offsets": len(set(seen.offsets)),
            "functions": seen.functions, "functions_differing": list(seen.differing),
            "relink_ms_median": 1000 * statistics.median(costs)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--twins", type=int, default=5, help="twin experiments (2 twins x 2 sizes each)")
    ap.add_argument("--injected", type=int, default=10, help="injected experiments (2 sizes each)")
    ap.add_argument("--keep", help="store path to keep (default: a temporary one)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    load0 = os.getloadavg()
    with tempfile.TemporaryDirectory() as d:
        src = source_tree(Path(d))
        doc = {"layouts": layouts_of_40(src, Path(d) / "cache")}
        store = Store(a.keep or Path(d) / "p.sqlite")
        run_id = runner.run_plan(make_plan(src, a.twins, a.injected).given(seed=1), store)
        run = store.run(run_id)
        comps = [c.to_dict() for c in analysis.summarise(store, run_id).comparisons]
        called = ("faster", "slower")
        twins = [c for c in comps if c["experiment"].startswith("twins")]
        inj = [c for c in comps if c["experiment"].startswith("inj")]
        truth = 100 / 101
        doc |= {"twins_false_rate": rate(sum(c["verdict"] in called for c in twins), len(twins)),
                "twins_verdicts": {v: sum(c["verdict"] == v for c in twins) for v in {c["verdict"] for c in twins}},
                "detect_1pct": rate(sum(c["verdict"] == "slower" for c in inj), len(inj)),
                "coverage_1pct": rate(sum(bool(c["ci"]) and c["ci"][0] <= truth <= c["ci"][1] for c in inj), len(inj)),
                "ratio_median_1pct": statistics.median(c["ratio"] for c in inj if c["ratio"]),
                "basis": sorted({c.get("basis") for c in comps if c.get("basis")}),
                "rounds_median": statistics.median(c["rounds"] for c in comps if c["rounds"]),
                "host": {"cpu_model": run.fingerprint.get("cpu_model"), "core_per_tsc": run.timing.get("core_per_tsc")},
                "wall_s": run.finished - run.started, "loadavg_start": load0, "loadavg_end": os.getloadavg()}
    show(doc, a.json)


if __name__ == "__main__":
    main()
