"""Running a plan: build every artifact, then measure in interleaved random rounds.

Every process is one job run by an executor (execute.py): one artifact at one
parameter point, pinned, with the layout pad, its failure recorded if it fails.
Each round runs every live job once, in a fresh random order, so a drifting machine
hits all variants alike; a job that fails is recorded with its reason and dropped
from later rounds while the others go on.
"""
from __future__ import annotations

import json
import random
import sys
from contextlib import contextmanager
from collections import defaultdict
from dataclasses import dataclass
from typing import Protocol

from . import analyse, build, machine, probes, stats, toolchain, workloads
from .execute import Executor, HarnessJob, LocalExecutor, calibrate_timing
from .plan import Plan
from .store import SIGNALS, Store

class Progress(Protocol):
    def phase(self, name: str, total: int) -> None: ...
    def advance(self, label: str) -> None: ...
    def note(self, text: str) -> None: ...


class QuietProgress:
    def phase(self, name, total): pass
    def advance(self, label): pass
    def note(self, text): pass


@dataclass
class Target:
    """One (experiment, workload, variant, params) point to measure."""
    experiment: str
    workload: str
    variant: str
    params: dict[str, str]
    result_id: int = 0
    artifact: build.Artifact | None = None
    live: bool = True


def _prepare_params(w: workloads.Workload, params: dict[str, str]) -> dict[str, str]:
    return {**params, **w.prepare(params)} if w.prepare else dict(params)


@contextmanager
def recorded_run(store: Store, plan: dict, timer: str = "auto", argv: list[str] | None = None,
                 executor: Executor | None = None):
    """A run row with the machine's fingerprint and timing; yields its id and marks it
    done, interrupted (Ctrl-C: what was stored stays) or failed when the block ends."""
    # Calibrate with the sha256 O2 artifact: any artifact's harness will do.
    probe_art = build.build_artifact(workloads.get("sha256"), toolchain.BUILTIN["O2"])
    timing = calibrate_timing(probe_art.path, timer, executor)
    fp = machine.fingerprint(timing)
    run_id = store.start_run(fp, machine.fingerprint_id(fp), plan, machine.conditions(), timing,
                             argv if argv is not None else sys.argv)
    status = "failed"
    try:
        yield run_id
        status = "done"
    except KeyboardInterrupt:
        status = "interrupted"
        raise
    finally:
        store.finish_run(run_id, status)


def run_plan(plan: Plan, store: Store, executor: Executor | None = None, progress: Progress | None = None,
             argv: list[str] | None = None, seed: int | None = None) -> int:
    """Build and measure everything in the plan, then its probe tables; returns the run
    id.  On Ctrl-C the run is marked interrupted and everything measured stays."""
    executor = executor or LocalExecutor(seed=seed)
    progress = progress or QuietProgress()
    rng = random.Random(seed)
    with recorded_run(store, plan.as_dict(), plan.timer, argv, executor) as run_id:
        targets = _build_all(plan, store, run_id, progress)
        _measure(plan, store, targets, executor, progress, rng)
        progress.phase("tables", len(plan.probe_tables))
        for name in plan.probe_tables:
            store.add_analysis(run_id, "table", probes.get(name).measure(timer=plan.timer, executor=executor),
                               key=name)
            progress.advance(name)
    return run_id


def _build_all(plan: Plan, store: Store, run_id: int, progress: Progress) -> list[Target]:
    """Build every (workload, variant) once; record skips and build failures; mark
    variants whose executable is byte-identical to an earlier one's as 'identical'."""
    pairs = [(e, w, v) for e in plan.experiments for w in e.workloads for v in e.variants]
    progress.phase("build", len(pairs))
    recorded_variants: set[str] = set()
    targets: list[Target] = []
    for exp, wname, vname in pairs:
        w, v = workloads.get(wname), plan.variant(vname)
        if vname not in recorded_variants:
            store.add_variant(run_id, v.as_dict(), toolchain.compiler_version(v.compiler))
            recorded_variants.add(vname)
        status, error, art = "pending", "", None
        if why := toolchain.unavailable_reason(v):
            status, error = "skipped", why
        elif missing := [why for h, pkg in w.requires.items()
                         if (why := toolchain.library_reason(v, h, w.libs, pkg))]:
            status, error = "skipped", "; ".join(missing)
        else:
            try:
                art = build.build_artifact(w, v)
                store.add_artifact(art.as_dict())
            except build.BuildError as e:
                status, error = "build-failed", str(e)
        for params in w.grid(plan.profile, exp.params.get(wname)):
            t = Target(exp.name, wname, vname, params, artifact=art, live=status == "pending")
            t.result_id = store.add_result(run_id, wname, vname, params, w.unit, status, error,
                                           art.hash if art else None, experiment=exp.name)
            targets.append(t)
        progress.advance(f"{wname} / {vname}" + (f": {status}" if status != "pending" else ""))

    # Identical code: measure the first variant with that code, point the rest at it.
    first_with: dict[tuple, str] = {}
    for t in targets:
        if not t.live:
            continue
        key = (t.experiment, t.workload, json.dumps(t.params, sort_keys=True), t.artifact.code_hash)
        if key in first_with and first_with[key] != t.variant and not plan.measure_identical:
            t.live = False
            store.mark_identical(t.result_id, first_with[key])
        else:
            first_with.setdefault(key, t.variant)
    return targets


def _measure(plan: Plan, store: Store, targets: list[Target], executor: Executor, progress: Progress,
             rng: random.Random) -> None:
    """Rounds until every comparison point has its rounds.  Each round runs every live
    job once; the points run in random order and the variants of one point back to back
    in random order, so a burst of interference hits a variant and its baseline alike
    (what the paired analysis relies on).  With a fixed count every point gets `runs`
    rounds; in budget mode a point whose comparisons are undecided at a look (n, 2n
    rounds) gets rounds up to the next look (2n, 4n) while its experiment has budget."""
    points = _points([t for t in targets if t.live])
    goal = {k: plan.runs_of(k[0]) for k in points}
    done = dict.fromkeys(points, 0)
    spent: dict[str, float] = defaultdict(float)
    prepared: dict[int, dict[str, str]] = {}
    progress.phase("measure", sum(goal[k] * len(ts) for k, ts in points.items()))
    while True:
        due = [k for k in points if done[k] < goal[k] and any(t.live for t in points[k])]
        if not due:
            due = _next_look(plan, store, points, goal, done, spent, progress)
            if not due:
                return
        rng.shuffle(due)
        for k in due:
            if plan.budget and done[k] >= plan.runs_of(k[0]) and spent[k[0]] >= plan.budget:
                goal[k] = done[k]  # out of budget: this round is not started
                continue
            order = [t for t in points[k] if t.live]
            rng.shuffle(order)
            for t in order:
                spent[k[0]] += _measure_once(plan, store, t, done[k], goal[k], executor, progress, prepared)
            done[k] += 1


def _points(live: list[Target]) -> dict[tuple, list[Target]]:
    """The live targets grouped by comparison point: (experiment, workload, params)."""
    points: dict[tuple, list[Target]] = defaultdict(list)
    for t in live:
        points[(t.experiment, t.workload, json.dumps(t.params, sort_keys=True))].append(t)
    return points


def _next_look(plan: Plan, store: Store, points: dict, goal: dict, done: dict, spent: dict,
               progress: Progress) -> list[tuple]:
    """In budget mode, at a look (n or 2n rounds): the points with an undecided comparison
    get rounds up to the next look, while their experiment has budget left; the undecided
    ones are shown.  There are at most stats.LOOKS looks, each tested at
    stats.look_alpha, so stopping early cannot inflate false verdicts."""
    if not plan.budget:
        return []
    more, labels = [], []
    for k, ts in points.items():
        n = plan.runs_of(k[0])
        if done[k] != goal[k] or goal[k] >= n * 2 ** (stats.LOOKS - 1) or spent[k[0]] >= plan.budget:
            continue
        summaries = [analyse.result_summary(store.result(t.result_id), store.samples(t.result_id)) for t in ts]
        baseline = next(e.baseline for e in plan.experiments if e.name == k[0])
        open_ = [c for c in analyse.compare_results(summaries, {k[0]: baseline},
                                                    stats.look_alpha(True))
                 if c["verdict"] not in ("faster", "slower", "identical code", "no baseline") and c["ratio"]
                 and not (c["verdict"] == "same" and (c["ci"][1] - c["ci"][0]) / 2 <= plan.precision)]
        if open_:
            goal[k] = min(2 * goal[k], n * 2 ** (stats.LOOKS - 1))
            more.append(k)
            labels += [f"{c['workload']} {c['variant']}/{c['baseline']} {fmt_interval(c['ci'])}" for c in open_]
    if more:
        progress.note(f"{len(labels)} undecided: " + "; ".join(labels[:6]) + (" ..." if len(labels) > 6 else ""))
        progress.phase("undecided", sum((goal[k] - done[k]) * len(points[k]) for k in more))
    return more


def fmt_interval(ci: list[float]) -> str:
    return f"[{(ci[0] - 1) * 100:+.1f}%, {(ci[1] - 1) * 100:+.1f}%]"


def _measure_once(plan: Plan, store: Store, t: Target, rnd: int, goal: int, executor: Executor,
                  progress: Progress, prepared: dict[int, dict[str, str]]) -> float:
    """One process of one target in round rnd; stores its samples, each with why it is
    left out if the signals around it say it was disturbed (stats.contamination), or
    the failure.  Returns the seconds it took."""
    w = workloads.get(t.workload)
    if t.result_id not in prepared:
        try:
            prepared[t.result_id] = _prepare_params(w, t.params)
        except Exception as e:  # a data file that cannot be made fails this point only
            t.live = False
            store.set_status(t.result_id, "setup-failed", f"preparing {t.workload}: {e}")
            progress.advance(f"{t.workload} {t.variant}: setup-failed")
            return 0.0
    v = plan.variant(t.variant)
    job = HarnessJob(t.artifact.path, prepared[t.result_id], plan.samples_of(t.experiment),
                     plan.min_sample_time, plan.warmup, plan.timer, plan.timeout, dict(v.env))
    out = executor.execute(job)
    if out.status == "ok":
        d = out.data
        excluded = [stats.contamination({"ns": ns, **{k: d[k][i] for k in SIGNALS if k in d}})
                    for i, ns in enumerate(d["ns"])]
        store.add_invocation(t.result_id, rnd, d, out.layout_pad, excluded)
    else:
        t.live = False
        store.set_status(t.result_id, out.status, out.error)
    progress.advance(f"round {rnd + 1}/{goal}  {t.workload} {t.variant}"
                     + (f"  {out.status}: {out.error[:60]}" if out.status != "ok" else ""))
    return out.process.wall_s if out.process else 0.0
