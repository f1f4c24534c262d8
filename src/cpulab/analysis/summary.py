"""From stored samples to estimates and comparisons: the Summary every view shows.

summarise(store, run_id) returns a model.Summary (its to_dict() is the `--json`
document): the machine, the conditions, the variants, one Result per result (median
rate with its interval, cycles per unit, real/user/sys per repetition, the raw samples),
the Comparisons of every variant against its experiment's baseline at each parameter
point, and the analyses stored with the run.
"""
from __future__ import annotations

from cpulab.estimates import (
    carryover, compare_results, count_verdicts, geomeans, placement_bands, result_summary
)
from cpulab.analysis.why import attach_causes
from cpulab.model import Summary
from cpulab.store.db import Store


def summarise(store: Store, run_id: int, baseline: str | None = None, method: str | None = None) -> Summary:
    """The run's Summary; method overrides the plan's (policy.METHODS)."""
    run = store.run(run_id)
    results, follows = [], []
    for r in store.results(run_id):  # one result's samples in memory at a time
        samples = store.samples(r.id)
        results.append(result_summary(r, samples))
        follows += results[-1].carryover_ratios
    placement_bands(results)
    plan = run.record
    baselines = {e.name: baseline or e.baseline for e in plan.experiments}
    policy = plan.compared_by(method)
    comparisons = compare_results(results, baselines, policy, plan.against, plan.first_looks)
    if policy.metric == "instructions":
        count_verdicts(comparisons, policy)
    attach_causes(comparisons, results, {a.key: a.data for a in store.analyses(run_id, "code")},
                  run.fingerprint.get("caches") or [])
    return Summary(run_id=run_id, status=run.status, started=run.started, finished=run.finished,
                   plan=plan, machine=run.fingerprint,
                   conditions={k: v for k, v in run.conditions.items() if k != "time_split"},
                   timing=run.timing, variants=store.variants(run_id), results=results,
                   comparisons=comparisons, geomeans=geomeans(comparisons),
                   analyses=store.analyses(run_id), artifacts=_artifacts(store, run_id),
                   carryover=carryover(follows), time_split=run.conditions.get("time_split", {}), policy=policy)


def _artifacts(store: Store, run_id: int) -> list[dict]:
    """The exact command lines each (workload, variant) of the run was built with."""
    out, seen = [], set()
    for r in store.results(run_id):
        if r.artifact_hash and (r.workload, r.variant) not in seen:
            seen.add((r.workload, r.variant))
            if art := store.artifact(r.artifact_hash):
                out.append({"workload": r.workload, "variant": r.variant, "hash": r.artifact_hash,
                            "commands": art.commands})
    return out
