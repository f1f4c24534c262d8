"""From stored samples to estimates and comparisons: the Summary every view shows.

summarise(store, run_id) returns a model.Summary (its to_dict() is the `--json`
document): the machine, the conditions, the variants, one Result per result (median
rate with its interval, cycles per unit, real/user/sys per repetition, the raw samples),
the Comparisons of every variant against its experiment's baseline at each parameter
point, and the analyses stored with the run.
"""
from __future__ import annotations

import math
from collections import Counter, defaultdict

import numpy as np

from .. import stats
from ..model import Analysis, Comparison, Geomean, Result, Status, Summary, Verdict
from ..store import Store
from ..workloads import UNITS


def _per_invocation(samples: list[dict], fn, reduce=np.median) -> dict[int, float]:
    """reduce(fn(sample)) over the used samples of each invocation: one observation per
    process, keyed by invocation (= the round it ran in).  Samples judged contaminated
    when they were measured (`excluded`) are left out; a process with none left is too."""
    groups: dict[int, list[float]] = defaultdict(list)
    for s in samples:
        if s.get("excluded"):
            continue
        v = fn(s)
        if v is not None and math.isfinite(v):
            groups[s["invocation"]].append(v)
    return {inv: float(reduce(g)) for inv, g in sorted(groups.items())}


def result_summary(r: dict, samples: list[dict]) -> Result:
    label, divisor, per_clock = UNITS.get(r["unit"], (r["unit"] + "/s", 1.0, "cycles/unit"))
    # One-sided noise: a process's estimate is its fastest used sample (stats.PROCESS_ESTIMATOR).
    # Rates per on-CPU second: the same as per wall second for an undisturbed sample; a long
    # sample kept despite preemption loses the time other threads had (stats.contamination).
    rates = _per_invocation(samples, lambda s: s["work"] / stats.on_cpu_ns(s) * 1e9 / divisor, np.max)
    cpu = list(_per_invocation(samples, lambda s: s["cycles"] * stats.on_cpu_ns(s) / s["ns"] / s["work"]
                               if s["cycles"] is not None else None, np.min).values())
    ipc = list(_per_invocation(samples, lambda s: s["instructions"] / s["cycles"]
                               if s["instructions"] is not None and s["cycles"] else None).values())
    est = stats.estimate(list(rates.values()))
    excluded = [s["excluded"] for s in samples if s.get("excluded")]
    out = {
        "id": r["id"], "experiment": r["experiment"], "workload": r["workload"], "variant": r["variant"],
        "params": r["params"], "unit": r["unit"], "rate_unit": label, "per_clock_unit": per_clock,
        "status": r["status"], "error": r["error"], "same_as": r["same_as"], "notes": r["notes"],
        "emulated": bool(r["notes"].get("emulated")),  # ran under qemu-user: time is the emulator's
        "median": est.median if rates else None, "ci": list(est.ci) if rates else None,
        "ci_coverage": est.ci_coverage if rates else None,
        "cv": est.cv if rates else None, "processes": len(rates), "invocations": len(rates),
        "excluded_samples": len(excluded),
        "excluded_processes": len({s["invocation"] for s in samples}) - len(rates),
        "excluded_why": dict(Counter(w.split(" ")[0] for w in excluded)),
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
        obs = list(_per_invocation(samples, fn).values())
        out[key] = float(np.median(obs)) if obs else None
    return Result.from_dict(out)


def compare_results(results: list[Result], baselines: dict[str, str], alpha: float = stats.ALPHA,
                    method: str = stats.DEFAULT_METHOD) -> list[Comparison]:
    """Every variant against its experiment's baseline at the same workload and params,
    Holm-corrected within each family: the variants compared at one parameter point.
    (Each point of a sweep is its own question, "which build is faster at N?"; correcting
    across all points as well would make long sweeps unable to say anything.)  alpha is
    the level of this look (stats.look_alpha); method paired or unpaired (stats.compare_pair)."""
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
            row = Comparison(exp, wl, r.params, base_name, name, verdict=Verdict.NO_BASELINE, alpha=alpha)
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
        raw = [stats.compare_pair(b.observations, m.observations, alpha, method) for _, b, m in fam]
        for (row, _, _), c in zip(fam, stats.adjust_family(raw, alpha)):
            row.ratio, row.ci, row.p, row.p_raw, row.verdict = c.ratio, list(c.ci), c.p_adjusted, c.p, Verdict(c.verdict)
            row.method, row.rounds = c.method, c.n
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


def summarise(store: Store, run_id: int, baseline: str | None = None, method: str = stats.DEFAULT_METHOD) -> Summary:
    run = store.run(run_id)
    results = [result_summary(r, store.samples(r["id"])) for r in store.results(run_id)]
    baselines = {e["name"]: baseline or e["baseline"] for e in run["plan"]["experiments"]}
    comparisons = compare_results(results, baselines, stats.look_alpha(bool(run["plan"].get("budget"))), method)
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
