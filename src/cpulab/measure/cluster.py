"""One plan on many machines: a dask.distributed cluster, results home to one store.

A cpulab worker is one dask worker process with one thread and the resources `bench=1`
and `machine-NAME=1`.  Every task cpulab sends asks for `machine-NAME`, so a machine
runs one thing at a time (a build, a data file, one measured process) and never two
measurements at once, while machines run in parallel.

The client drives each machine from its own thread through runner.run_plan with a
MachineSite: the plan's rounds are exactly a local run's, but the fingerprint, the
builds (from the worker's own copy of the sources, with its own compilers, through its
own artifact cache), the data files, the measured processes and the probe tables all
happen on that worker.  Each result comes home as soon as it is measured and is stored
in the client's store under a per-machine run tied to that machine's fingerprint.

Faults: a worker that dies in the middle of a task is restarted by its nanny and the
task is retried once (the scheduler's allowed-failures is 1); a second death, or the
machine gone for longer than its grace period, records the job `lost`.  The scheduler
gone stops the run (run.Stopped).  A worker runs whatever plan it is sent: never let
anyone untrusted reach the scheduler.
"""
from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
import os
import signal
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from distributed import Client, KilledWorker, Nanny, Scheduler, Security, get_worker
from distributed.client import FutureCancelledError
from distributed.diagnostics.plugin import WorkerPlugin

from cpulab import machine, workloads
from cpulab.compile import artifacts
from cpulab.compile.artifacts import Built
from cpulab.compile.inputs import input_file
from cpulab.compile.programs import ProgramBuild, built_here, packed_source, source_hash, unpacked_source
from cpulab.measure import execute, probes
from cpulab.measure import runner as run
from cpulab.measure.execute import Outcome
from cpulab.measure.processes import ProcessJob, evict, launcher
from cpulab.measure.session import recorded_run
from cpulab.model import Status
from cpulab.plan import toolchain
from cpulab.plan.plan import Plan
from cpulab.plan.programs import Program
from cpulab.store.db import Store

POLL_S = 1.0  # how often a waiting client thread checks that its machine and scheduler are still there
GRACE_S = 60.0  # a machine absent this long has left: its remaining jobs are lost
CONNECT_TIMEOUT_S = 15


class ClusterError(Exception):
    """The cluster cannot be used as asked (unreachable, no such machine, partial TLS)."""


def security(ca: str | None, cert: str | None, key: str | None) -> Security | None:
    """TLS for every connection when all three files are given; none when none is."""
    given = [x for x in (ca, cert, key) if x]
    if not given:
        return None
    if len(given) != 3:
        raise ClusterError("TLS needs all of --tls-ca, --tls-cert and --tls-key")
    for f in (ca, cert, key):
        if not os.path.isfile(f):
            raise ClusterError(f"TLS file {f}: no such file")
    return Security(tls_ca_file=ca, tls_client_cert=cert, tls_client_key=key, tls_scheduler_cert=cert,
                    tls_scheduler_key=key, tls_worker_cert=cert, tls_worker_key=key, require_encryption=True)


# ---- the scheduler and the worker -------------------------------------------------------

def serve_scheduler(host: str, port: int, sec: Security | None, on_ready=print) -> None:
    """Run a dask scheduler until interrupted; a task whose worker dies is retried once."""
    async def serve():
        async with Scheduler(host=host, port=port, security=sec, dashboard=False, dashboard_address="127.0.0.1:0",
                             allowed_failures=1,
                             protocol="tls" if sec else "tcp") as s:
            on_ready(s.address)
            await s.finished()
    asyncio.run(serve())


class MachineIdentity(WorkerPlugin):
    """Carries the fingerprint the worker took when it started, for every task to read."""
    name = "cpulab-machine"

    def __init__(self, worker_name: str, identity: dict):
        self.worker_name, self.identity = worker_name, identity


def serve_worker(address: str, name: str, cpu: int | None, sec: Security | None, on_ready=print) -> None:
    """One nanny with one single-threaded worker named `name`; measured processes run on
    `cpu` (default: the last one).  The machine is fingerprinted before it joins."""
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})  # the worker and everything it starts inherit this
    ident = run.machine_identity()
    on_ready(name, ident)

    async def serve():
        async with Nanny(address, name=name, nthreads=1, resources={"bench": 1, f"machine-{name}": 1},
                         security=sec, memory_limit=0, dashboard=False,
                         plugins={MachineIdentity(name, ident)}) as n:
            await n.finished()
    asyncio.run(serve())


def default_name() -> str:
    return socket.gethostname()


# ---- what runs on a worker --------------------------------------------------------------

def source_digest(w: workloads.Workload) -> str:
    """Of the harness and the workload's sources: a worker with other sources builds other code."""
    h = hashlib.sha256()
    for f in [*artifacts.HARNESS_SOURCES, *w.sources()]:
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def _on_worker_identity(timer: str) -> dict:
    plugin = get_worker().plugins.get(MachineIdentity.name)
    if plugin is not None and timer == "auto":
        return plugin.identity
    return run.machine_identity(timer)


def _on_worker_build(wname: str, digest: str, v: toolchain.Variant) -> dict:
    try:
        w = workloads.get(wname)
    except KeyError:
        return Built(Status.SKIPPED, f"workload {wname} is not in this machine's cpulab").as_dict()
    if source_digest(w) != digest:
        return Built(Status.SKIPPED, f"this machine's cpulab has other sources for {wname}: install the same version").as_dict()
    return run.build_variant(w, v).as_dict()


def _on_worker_build_program(p: Program, v: toolchain.Variant, digest: str, source: bytes) -> dict:
    """Build a program from the source the client sent, with this machine's compilers,
    into this machine's cache: the paths in the build are this machine's."""
    here = dataclasses.replace(p, source=str(unpacked_source(source, digest)), sources={})
    return built_here(here, v).as_dict()


def _on_worker_prepare(wname: str, params: dict[str, str]) -> dict[str, str]:
    return run.LocalSite(execute.default_executor()).prepare(workloads.get(wname), params)


def _on_worker_execute(job: execute.Job) -> Outcome:
    if isinstance(job, ProcessJob):  # the client named its own launcher: run this machine's
        job = dataclasses.replace(job, launcher=launcher())
    return execute.default_executor().execute(job)


def _on_worker_execute_group(jobs: list[execute.HarnessJob], orders: list[list[int]]) -> list[Outcome]:
    return execute.default_executor().execute_group(jobs, orders)


def _on_worker_probe(name: str, timer: str):
    return probes.get(name).measure(timer=timer, executor=execute.default_executor())


def _on_worker_kill_measured() -> int:
    """Ctrl-C on the client: kill what this worker is measuring or building now (each
    measured process leads its own process group)."""
    import psutil
    killed = 0
    for child in psutil.Process().children():
        try:
            os.killpg(child.pid, signal.SIGKILL)
            killed += 1
        except (ProcessLookupError, PermissionError):
            pass
    return killed


# ---- the client side --------------------------------------------------------------------

def connect(address: str, sec: Security | None) -> Client:
    """A client of the scheduler at `address`.  Its logging is silenced: a lost
    connection is reported once, as run.Stopped, not as dask's reconnect tracebacks."""
    for name in ("distributed.client", "distributed.comm", "distributed.core", "distributed.utils"):
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
    """run.Site on one cluster worker: every step is a task pinned to machine-NAME."""

    def __init__(self, client: Client, name: str, parent: int, grace_s: float = GRACE_S):
        self.client, self.name, self.parent, self.grace_s = client, name, parent, grace_s
        self.resources = {"bench": 1, f"machine-{name}": 1}
        self.executor = self
        self.gone = ""  # why this machine is no longer used
        self.cancelled = False
        self._pending: set = set()
        self._lock = threading.Lock()

    # run.Site
    def identity(self, timer):
        """The worker's fingerprint, and the cluster run this machine's run belongs to."""
        return {**self._call(_on_worker_identity, timer), "parent": self.parent, "machine": self.name}

    def compiler_version(self, v):
        return self._call(toolchain.compiler_version, v.compiler)

    def build(self, w, v):
        try:
            return Built.from_dict(self._call(_on_worker_build, w.name, source_digest(w), v))
        except MachineGone as e:
            return Built(Status.LOST, str(e))

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
        run.Stopped when the scheduler is gone or the run was cancelled."""
        if self.cancelled:
            raise run.Stopped("cancelled")
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
                    raise (run.Stopped("cancelled") if self.cancelled else self._stopped(e)) from None
                except Exception as e:  # the task's own error, unless the scheduler went away under it
                    raise self._stopped(e) from None
                if self.client.status not in ("running", "connecting"):
                    raise run.Stopped(f"the scheduler is gone ({self.client.status})")
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

    def _stopped(self, e: Exception) -> Exception:
        """run.Stopped if the scheduler is gone, else the error itself."""
        if self.client.status != "running":
            return run.Stopped(f"the scheduler is gone ({self.client.status})")
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
                   progress_for=None, argv: list[str] | None = None, seed: int | None = None,
                   grace_s: float = GRACE_S, label: str = "", origin: dict | None = None) -> int:
    """Run the plan on every named (default: every) cpulab worker at once; returns the
    cluster run's id, whose per-machine runs hold the results.  Raises run.Stopped when
    the scheduler went away and KeyboardInterrupt on Ctrl-C (after cancelling the
    cluster's work); what came home stays either way."""
    available = cluster_machines(client)
    if not available:
        raise ClusterError(f"no cpulab workers at {client.scheduler.address}: start 'cpulab worker ADDRESS'")
    names = machines or sorted(available)
    if missing := [m for m in names if m not in available]:
        raise ClusterError(f"--machines: no worker named {', '.join(missing)} (have: {', '.join(sorted(available))})")
    progress_for = progress_for or (lambda name: run.QuietProgress())
    doc = {**plan.as_dict(), "cluster": str(client.scheduler.address), "machines": names}
    # The client measures nothing: its fingerprint needs no compiler and no calibration.
    fp = machine.fingerprint()
    here = {"fingerprint": fp, "machine_id": machine.fingerprint_id(fp), "conditions": machine.conditions(),
            "timing": {}}
    with recorded_run(store, doc, plan.timer, argv, identity=here, label=label, origin=origin) as parent:
        sites = {n: MachineSite(client, n, parent, grace_s) for n in names}
        outcomes = {n: MachineOutcome(n) for n in names}

        def drive(name: str) -> None:
            own = Store(store.path)  # sqlite connections stay in their thread
            try:
                outcomes[name].run_id = run.run_plan(plan, own, progress=progress_for(name), argv=argv,
                                                     seed=seed, site=sites[name], label=label, origin=origin)
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
        stopped = [o.error for o in outcomes.values() if isinstance(o.error, run.Stopped)]
        if stopped:
            raise stopped[0]
        for o in outcomes.values():
            if o.error is not None and not isinstance(o.error, MachineGone):
                raise o.error
            if isinstance(o.error, MachineGone):
                store.add_analysis(parent, "machine-lost", {"machine": o.name, "error": str(o.error)}, key=o.name)
    return parent

