#!/usr/bin/env python3
"""Power of the method: false verdicts on builds that differ only in layout, detection of
real 1%, 2% and 3% slowdowns, and the raw rate of p < alpha, each with an exact
binomial interval.

One plan, measured as cpulab measures any plan (the default precision and method unless
given; a budget of 5 s per experiment, so that the default fits in 20 minutes here),
with K experiments of one bench kernel (bench/kernels/inflated.c: SHA-256 blocks).  In
each, five variants run in the same rounds:

* honest (-O2 -falign-functions=32): the baseline;
* twin (-O2 -falign-functions=64): the same code placed differently (A/A).  Any
  verdict but same/unclear/inconclusive is false;
* inflated1/2/3: honest with INFLATE_PERCENT=1, 2, 3 in the environment: it compresses
  101, 102, 103 blocks per 100 it reports, so its true rate is exactly 1/1.01 ...
  1/1.03 of honest.  `slower` is a detection.

Each experiment is a family of four comparisons (Holm); K give 4K comparisons.  The
raw p < alpha of the A/A comparisons is counted at the level the verdicts used
(`alpha`), and again on the first look's rounds alone at 0.05 (a fixed count, where
p is uniform under no difference).
Usage: python bench/power.py [--k 50] [--json] [--method turns|paired|unpaired]
       [--budget S] [--processes N] [--cotenant CPU] [--keep DB] [--from DB]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
from pathlib import Path

from scipy import stats as sps

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cotenant import cotenant  # noqa: E402

from cpulab import analysis
from cpulab.plan import plan as plans
from cpulab.measure import runner
from cpulab import workloads  # noqa: E402
from cpulab.policy import DecisionPolicy  # noqa: E402
from cpulab.store.db import Store  # noqa: E402
from cpulab.plan.toolchain import Variant  # noqa: E402

HERE = Path(__file__).resolve().parent
INJECTED = {"inflated1": 1, "inflated2": 2, "inflated3": 3}


BUDGET = 5.0


def register_inflated() -> None:
    """The bench kernel as a workload of this process only (not in `cpulab list`)."""
    workloads.registry()["inflated"] = workloads.Workload(
        name="inflated", kernel=str(HERE / "kernels" / "inflated.c"), extra_sources=("sha256_core.h",),
        unit="bytes", description="SHA-256 blocks, optionally 1-10% more than reported (bench only)")


def make_plan(k: int, budget: float | None, processes: int | None, method: str | None) -> plans.Plan:
    variants = {"honest": Variant("honest", cflags=("-O2", "-falign-functions=32")),
                "twin": Variant("twin", cflags=("-O2", "-falign-functions=64"))}
    variants |= {name: Variant(name, cflags=("-O2", "-falign-functions=32"), env=(("INFLATE_PERCENT", str(pct)),))
                 for name, pct in INJECTED.items()}
    exps = [plans.Experiment(f"p{i}", ["inflated"], list(variants), "honest") for i in range(k)]
    p = plans.Plan("power", exps, measure_identical=True, custom_variants=variants, budget=BUDGET)
    if budget is not None:
        p.budget = budget
    if processes is not None:
        p.processes = processes
    if method is not None:
        p.method = method
    return plans.validate(p)


def rate(count: int, n: int) -> dict:
    """count / n with its exact (Clopper-Pearson) 95% interval."""
    lo = sps.beta.ppf(0.025, count, n - count + 1) if count else 0.0
    hi = sps.beta.ppf(0.975, count + 1, n - count) if count < n else 1.0
    return {"rate": count / n if n else math.nan, "count": count, "n": n, "ci95": [float(lo), float(hi)]}


def tally(comps: list[dict], alpha: float) -> dict:
    aa = [c for c in comps if c["variant"] == "twin"]
    doc = {"comparisons": len(comps),
           "aa_false_rate": rate(sum(c["verdict"] in ("faster", "slower") for c in aa), len(aa)),
           "aa_p_below_alpha": rate(sum(c["p_raw"] is not None and c["p_raw"] < alpha for c in aa), len(aa)),
           "alpha": alpha,
           "detect": {str(pct): rate(sum(c["verdict"] == "slower" for c in comps if c["variant"] == name),
                                     sum(c["variant"] == name for c in comps))
                      for name, pct in INJECTED.items()},
           "verdicts": {name: {v: sum(c["verdict"] == v for c in comps if c["variant"] == name)
                               for v in sorted({c["verdict"] for c in comps})}
                        for name in ["twin", *INJECTED]}}
    doc["ratio_median"] = {name: sorted(c["ratio"] for c in comps if c["variant"] == name and c["ratio"])
                           [sum(c["variant"] == name for c in comps) // 2] for name in ["twin", *INJECTED]}
    return doc


def first_look(store: Store, run_id: int, n: int, method: str) -> dict:
    """The same comparisons on the first n rounds only, at a fixed 0.05: what a fixed
    count of n processes would have said."""
    results = []
    for r in store.results(run_id):
        samples = [s for s in store.samples(r["id"]) if s["invocation"] < n]
        results.append(analysis.summary.result_summary(r, samples))
    policy = DecisionPolicy(method=method)
    baselines = {e["name"]: e["baseline"] for e in store.run(run_id)["plan"]["experiments"]}
    comps = analysis.summary.compare_results(results, baselines, policy)
    return tally([c.to_dict() for c in comps], policy.alpha)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--k", type=int, default=50, help="experiments (4 comparisons each)")
    ap.add_argument("--budget", type=float, default=None,
                    help=f"seconds per experiment beyond the first look (default {BUDGET:g})")
    ap.add_argument("--processes", type=int, default=None, help="rounds at the first look")
    ap.add_argument("--method", choices=["turns", "paired", "unpaired"], default=None)
    ap.add_argument("--cotenant", type=int, default=None, metavar="CPU",
                    help="a busy loop on this CPU, on and off at random 0.05-5 s (bench/cotenant.py)")
    ap.add_argument("--keep", help="store path to keep (default: a temporary one)")
    ap.add_argument("--from", dest="from_db", help="analyse the latest run of this kept store, measure nothing")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    register_inflated()
    plan = make_plan(a.k, a.budget, a.processes, a.method)
    load0 = os.getloadavg()
    with tempfile.TemporaryDirectory() as d:
        store = Store(a.from_db or a.keep or Path(d) / "power.sqlite")
        if a.from_db:
            run_id = store.latest_run()
        else:
            with cotenant(a.cotenant, seed=1):
                run_id = runner.run_plan(plan, store, seed=1)
        run = store.run(run_id)
        summary = analysis.summarise(store, run_id)
        comps = [c.to_dict() for c in summary.comparisons]
        policy = DecisionPolicy.from_plan(run["plan"])
        doc = {**tally(comps, policy.look_alpha), "method": policy.method,
               "first_look": first_look(store, run_id, run["plan"]["processes"], policy.method),
               "rounds_min_median_max": sorted(c["rounds"] for c in comps if c["rounds"])[::max(1, len(comps) // 2)],
               "excluded_samples": sum(r.excluded_samples for r in summary.results),
               "samples": sum(len(r.samples) for r in summary.results),
               "plan": {k: run["plan"][k] for k in ("processes", "budget", "precision", "samples", "min_sample_time")},
               "host": {"cpu_model": run["fingerprint"].get("cpu_model"),
                        "core_per_tsc": run["timing"].get("core_per_tsc")},
               "cotenant_cpu": a.cotenant,
               "wall_s": run["finished"] - run["started"], "loadavg_start": load0,
               "loadavg_end": os.getloadavg() if not a.from_db else None}
    if a.json:
        print(json.dumps(doc, indent=1))
    else:
        for k, v in doc.items():
            print(f"{k}: {v}")


if __name__ == "__main__":
    main()
