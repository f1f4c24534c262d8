"""The analyse stage of a run: derive what the views show, store it, return the Summary.

After a run's samples are stored, analyse(store, run_id) computes each workload's own
analysis (memlat levels, bandwidth by cache level: the `analysis` a Workload declares),
the findings in words (knees at cache boundaries, the widest gap), the roofline (where
the run measured its roofs) and the run's history,
stores them as analyses of the run (data, not text), and summarises.  It reads the store
and measures nothing: the generated code behind the largest differences was profiled by
the measure stage (measure/explain/largest.py) and is read back with the other analyses.  The views draw what is stored and compute nothing.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Callable, Mapping

from cpulab import workloads
from cpulab.analysis.findings import knees, spread
from cpulab.analysis.history import run_history
from cpulab.analysis.why import with_why
from cpulab.analysis.summary import summarise
from cpulab.analysis.roofline import roofline
from cpulab.estimates import ESTIMATOR
from cpulab.model import Result, Summary
from cpulab.store.db import Store


# What a workload's analysis kind is made by (cli/kinds.py declares each): (one
# experiment's results of the workload, the measuring machine's caches, the run's
# Summary) -> the data to store (None: nothing to say).
Maker = Callable[[list[Result], list[dict], Summary], object]


def analyse(store: Store, run_id: int, makers: Mapping[str, Maker]) -> Summary:
    """Store the run's derived analyses (key: the experiment, or experiment/workload) and
    return its Summary with them; each workload's own kinds (Workload.analyses) are made
    by `makers`."""
    s = summarise(store, run_id)
    caches = s.machine.get("caches") or []  # the measuring machine's, as its fingerprint stored them
    by_workload: dict[tuple, list[Result]] = defaultdict(list)
    for r in s.results:
        by_workload[(r.experiment, r.workload)].append(r)
    for (exp, wname), results in by_workload.items():
        w = workloads.registry().get(wname)
        for kind in w.analyses if w is not None else ():
            if (data := makers[kind](results, caches, s)) is not None:
                store.add_analysis(run_id, kind, data, key=exp)
        ok = [r for r in results if r.median is not None]
        if ok and (found := knees(ok, caches, w.sweep_axis if w else None) + spread(ok)):
            store.add_analysis(run_id, "findings", found, key=f"{exp}/{wname}")
    for code in store.analyses(run_id, "explain"):  # the measured evidence, in words
        if "why" not in code.data:
            store.add_analysis(run_id, "explain", with_why(code.data), key=code.key)
    for roofs in store.analyses(run_id, "roofline-roofs"):  # the probe measured the roofs: place the kernels
        if "error" not in roofs.data and (placed := roofline(roofs.data, s.results)):
            store.add_analysis(run_id, "roofline", placed)
    # Its estimates kept for the histories of this run and later ones (history.py)
    store.keep_estimates(ESTIMATOR, [(r.id, r.median, r.ci, r.rate_unit) for r in s.results if r.median is not None])
    if histories := run_history(store, run_id):
        store.add_analysis(run_id, "history", histories)
    s.analyses = store.analyses(run_id)
    return s
