"""The cluster's client side: connect to a scheduler, drive each machine from its own
thread through runner.run_plan with a MachineSite (every build, data file and measured
process happens on that worker, through the functions of servers.py), and store what
comes home under a per-machine run."""
from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from distributed import Client, KilledWorker, Security
from distributed.client import FutureCancelledError

from cpulab import machine
from cpulab.compile.artifacts import Built, place, remove_placements
from cpulab.compile.inputs import input_file
from cpulab.compile.programs import ProgramBuild, packed_source, source_hash
from cpulab.measure.schedule import runner as run
from cpulab.measure.cluster.servers import (
    ClusterError, _on_worker_build, _on_worker_build_program, _on_worker_execute, _on_worker_execute_group,
    _on_worker_identity, _on_worker_kill_measured, _on_worker_prepare, _on_worker_probe, source_digest
)
from cpulab.measure.execute.executor import Outcome
from cpulab.measure.execute.processes import evict
from cpulab.measure.schedule.session import Stopped, recorded_run
from cpulab.model import Status
from cpulab.plan.plan import Plan
from cpulab.store.db import Store
from cpulab.machine import toolchains

POLL_S = 1.0  # how often a waiting client thread checks that its machine and scheduler are still there
GRACE_S = 60.0  # a machine absent this long has left: its remaining jobs are lost
CONNECT_TIMEOUT_S = 15


# ---- the client side --------------------------------------------------------------------

def connect(address: str, sec: Security | None) -> Client:
    """A client of the scheduler at `address`.  Its logging is silenced: a lost
    connection is reported once, as Stopped, not as dask's reconnect tracebacks."""
    # Every distributed logger: the tree's root, and the children dask's config gave
    # a level of their own (distributed.batched logged a CommClosedError traceback
    # when only a named few were silenced).
    named = [n for n in logging.root.manager.loggerDict if n.startswith("distributed.")]
    for name in ["distributed", *named]:
        logging.getLogger(name).setLevel(logging.CRITICAL)
    try:
        return Client(address, security=sec, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
    except (OSError, asyncio.TimeoutError) as e:
        raise ClusterError(f"cannot reach the scheduler at {address}: {e}") from None


def cluster_machines(client: Client) -> dict[str, str]:
    """Worker name -> address, for the cpulab workers (those with a machine-NAME resource)."""
    out = {}
    for addr, w in client.scheduler_info(n_workers=-1)["workers"].items():
        name = str(w.get("name"))
        if f"machine-{name}" in (w.get("resources") or {}):
            out[name] = addr
    return out


class MachineGone(Exception):
    pass


class MachineSite:
    """site.Site on one cluster worker: every step is a task pinned to machine-NAME."""

    def __init__(self, client: Client, name: str, parent: int, grace_s: float = GRACE_S):
        self.client, self.name, self.parent, self.grace_s = client, name, parent, grace_s
        self.resources = {"bench": 1, f"machine-{name}": 1}
        self.executor = self
        self.gone = ""  # why this machine is no longer used
        self.stopped = ""  # why the run cannot go on: a later call (the placements' clean-up) fails at once
        self.cancelled = False
        self._pending: set = set()
        self._lock = threading.Lock()

    # site.Site
    def identity(self, timer):
        """The worker's fingerprint, and the cluster run this machine's run belongs to."""
        return {**self._call(_on_worker_identity, timer), "parent": self.parent, "machine": self.name}

    def compiler_version(self, v):
        return self._call(toolchains.compiler_version, v.compiler)

    def build(self, w, v):
        try:
            return Built.from_dict(self._call(_on_worker_build, w.name, source_digest(w), v))
        except MachineGone as e:
            return Built(Status.LOST, str(e))

    def place(self, art, i):
        return self._call(place, art, i)  # linked where the artifact is

    def remove_placements(self):
        self._call(remove_placements)

    def build_program(self, p, v):
        source = Path(p.source_for(v.name))
        try:
            return ProgramBuild.from_dict(self._call(_on_worker_build_program, p, v, source_hash(source)[:24],
                                                     packed_source(source)))
        except MachineGone as e:
            return ProgramBuild(Status.LOST, "", "", [], "", error=str(e))

    def input_file(self, size):
        return self._call(input_file, size)  # made there, after checking its free disk

    def evict(self, files):
        return self._call(evict, files)

    def prepare(self, w, params):
        return self._call(_on_worker_prepare, w.name, params)

    def spare_executor(self):
        return None  # a worker measures on its one claimed CPU

    def probe_table(self, name, timer):
        try:
            return self._call(_on_worker_probe, name, timer)
        except MachineGone as e:
            return {"status": Status.LOST, "error": str(e)}

    # execute.Executor
    def execute(self, job) -> Outcome:
        try:
            return self._call(_on_worker_execute, job)
        except MachineGone as e:
            return Outcome(Status.LOST, str(e))

    def execute_group(self, jobs, orders) -> list[Outcome]:
        try:
            return self._call(_on_worker_execute_group, jobs, orders)
        except MachineGone as e:
            return [Outcome(Status.LOST, str(e)) for _ in jobs]

    def _call(self, fn, *args):
        """Run fn(*args) on this machine; MachineGone when it died twice in it or left,
        Stopped when the scheduler is gone or the run was cancelled."""
        if self.cancelled:
            raise Stopped("cancelled")
        if self.stopped:
            raise Stopped(self.stopped)
        if self.gone:
            raise MachineGone(self.gone)
        try:
            fut = self.client.submit(fn, *args, resources=self.resources, pure=False,
                                     key=f"cpulab-{self.name}-{fn.__name__}-{uuid.uuid4().hex[:12]}")
        except Exception as e:
            raise self._stopped(e) from None
        with self._lock:
            self._pending.add(fut)
        absent_since = None
        try:
            while True:
                try:
                    return fut.result(timeout=POLL_S)
                except TimeoutError:
                    pass
                except KilledWorker:
                    raise MachineGone(f"worker {self.name} died in the middle of it, and again when retried") from None
                except FutureCancelledError as e:
                    raise (Stopped("cancelled") if self.cancelled else self._stopped(e)) from None
                except Exception as e:  # the task's own error, unless the scheduler went away under it
                    raise self._stopped(e) from None
                if self.client.status not in ("running", "connecting"):
                    raise self._stopped(None)
                if self.name in self._machines():
                    absent_since = None
                    continue
                absent_since = absent_since or time.monotonic()
                if time.monotonic() - absent_since > self.grace_s:
                    fut.cancel()
                    self.gone = f"worker {self.name} left the cluster (absent for {self.grace_s:.0f} s)"
                    raise MachineGone(self.gone)
        finally:
            with self._lock:
                self._pending.discard(fut)

    def _stopped(self, e: Exception | None) -> Exception:
        """Stopped if the scheduler is gone (remembered), else the error itself."""
        if self.client.status != "running":
            self.stopped = f"the scheduler is gone ({self.client.status})"
            return Stopped(self.stopped)
        return e

    def _machines(self) -> dict[str, str]:
        try:
            return cluster_machines(self.client)
        except Exception:  # the scheduler is reconnecting: the caller checks client.status
            return {self.name: ""}

    def cancel(self) -> None:
        """Drop everything queued for this machine and kill what it runs now."""
        self.cancelled = True
        with self._lock:
            pending = list(self._pending)
        if pending:
            self.client.cancel(pending)
        addr = cluster_machines(self.client).get(self.name)
        if addr:
            self.client.run(_on_worker_kill_measured, workers=[addr])


@dataclass
class MachineOutcome:
    name: str
    run_id: int | None = None
    error: BaseException | None = None


def run_on_cluster(plan: Plan, store: Store, client: Client, machines: list[str] | None = None,
                   progress_for=None, argv: list[str] | None = None,
                   grace_s: float = GRACE_S, label: str = "", origin: dict | None = None) -> int:
    """Run the plan on every named (default: every) cpulab worker at once; returns the
    cluster run's id, whose per-machine runs hold the results.  Raises Stopped when
    the scheduler went away and KeyboardInterrupt on Ctrl-C (after cancelling the
    cluster's work); what came home stays either way."""
    available = cluster_machines(client)
    if not available:
        raise ClusterError(f"no cpulab workers at {client.scheduler.address}: start 'cpulab worker ADDRESS'")
    names = machines or sorted(available)
    if missing := [m for m in names if m not in available]:
        raise ClusterError(f"--machines: no worker named {', '.join(missing)} (have: {', '.join(sorted(available))})")
    progress_for = progress_for or (lambda name: run.QuietProgress())
    # The client measures nothing: its fingerprint needs no compiler and no calibration.
    fp = machine.fingerprint()
    here = {"fingerprint": fp, "machine_id": machine.fingerprint_id(fp), "conditions": machine.conditions(),
            "timing": {}}
    record = plan.record("cluster", cluster=str(client.scheduler.address), machines=names)
    with recorded_run(store, record, plan.settings.timer, argv, identity=here, label=label, origin=origin) as parent:
        sites = {n: MachineSite(client, n, parent, grace_s) for n in names}
        outcomes = {n: MachineOutcome(n) for n in names}

        def drive(name: str) -> None:
            own = Store(store.path)  # sqlite connections stay in their thread
            try:
                outcomes[name].run_id = run.run_plan(plan, own, progress=progress_for(name), argv=argv,
                                                     site=sites[name], label=label, origin=origin)
            except BaseException as e:  # reported by the main thread
                outcomes[name].error = e

        threads = [threading.Thread(target=drive, args=(n,), name=f"cpulab-{n}", daemon=True) for n in names]
        for t in threads:
            t.start()
        try:
            for t in threads:
                while t.is_alive():
                    t.join(0.5)
        except KeyboardInterrupt:
            for s in sites.values():
                try:
                    s.cancel()
                except Exception:  # the scheduler may be gone too: nothing left to cancel
                    pass
            for t in threads:
                t.join(30)
            raise
        stopped = [o.error for o in outcomes.values() if isinstance(o.error, Stopped)]
        if stopped:
            raise stopped[0]
        for o in outcomes.values():
            if o.error is not None and not isinstance(o.error, MachineGone):
                raise o.error
            if isinstance(o.error, MachineGone):
                store.add_analysis(parent, "machine-lost", {"machine": o.name, "error": str(o.error)}, key=o.name)
    return parent

