#!/usr/bin/env python3
"""Replay a stored run under each estimator and method: what each would have decided.

For a store measured elsewhere (../shared/data/zen3-power.sqlite: aa* experiments are
A/A, in* a 3% slower build) or by bench/power.py, every comparison of the run is redone
with:

* the process estimate: `fastest-all` (the fastest used sample: the round-2 estimator,
  which depends on how many samples survived) or `fastest-first-k` (stats.KEEP);
* the method: unpaired (Mann-Whitney over processes), paired (by round), turns (by
  round, median per-cycle ratio);
* with and without the canary as a covariate (each sample's log rate adjusted by the
  slope of log rate on log canary, pooled over the comparison's samples).

It prints, per combination, the false verdicts among comparisons whose two sides are
the same build (A/A: by name `twin`, or experiments named aa*), the detections among the
others, and the median half-width of the intervals.
Usage: python bench/replay.py STORE [--run N] [--json]
"""
from __future__ import annotations

import argparse
import json
import math
from collections import defaultdict
from dataclasses import replace

import numpy as np

from cpulab import stats
from cpulab.analysis.summary import result_summary
from cpulab.spec.policy import DecisionPolicy
from cpulab.spec.record import StoredResult, StoredSample
from cpulab.store.db import Store


def canary_adjusted(samples: list[StoredSample]) -> tuple[list[StoredSample], float]:
    """The samples with ns scaled so that each sample's rate is what it would be at the
    median canary, by the pooled slope of log rate on log canary."""
    ok = [s for s in samples if not s.excluded and s.canary_before and s.canary_after]
    if len(ok) < 10:
        return samples, 0.0
    c = np.log([(s.canary_before + s.canary_after) / 2 for s in ok])
    r = np.log([s.work / s.ns for s in ok])
    beta = float(np.polyfit(c, r, 1)[0])
    mid = float(np.median(c))
    out = []
    for s in samples:
        if s in ok:
            can = math.log((s.canary_before + s.canary_after) / 2)
            s = replace(s, ns=s.ns * math.exp(beta * (can - mid)))
        out.append(s)
    return out, beta


def replay(store: Store, run_id: int) -> dict:
    baselines = {e.name: e.baseline for e in store.run(run_id).record.experiments}
    by_exp: dict[str, dict[str, tuple[StoredResult, list[StoredSample]]]] = defaultdict(dict)
    for r in store.results(run_id):
        if r.status == "ok":
            by_exp[(r.experiment, json.dumps(r.params, sort_keys=True))][r.variant] = (r, store.samples(r.id))
    rows = {}
    for keep_name in ("fastest-all", "fastest-first-k"):
        for method in ("unpaired", "paired", "turns"):
            for covariate in (False, True):
                policy = DecisionPolicy(method=method)
                aa, inj, widths = [], [], []
                for (exp, _), variants in by_exp.items():
                    base_name = baselines[exp]
                    if base_name not in variants:
                        continue
                    summ = {}
                    for name, (r, samples) in variants.items():
                        if covariate:
                            samples = canary_adjusted(samples)[0]
                        res = result_summary(r, samples)
                        if keep_name == "fastest-all":
                            res.observations = stats.per_process(samples, lambda s: s.work / stats.on_cpu_ns(s),
                                                                 np.max)
                        summ[name] = res
                    tests = [(name, stats.compare_pair(
                        (summ[base_name].turn_rates if method == "turns" else summ[base_name].observations),
                        (summ[name].turn_rates if method == "turns" else summ[name].observations),
                        1 - policy.alpha, method)) for name in summ if name != base_name]
                    for (name, _), (_, verdict, t) in zip(tests, policy.decide([t for _, t in tests])):
                        same_build = name == "twin" or exp.startswith("aa")
                        (aa if same_build else inj).append(verdict)
                        widths.append((t.ci[1] - t.ci[0]) / 2)
                rows[f"{keep_name} {method}{' +canary' if covariate else ''}"] = {
                    "aa_false": f"{sum(v in ('faster', 'slower') for v in aa)}/{len(aa)}",
                    "detected": f"{sum(v == 'slower' for v in inj)}/{len(inj)}",
                    "median_half_width": float(np.median(widths)) if widths else None}
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("store")
    ap.add_argument("--run", type=int, default=None)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    store = Store(a.store)
    rows = replay(store, a.run or store.latest_run())
    if a.json:
        print(json.dumps(rows, indent=1))
    else:
        for k, v in rows.items():
            print(f"{k:36} A/A false {v['aa_false']:>6}  detected {v['detected']:>6}  "
                  f"half-width {100 * v['median_half_width']:.2f}%")


if __name__ == "__main__":
    main()
