#!/usr/bin/env python3
"""Power of the method on the user's path: false verdicts between independently built
twins, detection of real 1%, 1.5%, 2% and 3% slowdowns, the coverage of the intervals,
and the carry-over between group members, each rate with an exact binomial interval.

One plan, measured as cpulab measures any plan: the default policy (budget, looks,
processes, samples, method), groups of two or three variants.  The bench kernels are
declared as a user declares kernels of their own ([kernel] tables, KERNEL_TABLES): by
default one throughput-bound (bench/kernels/inflated.c: SHA-256 blocks) and one
latency-bound (bench/kernels/chase.c: a dependent pointer chase); `--kernels mixcxx` a
C++ one (bench/kernels/mix.cpp: a templated mix over a std::vector).  Each has a `point`
parameter that only names a point (every point does the same work):

* A/A experiments (`--aa` of them, the kernels in turn), 10 points each: two variants
  built from the same source with a different, unused -D, so each is its own build with
  its own placements (the code bytes are the same).  Any faster/slower is false; an
  experiment with any is a false family.
* injected experiments (`--injected` per kernel and level pair), 2 points each: honest
  against INFLATE_PERCENT=1 and 1.5, or 2 and 3 (a group of three): it does 1% ... 3%
  more work than it reports, so its true ratio is exactly 100/(100 + pct).  `slower`
  is a detection; the interval should cover the true ratio at its stated confidence.
* the -falign-functions=64 twin against 32 (the old A/A row), 10 points: is its
  difference placement or code?
* layout twins (`--layout` experiments of 10 points, on the SHA-256 kernel): O2 against
  -ffunction-sections -fdata-sections, -Wl,-z,noseparate-code and another unused -D (a
  build of its own: every placement orders its functions anew), builds that differ only
  in where code and data sit: any faster/slower is false.
* long A/A experiments (`--long` of them, 10 points each, half each kernel) that run
  48 rounds whatever the looks say, as the third look reaches: a placement run again
  in a later round would show here first.  They count among the A/A rows.

Coverage is also given by the rounds each comparison ran (8, 16, 32, 48 ...), over the
injected rows and the A/A rows (whose true ratio is 1).

Usage: python bench/power.py [--aa 40] [--injected 12] [--layout 1] [--long 2] [--kernels inflated,chase]
       [--levels 1,1.5/2,3] [--json]
       [--keep DB] [--from DB] [--cotenant CPU]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from scipy import stats as sps

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cotenant import cotenant  # noqa: E402

from cpulab import analysis  # noqa: E402
from cpulab.cli.main import SWITCH_INTERVAL_S  # noqa: E402
from cpulab.measure.schedule import runner  # noqa: E402
from cpulab.plan import kernels as kernel_tables, plan as plans  # noqa: E402
from cpulab.spec.settings import Settings  # noqa: E402
from cpulab.plan.toolchain import Variant  # noqa: E402
from cpulab.store.db import Store  # noqa: E402

HERE = Path(__file__).resolve().parent
KERNELS = ("inflated", "chase")
LEVELS = (("1", "1.5"), ("2", "3"))  # injected percentages, two per group with their honest baseline
AA_POINTS, INJECTED_POINTS = 10, 2
LONG_ROUNDS = 48  # the third look of a one-comparison family (16, 32, 48 from 12)
# Builds that differ from plain O2 only in where code and data sit.
# Builds that differ only in what the build leaves open to the layout: where its data sits
# (sections split), another build of the same code (an unused -D), and how the linker lays
# out its segments.  An alignment the build asks for is kept by the placements, so it is
# an effect of the build (the align rows), not a layout twin.
LAYOUT_TWINS = {"sections": (("-ffunction-sections", "-fdata-sections"), ()), "twin": (("-DCPULAB_LAYOUT_TWIN=1",), ()),
                "noseparate": ((), ("-Wl,-z,noseparate-code",))}  # name: (cflags, ldflags)


# The bench kernels as a user declares kernels of their own: [kernel] tables (plan/kernels.py).
POINT = {"point": {"default": 0, "max": 99}}
KERNEL_TABLES = {
    "inflated": {"source": "kernels/inflated.c", "unit": "bytes", "params": POINT,
                 "description": "SHA-256 blocks, optionally 0.5-10% more than reported (bench only)"},
    "chase": {"source": "kernels/chase.c", "unit": "loads",
              "params": {**POINT, "size": {"kind": "size", "default": "256K", "min": 128}},
              "description": "a dependent pointer chase, optionally 0.01-10% more links than reported (bench only)"},
    "mixcxx": {"source": "kernels/mix.cpp", "unit": "elements", "params": POINT,
               "description": "C++: SplitMix64's finalizer over a vector, optionally 0.05-10% more (bench only)"},
}


def points(n: int) -> list[str]:
    return [str(i) for i in range(n)]


def make_plan(aa: int, injected: int, layout: int = 0, long: int = 0, kernels: tuple[str, ...] = KERNELS,
              level_groups: tuple[tuple[str, ...], ...] = LEVELS) -> plans.Plan:
    variants: dict[str, Variant] = {}
    exps = []
    for i in range(aa + long):
        wl, name = kernels[i % len(kernels)], f"aa{i}" if i < aa else f"aalong{i - aa}"
        a, b = (Variant(f"{name}{s}", cflags=("-O2", f"-DCPULAB_TWIN={name}{s}")) for s in "ab")
        variants |= {a.name: a, b.name: b}
        exps.append(plans.Experiment(name, [wl], [a.name, b.name], a.name, params={wl: {"point": points(AA_POINTS)}},
                                     processes=LONG_ROUNDS if i >= aa else None))
    for i in range(layout):
        group = [Variant(f"lt{i}-O2", cflags=("-O2", f"-DCPULAB_TWIN=lt{i}"))]
        group += [Variant(f"lt{i}-{n}", cflags=(*group[0].cflags, *cflags), ldflags=ldflags)
                  for n, (cflags, ldflags) in LAYOUT_TWINS.items()]
        variants |= {v.name: v for v in group}
        exps.append(plans.Experiment(f"layout{i}", [kernels[0]], [v.name for v in group], group[0].name,
                                     params={kernels[0]: {"point": points(AA_POINTS)}}))
    for wl in kernels:
        for i in range(injected):
            for levels in level_groups:
                tag = f"{wl}{i}-{'-'.join(levels)}"
                honest = Variant(f"h-{tag}", cflags=("-O2", f"-DCPULAB_TWIN={tag}"))
                group = [honest] + [Variant(f"inj{pct}-{tag}", cflags=honest.cflags,
                                            env=(("INFLATE_PERCENT", pct),)) for pct in levels]
                variants |= {v.name: v for v in group}
                exps.append(plans.Experiment(f"inj-{tag}", [wl], [v.name for v in group], honest.name,
                                             params={wl: {"point": points(INJECTED_POINTS)}}))
    if "inflated" in kernels:
        align = {n: Variant(n, cflags=("-O2", f"-falign-functions={w}")) for n, w in (("align32", 32), ("align64", 64))}
        variants |= align
        exps.append(plans.Experiment("align", ["inflated"], list(align), "align32",
                                     params={"inflated": {"point": points(AA_POINTS)}}))
    own = kernel_tables.resolved({k: KERNEL_TABLES[k] for k in kernels}, HERE, "bench/power.py")
    return plans.validate(plans.Plan("power", exps, Settings(measure_identical=True), custom_variants=variants, kernels=own))


def rate(count: int, n: int) -> dict:
    """count / n with its exact (Clopper-Pearson) 95% interval."""
    lo = sps.beta.ppf(0.025, count, n - count + 1) if count else 0.0
    hi = sps.beta.ppf(0.975, count + 1, n - count) if count < n else 1.0
    return {"rate": count / n if n else math.nan, "count": count, "n": n, "ci95": [float(lo), float(hi)]}


def show(doc: dict, as_json: bool) -> None:
    """A benchmark's figures, as JSON or a line each."""
    if as_json:
        print(json.dumps(doc, indent=1))
    else:
        for k, v in doc.items():
            print(f"{k}: {v}")


def injected_pct(variant: str) -> str | None:
    return variant[3:].split("-")[0] if variant.startswith("inj") else None


def median(xs: list[float]) -> float | None:
    xs = sorted(x for x in xs if x)
    return xs[len(xs) // 2] if xs else None


def tally(comps: list[dict], results: list) -> dict:
    called = ("faster", "slower")
    aa = [c for c in comps if c["experiment"].startswith("aa")]
    families: dict[str, bool] = defaultdict(bool)
    for c in aa:
        families[c["experiment"]] |= c["verdict"] in called
    inj = [c for c in comps if injected_pct(c["variant"])]
    levels = sorted({injected_pct(c["variant"]) for c in inj}, key=float)
    align = [c for c in comps if c["experiment"] == "align"]
    layout = [c for c in comps if c["experiment"].startswith("layout")]
    by_rounds = defaultdict(list)  # the true ratio: 1 for the A/A rows, 100 / (100 + pct) injected
    for c in aa + inj:
        truth = 100 / (100 + float(injected_pct(c["variant"]) or 0))
        by_rounds[c["rounds"]].append(c["ci"] is not None and c["ci"][0] <= truth <= c["ci"][1])
    bands = defaultdict(list)
    for r in results:
        if r.placement_band:
            bands[r.workload].append(r.placement_band[1] - r.placement_band[0])
    doc = {
        "comparisons": len(comps),
        "aa_false_rate": rate(sum(c["verdict"] in called for c in aa), len(aa)),
        "aa_false_rate_by_kernel": {wl: rate(sum(c["verdict"] in called for c in aa if c["workload"] == wl),
                                             sum(c["workload"] == wl for c in aa)) for wl in sorted({c["workload"] for c in aa})},
        "family_false_rate": rate(sum(families.values()), len(families)),
        "aa_verdicts": {v: sum(c["verdict"] == v for c in aa) for v in sorted({c["verdict"] for c in aa})},
        "detect": {pct: rate(sum(c["verdict"] == "slower" for c in inj if injected_pct(c["variant"]) == pct),
                             sum(injected_pct(c["variant"]) == pct for c in inj)) for pct in levels},
        "detect_by_kernel": {wl: {pct: rate(sum(c["verdict"] == "slower" for c in inj
                                                if injected_pct(c["variant"]) == pct and c["workload"] == wl),
                                            sum(injected_pct(c["variant"]) == pct and c["workload"] == wl
                                                for c in inj)) for pct in levels} for wl in sorted({c["workload"] for c in inj})},
        "ratio_median": {pct: median([c["ratio"] for c in inj if injected_pct(c["variant"]) == pct])
                         for pct in levels},
        "coverage": rate(sum(c["ci"] is not None and c["ci"][0] <= 100 / (100 + float(injected_pct(c["variant"])))
                             <= c["ci"][1] for c in inj), len(inj)),
        "coverage_by_rounds": {n: rate(sum(hits), len(hits)) for n, hits in sorted(by_rounds.items())},
        "layout_twins_false_rate": rate(sum(c["verdict"] in called for c in layout), len(layout)),
        "layout_twins_verdicts": {v: sum(c["verdict"] == v for c in layout) for v in sorted({c["verdict"] for c in layout})},
        "held_for_carryover": sum(bool(c.get("held")) for c in comps),
        "align64_vs_32": {"verdicts": {v: sum(c["verdict"] == v for c in align) for v in {c["verdict"] for c in align}},
                          "ratio_median": median([c["ratio"] for c in align])},
        "placement_band_median": {wl: median(b) for wl, b in bands.items()},
    }
    rounds = sorted(c["rounds"] for c in comps if c["rounds"])
    doc["rounds"] = {"min": rounds[0], "median": rounds[len(rounds) // 2], "max": rounds[-1]} if rounds else None
    return doc


def main() -> None:
    sys.setswitchinterval(SWITCH_INTERVAL_S)  # the runs measured as the cpulab command measures them
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--aa", type=int, default=40, help=f"A/A experiments of {AA_POINTS} points (default 40)")
    ap.add_argument("--injected", type=int, default=12,
                    help=f"injected experiments per kernel and level pair, {INJECTED_POINTS} points each (default 12)")
    ap.add_argument("--layout", type=int, default=1, help=f"layout-twin experiments of {AA_POINTS} points (default 1)")
    ap.add_argument("--long", type=int, default=2,
                    help=f"A/A experiments of {AA_POINTS} points run {LONG_ROUNDS} rounds (default 2)")
    ap.add_argument("--kernels", default=",".join(KERNELS),
                    help=f"the bench kernels measured, of {', '.join(KERNEL_TABLES)} (default {','.join(KERNELS)})")
    ap.add_argument("--levels", default="/".join(",".join(g) for g in LEVELS),
                    help="injected percentages, each group (a,b) measured against one honest twin, groups "
                         "split by / (default %(default)s)")
    ap.add_argument("--cotenant", type=int, default=None, metavar="CPU",
                    help="a busy loop on this CPU, on and off at random 0.05-5 s (bench/cotenant.py)")
    ap.add_argument("--keep", help="store path to keep (default: a temporary one)")
    ap.add_argument("--from", dest="from_db", help="analyse the latest run of this kept store, measure nothing")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    plan = make_plan(a.aa, a.injected, a.layout, a.long, tuple(a.kernels.split(",")),
                     tuple(tuple(g.split(",")) for g in a.levels.split("/")))
    load0 = os.getloadavg()
    with tempfile.TemporaryDirectory() as d:
        store = Store(a.from_db or a.keep or Path(d) / "power.sqlite")
        if a.from_db:
            run_id = store.latest_run()
        else:
            with cotenant(a.cotenant, seed=1):
                run_id = runner.run_plan(plan.given(seed=1), store)
        run = store.run(run_id)
        summary = analysis.summarise(store, run_id)
        comps = [c.to_dict() for c in summary.comparisons]
        policy = run.record.policy
        doc = {**tally(comps, summary.results), "carryover": summary.carryover,
               "confidence": sorted({c["confidence"] for c in comps if c.get("confidence")}), "method": policy.method,
               "excluded_samples": sum(r.excluded_samples for r in summary.results),
               "samples": sum(len(r.samples) for r in summary.results),
               "plan": {k: run.record.stored[k] for k in ("processes", "budget", "precision", "samples", "min_sample_time")},
               "host": {"cpu_model": run.fingerprint.get("cpu_model"),
                        "core_per_tsc": run.timing.get("core_per_tsc")},
               "cotenant_cpu": a.cotenant,
               "wall_s": run.finished - run.started, "loadavg_start": load0,
               "loadavg_end": os.getloadavg() if not a.from_db else None}
    show(doc, a.json)


if __name__ == "__main__":
    main()
