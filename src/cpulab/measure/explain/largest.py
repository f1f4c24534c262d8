"""A run's last measuring step: the generated code behind the largest real difference of
each experiment and workload, its hot regions found by sampling both builds (half a
second each) and modelled by llvm-mca, with each build's instructions executed per unit
by function where the run counted them (measure/instructions.py), stored as the run's
`explain` analyses.  Taken
here, beside the samples, so that analysing the run (here or on another machine) only
reads the store.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable
from pathlib import Path

from cpulab import workloads
from cpulab.estimates import compare_results, result_summary
from cpulab.measure.execute.executor import Executor
from cpulab.measure.explain import compare
from cpulab.spec.schedule import Schedule
from cpulab.model import Comparison, Verdict, params_key
from cpulab.store.db import Store

PROFILE_SECONDS = 0.5  # per build: the hot region of the largest difference, sampled
# per build in any decided comparison: ~1,000 samples (~100 on a loaded host), enough to
# find its hot loop
CODE_PROFILE_SECONDS = 0.1


@dataclass(frozen=True)
class Difference:
    """The largest faster/slower comparison of one experiment's workload: both builds'
    executables and, where the run counted them, their instructions by function."""
    key: str  # "experiment/workload", the explain analysis' key
    comparison: Comparison
    artifacts: tuple[str, str]
    executed: tuple[list, list] | None


@dataclass(frozen=True)
class Decided:
    """The run's faster/slower comparisons as it stands, each build's executable still on
    disk by (experiment, workload, variant), and the results they were compared from: what
    both the explanations and the code reading start from, summarised once."""
    comparisons: list[Comparison]
    paths: dict[tuple, str]
    results: list


def decided(store: Store, run_id: int, schedule: Schedule, experiments: set[str] | None = None) -> Decided:
    """The Decided of `experiments` (None: all)."""
    rows = [r for r in store.results(run_id) if experiments is None or r.experiment in experiments]
    results = [result_summary(r, store.samples(r.id)) for r in rows]
    comparisons = [c for c in compare_results(results, schedule.baselines, schedule.policy, schedule.against, schedule.first)
                   if c.verdict in (Verdict.FASTER, Verdict.SLOWER) and c.ratio]
    paths: dict[tuple, str] = {}
    for r in rows:
        if r.artifact_hash and (art := store.artifact(r.artifact_hash)) and Path(art.path).exists():
            paths[(r.experiment, r.workload, r.variant)] = art.path
    return Decided(comparisons, paths, results)


def largest_differences(store: Store, run_id: int, found: Decided) -> list[Difference]:
    """For each experiment and workload of `found` not yet explained, its largest
    faster/slower comparison whose builds are still on disk."""
    done = {a.key for a in store.analyses(run_id) if a.kind == "explain"}
    largest: dict[tuple, Comparison] = {}
    for c in found.comparisons:
        key = (c.experiment, c.workload)
        if f"{key[0]}/{key[1]}" not in done \
                and (key not in largest or abs(math.log(c.ratio)) > abs(math.log(largest[key].ratio))):
            largest[key] = c
    counted = {(r.experiment, r.workload, r.variant, params_key(r.params)): r.notes.get("instructions_by_function")
               for r in found.results}
    out = []
    for (exp, wname), c in largest.items():
        a, b = found.paths.get((exp, wname, c.baseline)), found.paths.get((exp, wname, c.variant))
        if a and b:
            executed = tuple(counted.get((exp, wname, v, params_key(c.params))) for v in (c.baseline, c.variant))
            out.append(Difference(f"{exp}/{wname}", c, (a, b), executed if all(executed) else None))
    return out


def decided_builds(store: Store, run_id: int, found: Decided) -> list[tuple[str, str, dict[str, str]]]:
    """Every build in a faster/slower comparison of `found` (both sides) whose code is not
    yet read: (the `code` analysis' key, workloads.code_key: one for each code a build runs,
    its executable, the parameters where it is profiled: of the decided points that run
    that code, the one of the middle working set, the lower of two middles: quicker to set up than the largest (a
    1 Mi-point FFT; of two points, a 100 MB file's 3 passes and profile take 2.3 s where
    10 MB's take 0.6 s), and unlike the smallest of many (a 16-element dot, whose time goes
    to the call around the loop) its time is in the loop the larger points run too)."""
    done = {a.key for a in store.analyses(run_id) if a.kind == "code"}
    size = {(r.experiment, r.workload, params_key(r.params)): r.notes.get("working_set_bytes") or 0
            for r in found.results}
    points: dict[str, list[Comparison]] = {}  # by the code each comparison's point runs (workloads.code_key)
    for c in sorted(found.comparisons, key=lambda c: size.get((c.experiment, c.workload, params_key(c.params)), 0)):
        for v in (c.baseline, c.variant):
            points.setdefault(workloads.code_key(c.experiment, c.workload, v, c.params), []).append(c)
    out = {}
    for c in found.comparisons:
        for v in (c.baseline, c.variant):
            key = workloads.code_key(c.experiment, c.workload, v, c.params)
            if key not in done and (path := found.paths.get((c.experiment, c.workload, v))):
                cs = points[key]
                out[key] = (key, path, cs[(len(cs) - 1) // 2].params)
    return list(out.values())


def read_code(path: str, params: dict[str, str], executor: Executor) -> dict | None:
    """One build's hot region (CODE_PROFILE_SECONDS of samples at `params`): what analysis/why.py
    reads its causes from; None when the code cannot be read."""
    try:
        return compare.build_code(path, params, CODE_PROFILE_SECONDS, executor)
    except (RuntimeError, OSError):
        return None


def explain_difference(d: Difference, prepare: Callable[[str, dict], dict], executor: Executor) -> dict | None:
    """The explain analysis of one difference: both builds profiled (PROFILE_SECONDS
    each, at the comparison's parameters made ready by `prepare`: input files) and their
    code side by side; None when the code cannot be read."""
    c = d.comparison
    try:
        doc = compare.explain(*d.artifacts, prepare(c.workload, c.params), PROFILE_SECONDS, (c.baseline, c.variant),
                              executor, verified=True)
    except (RuntimeError, OSError):
        return None
    if d.executed:
        doc["executed"] = executed_by_function(*d.executed)
    return {**doc, **_title(c, c.workload)}


def executed_by_function(a: list, b: list) -> list[dict]:
    """Two builds' instructions per unit by function ([name, count] pairs), side by side,
    the function whose count moved most first.  A function is lined up by its name
    without the suffix of a compiler's clone (gcc's check.isra.0 is clang's check)."""
    def by_name(pairs):
        out: dict[str, float] = {}
        for fn, n in pairs:
            plain = fn.split(".")[0]
            out[plain] = out.get(plain, 0) + n
        return out
    ia, ib = by_name(a), by_name(b)
    names = sorted(set(ia) | set(ib), key=lambda fn: -abs(ib.get(fn, 0) - ia.get(fn, 0)))
    return [{"function": fn, "a_per_unit": ia.get(fn), "b_per_unit": ib.get(fn)} for fn in names]


def _title(c: Comparison, wname: str) -> dict:
    pct = (c.ratio - 1) * 100
    shown = " ".join(f"{k}={v}" for k, v in c.params.items() if k not in workloads.get(wname).hidden_params)
    return {"a_name": c.baseline, "b_name": c.variant,
            "title": f"{c.variant} is {abs(pct):.1f}% {'faster' if pct > 0 else 'slower'} than {c.baseline} "
                     f"({shown}); their generated code"}
