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
from dataclasses import dataclass
from typing import Protocol

from . import build, machine, probes, toolchain, workloads
from .execute import Executor, HarnessJob, LocalExecutor, calibrate_timing
from .plan import Plan
from .store import Store

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


class Stopped(Exception):
    """The run cannot go on (e.g. its cluster's scheduler is gone): what was stored stays,
    and the run is marked interrupted."""


def machine_identity(timer: str = "auto", executor: Executor | None = None) -> dict:
    """This machine's fingerprint, its id, its conditions now and its timing calibration."""
    # Calibrate with the sha256 O2 artifact: any artifact's harness will do.
    probe_art = build.build_artifact(workloads.get("sha256"), toolchain.BUILTIN["O2"])
    timing = calibrate_timing(probe_art.path, timer, executor)
    fp = machine.fingerprint(timing)
    return {"fingerprint": fp, "machine_id": machine.fingerprint_id(fp), "conditions": machine.conditions(),
            "timing": timing}


@contextmanager
def recorded_run(store: Store, plan: dict, timer: str = "auto", argv: list[str] | None = None,
                 executor: Executor | None = None, identity: dict | None = None):
    """A run row with the machine's fingerprint and timing (`identity`, default: this
    machine's; with `parent` and `machine` it is one machine's part of a cluster run);
    yields its id and marks it done, interrupted (Ctrl-C, Stopped: what was stored
    stays) or failed when the block ends."""
    ident = identity or machine_identity(timer, executor)
    run_id = store.start_run(ident["fingerprint"], ident["machine_id"], plan, ident["conditions"], ident["timing"],
                             argv if argv is not None else sys.argv, ident.get("parent"), ident.get("machine", ""))
    status = "failed"
    try:
        yield run_id
        status = "done"
    except (KeyboardInterrupt, Stopped):
        status = "interrupted"
        raise
    finally:
        store.finish_run(run_id, status)


class Site(Protocol):
    """Where a plan meets a machine: its identity, its builds, its data files, its
    measured processes (`executor`) and its probe tables.  LocalSite is this machine;
    distributed.MachineSite is a worker of a cluster."""
    executor: Executor

    def identity(self, timer: str) -> dict: ...
    def compiler_version(self, v: toolchain.Variant) -> str: ...
    def build(self, w: workloads.Workload, v: toolchain.Variant) -> tuple[str, str, build.Artifact | None]: ...
    def prepare(self, w: workloads.Workload, params: dict[str, str]) -> dict[str, str]: ...
    def probe_table(self, name: str, timer: str): ...


class LocalSite:
    def __init__(self, executor: Executor):
        self.executor = executor

    def identity(self, timer):
        return machine_identity(timer, self.executor)

    def compiler_version(self, v):
        return toolchain.compiler_version(v.compiler)

    def build(self, w, v):
        return build_variant(w, v)

    def prepare(self, w, params):
        return _prepare_params(w, params)

    def probe_table(self, name, timer):
        return probes.get(name).measure(timer=timer, executor=self.executor)


def run_plan(plan: Plan, store: Store, executor: Executor | None = None, progress: Progress | None = None,
             argv: list[str] | None = None, seed: int | None = None, site: Site | None = None) -> int:
    """Build and measure everything in the plan, then its probe tables; returns the run
    id.  On Ctrl-C the run is marked interrupted and everything measured stays."""
    site = site or LocalSite(executor or LocalExecutor(seed=seed))
    progress = progress or QuietProgress()
    rng = random.Random(seed)
    with recorded_run(store, plan.as_dict(), plan.timer, argv, identity=site.identity(plan.timer)) as run_id:
        targets = _build_all(plan, store, run_id, progress, site)
        _measure(plan, store, targets, site, progress, rng)
        progress.phase("tables", len(plan.probe_tables))
        for name in plan.probe_tables:
            store.add_analysis(run_id, "table", site.probe_table(name, plan.timer), key=name)
            progress.advance(name)
    return run_id


def build_variant(w: workloads.Workload, v: toolchain.Variant) -> tuple[str, str, build.Artifact | None]:
    """(status, error, artifact) of one workload under one variant on this machine:
    pending with its artifact, or skipped / build-failed with the reason."""
    if why := toolchain.unavailable_reason(v):
        return "skipped", why, None
    if missing := [why for h, pkg in w.requires.items() if (why := toolchain.library_reason(v, h, w.libs, pkg))]:
        return "skipped", "; ".join(missing), None
    try:
        return "pending", "", build.build_artifact(w, v)
    except build.BuildError as e:
        return "build-failed", str(e), None


def _build_all(plan: Plan, store: Store, run_id: int, progress: Progress, site: Site) -> list[Target]:
    """Build every (workload, variant) once; record skips and build failures; mark
    variants whose executable is byte-identical to an earlier one's as 'identical'."""
    pairs = [(e, w, v) for e in plan.experiments for w in e.workloads for v in e.variants]
    progress.phase("build", len(pairs))
    recorded_variants: set[str] = set()
    targets: list[Target] = []
    for exp, wname, vname in pairs:
        w, v = workloads.get(wname), plan.variant(vname)
        if vname not in recorded_variants:
            store.add_variant(run_id, v.as_dict(), site.compiler_version(v))
            recorded_variants.add(vname)
        status, error, art = site.build(w, v)
        if art:
            store.add_artifact(art.as_dict())
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


def _measure(plan: Plan, store: Store, targets: list[Target], site: Site, progress: Progress,
             rng: random.Random) -> None:
    live = [t for t in targets if t.live]
    progress.phase("measure", sum(plan.runs_of(t.experiment) for t in live))
    prepared: dict[int, dict[str, str]] = {}
    for rnd in range(max((plan.runs_of(t.experiment) for t in live), default=0)):
        order = [t for t in live if t.live and rnd < plan.runs_of(t.experiment)]
        rng.shuffle(order)
        for t in order:
            w = workloads.get(t.workload)
            if t.result_id not in prepared:
                try:
                    prepared[t.result_id] = site.prepare(w, t.params)
                except Stopped:  # not this point's failure: the whole run stops
                    raise
                except Exception as e:  # a data file that cannot be made fails this point only
                    t.live = False
                    store.set_status(t.result_id, "setup-failed", f"preparing {t.workload}: {e}")
                    progress.advance(f"{t.workload} {t.variant}: setup-failed")
                    continue
            v = plan.variant(t.variant)
            job = HarnessJob(t.artifact.path, prepared[t.result_id], plan.samples_of(t.experiment),
                             plan.min_sample_time, plan.warmup, plan.timer, plan.timeout, dict(v.env))
            out = site.executor.execute(job)
            if out.status == "ok":
                store.add_invocation(t.result_id, rnd, out.data, out.layout_pad)
            else:
                t.live = False
                store.set_status(t.result_id, out.status, out.error)
            progress.advance(f"round {rnd + 1}/{plan.runs_of(t.experiment)}  {t.workload} {t.variant}"
                             + (f"  {out.status}: {out.error[:60]}" if out.status != "ok" else ""))
