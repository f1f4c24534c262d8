#!/usr/bin/env python3
"""Which signals the harness records around a sample predict a slow sample, here?

Runs one SHA-256 O2 artifact as many pinned processes (through cpulab's executor), at
two sample shapes with the same measured time per process: 5 x 10 ms (the old default)
and 20 x 2.5 ms.  Then reports:

* signals: for each flag (involuntary/voluntary switches, migration, steal, core/TSC
  ratio drift, throughput canary drop), how often it fires, how often a flagged sample
  is slow (hit rate), how many slow samples it catches (recall), and the Spearman
  correlation of each continuous signal with the sample's shortfall.  A sample is slow
  when its rate is more than 5% below the fastest sample of its process.
* estimators: the spread across processes (CV) of each per-process estimate (median,
  80th/90th percentile of rate, best of k), and how often a Mann-Whitney test at 0.05
  tells 10 processes from 10 whose rates were multiplied by 0.97 (resampled 2000 times).

Usage: python bench/interference.py [--processes N] [--save FILE | --load FILE] [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np
from scipy import stats as sps

from cpulab.compile import artifacts
from cpulab.plan import toolchain
from cpulab import workloads
from cpulab.measure.execute.executor import HarnessJob, LocalExecutor

SHAPES = {"5x10ms": (5, 0.010), "20x2.5ms": (20, 0.0025)}
SLOW = 0.05  # a sample this far below its process's fastest is slow


def collect(processes: int) -> dict[str, list[dict]]:
    art = artifacts.build_artifact(workloads.get("sha256"), toolchain.BUILTIN["O2"])
    ex = LocalExecutor()
    data: dict[str, list[dict]] = {k: [] for k in SHAPES}
    for i in range(processes):
        for shape, (n, t) in SHAPES.items():  # interleaved: drift hits both shapes alike
            out = ex.execute(HarnessJob(art.path, {"size": "16384"}, n, t, 0.02, "auto", 60))
            if out.status == "ok":
                data[shape].append(out.data)
        print(f"\r{i + 1}/{processes} processes", end="", file=sys.stderr)
    print(file=sys.stderr)
    return data


def sample_table(procs: list[dict]) -> dict[str, np.ndarray]:
    """One row per sample: rate, shortfall against its process's best, and signals."""
    cols: dict[str, list] = {k: [] for k in ("proc", "rate", "shortfall", "invol", "vol", "offcpu", "migrated", "steal",
                                              "drift", "ratio_dip", "canary")}
    canary_typical = np.nanmedian([c for p in procs for c in p["canary_before"] + p["canary_after"]])
    ratio_typical = np.nanmedian([r for p in procs for r in p["ratio_before"]])
    for j, p in enumerate(procs):
        rate = p["work"] / np.asarray(p["ns"]) * 1e9
        best = rate.max()
        for i in range(len(rate)):
            rb, ra = p["ratio_before"][i], p["ratio_after"][i]
            cols["proc"].append(j)
            cols["rate"].append(rate[i])
            cols["shortfall"].append(1 - rate[i] / best)
            cols["invol"].append(p["invol_switches"][i])
            cols["vol"].append(p["vol_switches"][i])
            cols["offcpu"].append(p["offcpu_ns"][i] / p["ns"][i])
            cols["migrated"].append(p["migrated"][i])
            cols["steal"].append(p["steal_ticks"][i] or 0)
            cols["drift"].append(abs(ra / rb - 1))
            cols["ratio_dip"].append(1 - min(ra, rb) / ratio_typical)
            cols["canary"].append(1 - min(p["canary_before"][i], p["canary_after"][i]) / canary_typical)
    return {k: np.asarray(v, float) for k, v in cols.items()}


def signal_report(t: dict[str, np.ndarray]) -> dict:
    slow = t["shortfall"] > SLOW
    flags = {"invol_switches>0": t["invol"] > 0, "invol_switches>=3": t["invol"] >= 3,
             "vol_switches>0": t["vol"] > 0, "off-cpu>0.5%": t["offcpu"] > 0.005,
             "off-cpu>1%": t["offcpu"] > 0.01, "migrated": t["migrated"] > 0, "steal>0": t["steal"] > 0,
             "ratio drift>1%": t["drift"] > 0.01, "ratio dip>2%": t["ratio_dip"] > 0.02,
             "canary drop>5%": t["canary"] > 0.05, "canary drop>10%": t["canary"] > 0.10}
    rows = {}
    for name, f in flags.items():
        rows[name] = {"fires": float(f.mean()), "hit_rate": float(slow[f].mean()) if f.any() else None,
                      "slow_if_not": float(slow[~f].mean()) if (~f).any() else None,
                      "recall": float(f[slow].mean()) if slow.any() else None}
    corr = {k: float(sps.spearmanr(t[k], t["shortfall"]).statistic) if np.ptp(t[k]) > 0 else None
            for k in ("invol", "vol", "offcpu", "steal", "drift", "ratio_dip", "canary")}
    return {"samples": int(len(slow)), "slow_share": float(slow.mean()), "flags": rows, "spearman": corr}


ESTIMATORS = {
    "median": lambda r: np.median(r),
    "p80": lambda r: np.quantile(r, 0.8),
    "p90": lambda r: np.quantile(r, 0.9),
    "best": lambda r: np.max(r),
}


def estimator_report(procs: list[dict], rng: np.random.Generator, trials: int = 2000, n: int = 10) -> dict:
    out = {}
    for name, fn in ESTIMATORS.items():
        per_proc = np.array([fn(p["work"] / np.asarray(p["ns"]) * 1e9) for p in procs])
        hits = false = 0
        for _ in range(trials):
            idx = rng.choice(len(per_proc), 2 * n, replace=False)
            a, b = per_proc[idx[:n]], per_proc[idx[n:]]
            false += sps.mannwhitneyu(a, b).pvalue < 0.05
            hits += sps.mannwhitneyu(a, b * 0.97).pvalue < 0.05
        out[name] = {"cv": float(np.std(per_proc, ddof=1) / np.mean(per_proc)),
                     "slow_processes": float(np.mean(per_proc < 0.95 * np.quantile(per_proc, 0.9))),
                     "detect_3pct": hits / trials, "aa_false_rate": false / trials}
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--processes", type=int, default=120)
    ap.add_argument("--save")
    ap.add_argument("--load")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    load = os.getloadavg()
    data = json.load(open(a.load)) if a.load else collect(a.processes)
    if a.save:
        json.dump(data, open(a.save, "w"))
    rng = np.random.default_rng(1)
    doc = {"loadavg_at_start": load, "loadavg_at_end": os.getloadavg(),
           "shapes": {s: {"processes": len(p), "signals": signal_report(sample_table(p)),
                          "estimators": estimator_report(p, rng)} for s, p in data.items()}}
    if a.json:
        print(json.dumps(doc, indent=1))
        return
    print(f"loadavg {doc['loadavg_at_start']} -> {doc['loadavg_at_end']}")
    for shape, d in doc["shapes"].items():
        sg = d["signals"]
        print(f"\n== {shape}: {d['processes']} processes, {sg['samples']} samples, "
              f"{100 * sg['slow_share']:.1f}% slow (> {100 * SLOW:.0f}% below the process's best)")
        print(f"{'flag':20} {'fires':>7} {'hit rate':>9} {'slow if not':>12} {'recall':>7}")
        for k, r in sg["flags"].items():
            fmt = lambda v: f"{100 * v:.1f}%" if v is not None else "-"
            print(f"{k:20} {fmt(r['fires']):>7} {fmt(r['hit_rate']):>9} {fmt(r['slow_if_not']):>12} {fmt(r['recall']):>7}")
        print("spearman vs shortfall: " + ", ".join(f"{k} {v:+.2f}" for k, v in sg["spearman"].items() if v is not None))
        print(f"{'estimator':10} {'CV':>6} {'slow procs':>10} {'detect 3%':>10} {'A/A false':>10}  (10 vs 10, MWU 0.05)")
        for k, e in d["estimators"].items():
            print(f"{k:10} {100 * e['cv']:5.2f}% {100 * e['slow_processes']:9.1f}% {100 * e['detect_3pct']:9.1f}% "
                  f"{100 * e['aa_false_rate']:9.1f}%")


if __name__ == "__main__":
    main()
