"""One result's history over stored runs, and where it changed.

A series is one (experiment, workload, variant, parameter point) measured on one machine
in many runs (two experiments measuring one point do so their own ways: RC5's portable O2
alone in link-format, in turns with other builds in per-clock): each run's estimate and
interval (estimates.result_summary), in the order of the code's commits when every run
carries one (plan.origin), else in the order the runs started.  Change points are found
over the logs of the estimates with PELT (pelt.py) and a penalty of 5 sigma^2 ln n per
change, sigma^2 the series' own noise read from successive differences (robust to the
steps themselves).  A pairwise test between neighbours cries wolf on a noisy host
(MongoDB's and Mozilla's experience); a penalised segmentation of the whole history does
not.  On synthetic histories with 2% noise (300 each): 2 of 300 flat ones of 30 runs get
a false change point (22 with 3 sigma^2 ln n, 44 of 200 with 2), and a 5% step after 12
of 24 runs is found within one run in 256 of 300.
"""
from __future__ import annotations

import math
import statistics
from typing import Callable

import numpy as np

from cpulab.analysis.pelt import pelt_ends
from cpulab.estimates import ESTIMATOR, result_summary
from cpulab.model import params_key
from cpulab.spec.record import StoredResult
from cpulab.store.db import Store
from cpulab.store.rows import RunListing

MIN_RUNS = 3  # fewer is not a history
MIN_SEGMENT = 2  # runs on each side of a change point
PENALTY = 5.0  # x sigma^2 ln n: see the module's docstring


def series(store: Store, workload: str, variant: str | None = None, params: dict[str, str] | None = None,
           machine: str | None = None, label: str | None = None, upto: int | None = None,
           experiment: str | None = None) -> list[dict]:
    """Every series of this workload (one per experiment, variant and parameter point, on one
    machine): {experiment, workload, variant, params, machine_id, unit, points: [{run, label,
    commit, dirty, started, commit_time, median, ci}]}, its points in commit (else start) order."""
    return _series_of(store, store.runs(label=label, machine=machine), upto, lambda r: (
        r.workload == workload and (not variant or r.variant == variant)
        and (not experiment or r.experiment == experiment)
        and not (params and any(r.params.get(k) != v for k, v in params.items()))))


def point_of(r: StoredResult) -> tuple:
    """What a stored result's series is of (on one machine)."""
    return r.experiment, r.workload, r.variant, params_key(r.params)


def _series_of(store: Store, runs: list[RunListing], upto: int | None, wanted: Callable[[dict], bool]) -> list[dict]:
    """The series (series()) of the results `wanted` takes, over these runs up to `upto`:
    each run's results read once, whatever the number of series (a run's history read a
    stored run's results once per result of the run: 9 s of analysis over 24 runs), and
    each result estimated once per estimator (kept in the store, `estimates`)."""
    found: dict[tuple, dict] = {}
    for run in runs:
        if run.status not in ("done", "interrupted") or (upto is not None and run.id > upto):
            continue
        kept, made = store.estimates(run.id, ESTIMATOR), []
        for r in store.results(run.id):
            if r.status != "ok" or not wanted(r):
                continue
            if r.id not in kept:
                est = result_summary(r, store.samples(r.id))
                if est.median is None:
                    continue
                kept[r.id] = (est.median, est.ci, est.rate_unit)
                made.append((r.id, *kept[r.id]))
            median, ci, unit = kept[r.id]
            s = found.setdefault((*point_of(r), run.machine_id), {
                "experiment": r.experiment, "workload": r.workload, "variant": r.variant,
                "params": r.params, "machine_id": run.machine_id, "unit": unit, "points": []})
            o = run.origin
            s["points"].append({"run": run.id, "label": run.label, "commit": o.get("commit", ""),
                                "dirty": bool(o.get("dirty")), "commit_time": o.get("commit_time"),
                                "started": run.started, "median": median, "ci": ci})
        if made:
            store.keep_estimates(ESTIMATOR, made)
    out = []
    for s in found.values():
        pts = s["points"]
        by_commit = all(p["commit_time"] is not None for p in pts)
        pts.sort(key=lambda p: (p["commit_time"], p["started"]) if by_commit else (p["started"],))
        s["order"] = "commit" if by_commit else "started"
        if len(pts) >= MIN_RUNS:
            out.append(s)
    return out


def noise(logs: list[float]) -> float:
    """The spread of one estimate around its neighbours: the median absolute successive
    difference / (0.6745 sqrt 2), which a few steps in the series barely move."""
    diffs = [abs(b - a) for a, b in zip(logs, logs[1:])]
    return statistics.median(diffs) / (0.6745 * math.sqrt(2)) if diffs else 0.0


def change_points(values: list[float]) -> list[int]:
    """Indices where a new level starts (none for a flat history)."""
    if len(values) < 2 * MIN_SEGMENT:
        return []
    logs = np.log(np.asarray(values, dtype=float))
    sigma = noise(list(logs))
    if sigma == 0:
        sigma = 1e-9  # identical values: any real move is a change
    pen = PENALTY * sigma ** 2 * math.log(len(logs))
    ends = pelt_ends(logs, pen, MIN_SEGMENT)
    return [e for e in ends if e < len(values)]


def with_changes(s: dict) -> dict:
    """The series with its change points: [{at (index), run, before, after, change (ratio)}]."""
    values = [p["median"] for p in s["points"]]
    cuts = change_points(values)
    bounds = [0, *cuts, len(values)]
    levels = [statistics.median(values[a:b]) for a, b in zip(bounds, bounds[1:])]
    s["changes"] = [{"at": c, "run": s["points"][c]["run"], "before": levels[i], "after": levels[i + 1],
                     "change": levels[i + 1] / levels[i]} for i, c in enumerate(cuts)]
    return s


def run_history(store: Store, run_id: int, limit: int = 12) -> list[dict] | None:
    """For a run's report: the histories (on its machine, up to it) of its results that
    have some, those that changed first; None when there are none."""
    earlier = [r for r in store.runs(machine=store.run(run_id).machine_id) if r.id <= run_id]
    if len(earlier) < MIN_RUNS:  # no series can be long enough: skip reading every result again
        return None
    keys = {point_of(r) for r in store.results(run_id) if r.status == "ok"}
    out = [with_changes(s) for s in _series_of(store, earlier, run_id, lambda r: point_of(r) in keys)]
    out.sort(key=lambda s: (not s["changes"], s["workload"], s["variant"]))
    return out[:limit] or None
