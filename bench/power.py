#!/usr/bin/env python3
"""Power of the method: false verdicts on identical builds, detection of a real 3%.

Two trials in one plan, interleaved, each under the plan defaults (budget mode, the
default precision and budget):

* A/A: K experiments, each one artifact (bench/kernels/inflated.c, honest) measured as
  two variants.  Any verdict but `same` is false; the rate is to be <= 5%.
* injected: K experiments of the same kernel honest (baseline) against itself with
  INFLATE_PERCENT=3, which does 103 blocks of work per 100 it reports: the true rate is
  exactly 3% lower.  `slower` is a detection; the rate is to be >= 90%.

The stored run is also analysed with the other method (paired signed-rank over rounds,
or unpaired) for comparison; --rounds analyses both on the first n rounds only.
Usage: python bench/power.py [--k 40] [--json] [--budget S] [--runs N] [--keep DB]
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from cpulab import analysis, plan as plans, run as runner, stats, workloads
from cpulab.analysis.summary import result_summary
from cpulab.store import Store
from cpulab.toolchain import Variant

HERE = Path(__file__).resolve().parent


def register_inflated() -> None:
    """The bench kernel as a workload of this process only (not in `cpulab list`)."""
    workloads.registry()["inflated"] = workloads.Workload(
        name="inflated", kernel=str(HERE / "kernels" / "inflated.c"), extra_sources=("sha256_core.h",),
        unit="bytes", description="SHA-256 blocks, optionally 3% more than reported (bench only)")


def make_plan(k: int, budget: float | None, runs: int | None) -> plans.Plan:
    variants = {"honest": Variant("honest", cflags=("-O2",)),
                "twin": Variant("twin", cflags=("-O2",)),
                "inflated3": Variant("inflated3", cflags=("-O2",), env=(("INFLATE_PERCENT", "3"),))}
    exps = [plans.Experiment(f"aa{i}", ["inflated"], ["honest", "twin"], "honest") for i in range(k)]
    exps += [plans.Experiment(f"in{i}", ["inflated"], ["honest", "inflated3"], "honest") for i in range(k)]
    p = plans.Plan("power", exps, measure_identical=True, custom_variants=variants)
    if budget is not None:
        p.budget = budget
    if runs is not None:
        p.runs = runs
    return plans.validate(p)


def rates(comps: list[dict]) -> dict:
    aa = [c for c in comps if c["experiment"].startswith("aa")]
    inj = [c for c in comps if c["experiment"].startswith("in")]
    return {"aa_false_rate": sum(c["verdict"] != "same" for c in aa) / len(aa),
            "detect_3pct": sum(c["verdict"] == "slower" for c in inj) / len(inj),
            "comparisons": len(aa) + len(inj),
            "aa_verdicts": {v: sum(c["verdict"] == v for c in aa) for v in {c["verdict"] for c in aa}},
            "injected_verdicts": {v: sum(c["verdict"] == v for c in inj) for v in {c["verdict"] for c in inj}},
            "injected_ratio_median": sorted(c["ratio"] for c in inj)[len(inj) // 2]}


def by_rounds(store: Store, run_id: int, alpha: float) -> dict:
    """Paired against unpaired on the first n rounds of the same processes: which finds
    the 3% with fewer rounds at the same A/A false rate (both at the budget's alpha)."""
    summary = analysis.summarise(store, run_id).to_dict()
    rows = {}
    obs = {}
    for r in store.results(run_id):
        if r["status"] == "ok":
            obs[(r["experiment"], r["variant"])] = result_summary(r, store.samples(r["id"])).observations
    for n in (4, 5, 6, 8, 10):
        out = {}
        for method in ("paired", "unpaired"):
            aa = inj = 0
            for c in summary["comparisons"]:
                b = {k: v for k, v in obs[(c["experiment"], c["baseline"])].items() if k < n}
                v = {k: v for k, v in obs[(c["experiment"], c["variant"])].items() if k < n}
                verdict = stats.compare_pair(b, v, alpha, method).verdict
                if c["experiment"].startswith("aa"):
                    aa += verdict != "same" and verdict != "inconclusive"
                else:
                    inj += verdict == "slower"
            k = len(summary["comparisons"]) // 2
            out[method] = {"aa_false_rate": aa / k, "detect_3pct": inj / k}
        rows[n] = out
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--k", type=int, default=40, help="comparisons per trial")
    ap.add_argument("--budget", type=float, default=None, help="override the default budget (s per experiment)")
    ap.add_argument("--runs", type=int, default=None, help="override the first look's rounds")
    ap.add_argument("--keep", help="store path to keep (default: a temporary one)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--rounds", action="store_true", help="also: paired vs unpaired on the first n rounds")
    ap.add_argument("--from", dest="from_db", help="analyse the latest run of this kept store, measure nothing")
    a = ap.parse_args()
    register_inflated()
    plan = make_plan(a.k, a.budget, a.runs)
    load0, t0 = os.getloadavg(), time.time()
    with tempfile.TemporaryDirectory() as d:
        store = Store(a.from_db or a.keep or Path(d) / "power.sqlite")
        run_id = store.latest_run() if a.from_db else runner.run_plan(plan, store, seed=1)
        wall = time.time() - t0 if not a.from_db else store.run(run_id)["finished"] - store.run(run_id)["started"]
        default = analysis.summarise(store, run_id).to_dict()  # the method the budget's looks used
        other = "paired" if stats.DEFAULT_METHOD == "unpaired" else "unpaired"
        alternative = analysis.summarise(store, run_id, method=other).to_dict()
        first_rounds = by_rounds(store, run_id, stats.look_alpha(True)) if a.rounds else None
    comps = default["comparisons"]
    rounds = sorted(c["rounds"] for c in comps if c["rounds"])
    doc = {**{k: v for k, v in rates(comps).items()}, "method": comps[0]["method"],
           f"{other}_same_data": rates(alternative["comparisons"]),
           "plan": {"runs": plan.runs, "budget": plan.budget, "precision": plan.precision,
                    "samples": plan.samples, "min_sample_time": plan.min_sample_time},
           "rounds_min_median_max": [rounds[0], rounds[len(rounds) // 2], rounds[-1]],
           "excluded_samples": sum(r["excluded_samples"] for r in default["results"]),
           "samples": sum(len(r["samples"]) for r in default["results"]),
           "first_rounds": first_rounds, "wall_s": wall, "loadavg_start": load0, "loadavg_end": os.getloadavg()}
    if a.json:
        print(json.dumps(doc, indent=1))
    else:
        for k, v in doc.items():
            print(f"{k}: {v}")


if __name__ == "__main__":
    main()
