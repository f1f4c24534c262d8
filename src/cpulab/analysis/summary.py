"""From stored samples to estimates and comparisons: the Summary every view shows.

summarise(store, run_id) returns a model.Summary (its to_dict() is the `--json`
document): the machine, the conditions, the variants, one Result per result (median
rate with its interval, cycles per unit, real/user/sys per repetition, the raw samples),
the Comparisons of every variant against its experiment's baseline at each parameter
point, and the analyses stored with the run.
"""
from __future__ import annotations

import math
from collections import defaultdict

import numpy as np

from .. import stats
from ..model import Analysis, Comparison, Geomean, Result, Status, Summary, Verdict
from ..store import Store
from ..workloads import UNITS


def _per_invocation(samples: list[dict], fn) -> list[float]:
    """Median of fn(sample) within each invocation: one observation per process."""
    groups: dict[int, list[float]] = defaultdict(list)
    for s in samples:
        v = fn(s)
        if v is not None and math.isfinite(v):
            groups[s["invocation"]].append(v)
    return [float(np.median(g)) for _, g in sorted(groups.items())]


def result_summary(r: dict, samples: list[dict]) -> Result:
    label, divisor, per_clock = UNITS.get(r["unit"], (r["unit"] + "/s", 1.0, "cycles/unit"))
    rates = _per_invocation(samples, lambda s: s["work"] / s["ns"] * 1e9 / divisor)
    cpu = _per_invocation(samples, lambda s: s["cycles"] / s["work"] if s["cycles"] is not None else None)
    ipc = _per_invocation(samples, lambda s: s["instructions"] / s["cycles"]
                          if s["instructions"] is not None and s["cycles"] else None)
    est = stats.estimate(rates)
    out = {
        "id": r["id"], "experiment": r["experiment"], "workload": r["workload"], "variant": r["variant"],
        "params": r["params"], "unit": r["unit"], "rate_unit": label, "per_clock_unit": per_clock,
        "status": r["status"], "error": r["error"], "same_as": r["same_as"], "notes": r["notes"],
        "emulated": bool(r["notes"].get("emulated")),  # ran under qemu-user: time is the emulator's
        "median": est.median if rates else None, "ci": list(est.ci) if rates else None,
        "cv": est.cv if rates else None, "processes": len(rates), "invocations": len(rates),
        "cycles_per_unit": float(np.median(cpu)) if cpu else None,
        "cycles_per_unit_ci": list(stats.median_ci(cpu)) if cpu else None,
        "ns_per_unit": (1e9 / (est.median * divisor)) if rates and est.median else None,
        "ipc": float(np.median(ipc)) if ipc else None,
        "timer": samples[0]["timer"] if samples else None,
        "core_per_tsc": float(np.median([s["core_per_tsc"] for s in samples if s["core_per_tsc"]]))
        if any(s["core_per_tsc"] for s in samples) else None,
        "samples": [s["work"] / s["ns"] * 1e9 / divisor for s in samples],
        "observations": rates,
    }
    # real/user/sys of one repetition (one pass over a file, one block of keys ...)
    for key, fn in (("real_s", lambda s: s["ns"] * 1e-9 / s["reps"]), ("user_s", lambda s: s["user_s"] / s["reps"]),
                    ("sys_s", lambda s: s["sys_s"] / s["reps"])):
        obs = _per_invocation(samples, fn)
        out[key] = float(np.median(obs)) if obs else None
    return Result.from_dict(out)


def compare_results(results: list[Result], baselines: dict[str, str]) -> list[Comparison]:
    """Every variant against its experiment's baseline at the same workload and params,
    Holm-corrected within each family: the variants compared at one parameter point.
    (Each point of a sweep is its own question, "which build is faster at N?"; correcting
    across all points as well would make long sweeps unable to say anything.)"""
    by_point: dict[tuple, dict[str, Result]] = defaultdict(dict)
    for r in results:
        by_point[(r.experiment, r.workload, r.point)][r.variant] = r
    families: dict[tuple, list[tuple]] = defaultdict(list)
    rows: list[Comparison] = []
    for (exp, wl, pk), variants in by_point.items():
        base_name = baselines.get(exp)
        base = variants.get(base_name)
        base_measured = _measured_as(base, variants) if base else None
        for name, r in variants.items():
            if name == base_name:
                continue
            row = Comparison(exp, wl, r.params, base_name, name, verdict=Verdict.NO_BASELINE)
            measured = _measured_as(r, variants)
            if base is None or not base.status.measured:
                pass
            elif measured is not None and measured is base_measured:  # the same code as the baseline
                row.ratio, row.ci, row.p, row.p_raw, row.verdict = 1.0, [1.0, 1.0], 1.0, 1.0, Verdict.IDENTICAL_CODE
            elif measured is None or not measured.observations:
                row.verdict = r.status
            elif base_measured and measured.emulated != base_measured.emulated:
                row.verdict = Verdict.NOT_COMPARABLE
            else:
                families[(exp, wl, pk)].append((row, base_measured, measured))
            rows.append(row)
    for fam in families.values():
        raw = [stats.compare(b.observations, m.observations) for _, b, m in fam]
        for (row, _, _), c in zip(fam, stats.adjust_family(raw)):
            row.ratio, row.ci, row.p, row.p_raw, row.verdict = c.ratio, list(c.ci), c.p_adjusted, c.p, Verdict(c.verdict)
    return rows


def _measured_as(r: Result, variants: dict[str, Result]) -> Result | None:
    """The result whose samples stand for r: itself, or the variant with identical code."""
    if r.status == Status.IDENTICAL:
        return variants.get(r.same_as)
    return r if r.status == Status.OK else None


def geomeans(comparisons: list[Comparison]) -> list[Geomean]:
    """Geometric mean of the ratios of each (experiment, workload, variant) over params."""
    groups: dict[tuple, list[float]] = defaultdict(list)
    for c in comparisons:
        if c.ratio:
            groups[(c.experiment, c.workload, c.variant, c.baseline)].append(c.ratio)
    return [Geomean(e, w, v, b, stats.geomean(rs), len(rs)) for (e, w, v, b), rs in groups.items()]


def summarise(store: Store, run_id: int, baseline: str | None = None) -> Summary:
    run = store.run(run_id)
    results = [result_summary(r, store.samples(r["id"])) for r in store.results(run_id)]
    baselines = {e["name"]: baseline or e["baseline"] for e in run["plan"]["experiments"]}
    comparisons = compare_results(results, baselines)
    return Summary(run_id=run_id, status=run["status"], started=run["started"], finished=run["finished"],
                   plan=run["plan"], machine=run["fingerprint"], conditions=run["conditions"],
                   timing=run["timing"], variants=store.variants(run_id), results=results,
                   comparisons=comparisons, geomeans=geomeans(comparisons),
                   analyses=[Analysis(**a) for a in store.analyses(run_id)], artifacts=_artifacts(store, run_id))


def _artifacts(store: Store, run_id: int) -> list[dict]:
    """The exact command lines each (workload, variant) of the run was built with."""
    out, seen = [], set()
    for r in store.results(run_id):
        if r["artifact_hash"] and (r["workload"], r["variant"]) not in seen:
            seen.add((r["workload"], r["variant"]))
            if art := store.artifact(r["artifact_hash"]):
                out.append({"workload": r["workload"], "variant": r["variant"], "hash": r["artifact_hash"],
                            "commands": art["commands"]})
    return out
