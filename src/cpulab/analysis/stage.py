"""The analyse stage of a run: derive what the views show, store it, return the Summary.

After a run's samples are stored, analyse(store, run_id) computes each workload's own
analysis (memlat levels, bandwidth by cache level: the `analysis` a Workload declares)
and the generated code behind the largest real difference of each experiment and
workload (analysis/explain, objdump), stores them as analyses of the run (data, not text), and
summarises.  The views draw what is stored and compute nothing.
"""
from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import Callable

from cpulab import workloads
from cpulab.analysis.explain import why
from cpulab.analysis.history import run_history
from cpulab.analysis.steps import explain_curves
from cpulab.analysis.summary import summarise
from cpulab.analysis.sweeps import bandwidth_rows, memlat_colour, memlat_curves
from cpulab.machine import os_cache_sizes
from cpulab.model import Analysis, Comparison, Result, Summary, Verdict
from cpulab.store.db import Store


def memlat_steps(results: list[Result], caches: list[dict], fingerprint: dict) -> dict | None:
    """Each step of the latency curve matched to a cache level, a TLB level, or neither."""
    tlbs = fingerprint.get("tlbs") or {}
    return explain_curves(memlat_curves(results, caches), caches, tlbs.get("tlbs", []), tlbs.get("source", ""))


# Analysis kind -> function of (one experiment's results of the workload, the OS caches,
# the machine's fingerprint) -> data to store (None: nothing to say).
ANALYSES: dict[str, Callable[[list[Result], list[dict], dict], object]] = {
    "memlat-levels": lambda results, caches, _: memlat_curves(results, caches) or None,
    "memlat-steps": memlat_steps,
    "memlat-colour": lambda results, caches, _: memlat_colour(results),
    "bandwidth": lambda results, caches, _: bandwidth_rows(results, caches),
}


def analyse(store: Store, run_id: int, explain_code: bool = True) -> Summary:
    """Store the run's derived analyses (key: the experiment, or experiment/workload) and
    return its Summary with them."""
    s = summarise(store, run_id)
    caches = os_cache_sizes()
    by_workload: dict[tuple, list[Result]] = defaultdict(list)
    for r in s.results:
        by_workload[(r.experiment, r.workload)].append(r)
    for (exp, wname), results in by_workload.items():
        w = workloads.registry().get(wname)
        for kind in w.analyses if w is not None else ():
            if (data := ANALYSES[kind](results, caches, s.machine)) is not None:
                store.add_analysis(run_id, kind, data, key=exp)
        if explain_code and (doc := explain_largest(s, store, exp, wname)):
            store.add_analysis(run_id, "explain", doc, key=f"{exp}/{wname}")
    if histories := run_history(store, run_id):
        store.add_analysis(run_id, "history", histories)
    s.analyses = [Analysis(**a) for a in store.analyses(run_id)]
    return s


REPORT_PROFILE_SECONDS = 0.5  # per build: the hot region of the largest difference, sampled


def explain_largest(s: Summary, store: Store, exp: str, wname: str) -> dict | None:
    """The hot loops of the baseline and of the variant with the largest real difference."""
    comps: list[Comparison] = [c for c in s.comparisons if c.experiment == exp and c.workload == wname
                               and c.verdict in (Verdict.FASTER, Verdict.SLOWER) and c.ratio]
    if not comps:
        return None
    c = max(comps, key=lambda c: abs(math.log(c.ratio)))
    arts = {}
    for r in store.results(s.run_id):
        if r["experiment"] == exp and r["workload"] == wname and r["variant"] in (c.baseline, c.variant):
            art = store.artifact(r["artifact_hash"]) if r["artifact_hash"] else None
            if art:
                arts[r["variant"]] = art["path"]
    if len(arts) < 2 or not all(Path(p).exists() for p in arts.values()):
        return None
    try:
        e = why.explain(arts[c.baseline], arts[c.variant], c.params, REPORT_PROFILE_SECONDS,
                            (c.baseline, c.variant))
    except (RuntimeError, OSError):
        return None
    pct = (c.ratio - 1) * 100
    shown = " ".join(f"{k}={v}" for k, v in c.params.items() if k not in workloads.get(wname).hidden_params)
    return {**e, "a_name": c.baseline, "b_name": c.variant,
            "title": f"{c.variant} is {abs(pct):.1f}% {'faster' if pct > 0 else 'slower'} than {c.baseline} "
                     f"({shown}); their generated code"}
