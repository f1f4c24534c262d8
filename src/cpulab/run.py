"""Running a plan: build every artifact, then measure in interleaved random rounds.

An executor runs one job (one artifact, one parameter point) in a fresh process and
returns the harness's JSON, or a failure.  LocalExecutor pins the process to one CPU;
a distributed executor (dask) implements the same `execute` on remote workers.
Each round runs every live job once, in a fresh random order, so a drifting machine
hits all variants alike; a job that fails is recorded with its reason and dropped
from later rounds while the others go on.
"""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Protocol

from . import build, machine, probes, toolchain, workloads
from .plan import Plan
from .store import Store

# Environment of a measured process: small and fixed, plus a pad of random length
# that moves the stack (layout is a variable: Mytkowicz et al. 2009).
BASE_ENV = {"PATH": "/usr/bin:/bin", "LC_ALL": "C"}
MAX_LAYOUT_PAD = 4096


@dataclass
class Job:
    result_id: int
    workload: str
    variant: str
    params: dict[str, str]
    artifact_path: str
    env: dict[str, str] = field(default_factory=dict)
    samples: int = 5
    min_sample_time: float = 0.010
    warmup: float = 0.020
    timer: str = "auto"
    timeout: float = 300.0

    def argv(self) -> list[str]:
        args = [self.artifact_path, "--samples", str(self.samples), "--min-sample-time", str(self.min_sample_time),
                "--warmup", str(self.warmup), "--timer", self.timer]
        for k, v in self.params.items():
            args += ["--param", f"{k}={v}"]
        return args


@dataclass
class Outcome:
    status: str  # ok | skipped | verify-failed | setup-failed | crash | timeout | error
    error: str = ""
    data: dict = field(default_factory=dict)  # the harness JSON when status is ok
    layout_pad: int = 0


class Executor(Protocol):
    def execute(self, job: Job) -> Outcome: ...


def pick_cpu() -> int:
    """The last CPU we may run on: CPU 0 takes most interrupts on Linux."""
    return max(os.sched_getaffinity(0))


def parse_harness_output(stdout: str, returncode: int, stderr: str) -> Outcome:
    """Turn an artifact's exit into an Outcome; signals and garbage become failures."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return Outcome("crash", f"killed by {name}" + (f": {stderr.strip()[:200]}" if stderr.strip() else ""))
    lines = [ln for ln in stdout.splitlines() if ln.startswith("{")]
    try:
        data = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        detail = (stderr.strip() or stdout.strip())[:200]
        return Outcome("error", f"exit status {returncode}, no result" + (f": {detail}" if detail else ""))
    status = data.get("status", "error")
    if status == "ok" and returncode == 0:
        return Outcome("ok", data=data)
    return Outcome(status if status != "ok" else "error", data.get("error") or f"exit status {returncode}")


class LocalExecutor:
    """Runs each job here, pinned to one CPU, with a timeout."""

    def __init__(self, cpu: int | None = None, seed: int | None = None):
        self.cpu = pick_cpu() if cpu is None else cpu
        self.rng = random.Random(seed)

    def execute(self, job: Job) -> Outcome:
        pad = self.rng.randrange(MAX_LAYOUT_PAD)
        env = {**BASE_ENV, **job.env, "CPULAB_LAYOUT_PAD": "x" * pad}
        try:
            p = subprocess.run(job.argv(), capture_output=True, text=True, env=env, timeout=job.timeout,
                               preexec_fn=lambda: os.sched_setaffinity(0, {self.cpu}))
        except subprocess.TimeoutExpired:
            return Outcome("timeout", f"no result within {job.timeout:g}s", layout_pad=pad)
        except OSError as e:
            return Outcome("error", f"cannot execute {job.artifact_path}: {e}", layout_pad=pad)
        out = parse_harness_output(p.stdout, p.returncode, p.stderr)
        out.layout_pad = pad
        return out


def calibrate_timing(artifact_path: str, timer: str = "auto") -> dict:
    """The harness's timer choice, TSC frequency and core/TSC ratio on this machine."""
    p = subprocess.run([artifact_path, "--calibrate-only", "--timer", timer], capture_output=True, text=True,
                       timeout=60, preexec_fn=lambda: os.sched_setaffinity(0, {pick_cpu()}))
    try:
        return json.loads(p.stdout)
    except json.JSONDecodeError:
        return {"timer": "unknown", "error": p.stderr.strip()[:200]}


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
def recorded_run(store: Store, plan: dict, timer: str = "auto", argv: list[str] | None = None):
    """A run row with the machine's fingerprint and timing; yields its id and marks it
    done, interrupted (Ctrl-C: what was stored stays) or failed when the block ends."""
    # Calibrate with the sha256 O2 artifact: any artifact's harness will do.
    probe_art = build.build_artifact(workloads.get("sha256"), toolchain.BUILTIN["O2"])
    timing = calibrate_timing(probe_art.path, timer)
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
    with recorded_run(store, plan.as_dict(), plan.timer, argv) as run_id:
        targets = _build_all(plan, store, run_id, progress)
        _measure(plan, store, targets, executor, progress, rng)
        progress.phase("tables", len(plan.probe_tables))
        for name in plan.probe_tables:
            store.add_analysis(run_id, "table", probes.TABLES[name](timer=plan.timer), key=name)
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
        elif why := toolchain.libraries_reason(v, w.requires, w.libs):
            status, error = "skipped", why
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
                    prepared[t.result_id] = _prepare_params(w, t.params)
                except Exception as e:  # a data file that cannot be made fails this point only
                    t.live = False
                    store.set_status(t.result_id, "setup-failed", f"preparing {t.workload}: {e}")
                    progress.advance(f"{t.workload} {t.variant}: setup-failed")
                    continue
            v = plan.variant(t.variant)
            job = Job(t.result_id, t.workload, t.variant, prepared[t.result_id], t.artifact.path, dict(v.env),
                      plan.samples_of(t.experiment), plan.min_sample_time, plan.warmup, plan.timer, plan.timeout)
            out = executor.execute(job)
            if out.status == "ok":
                store.add_invocation(t.result_id, rnd, out.data, out.layout_pad)
            else:
                t.live = False
                store.set_status(t.result_id, out.status, out.error)
            progress.advance(f"round {rnd + 1}/{plan.runs_of(t.experiment)}  {t.workload} {t.variant}"
                             + (f"  {out.status}: {out.error[:60]}" if out.status != "ok" else ""))
