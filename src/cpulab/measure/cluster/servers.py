"""The cluster's servers and what runs on a worker: the dask scheduler, a cpulab worker
(one nanny, one single-threaded worker, fingerprinted before it joins), the functions the
client sends a worker (identity, builds, data files, measured processes, probes, kill),
and the TLS both ends share."""
from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import os
import signal
import socket

from distributed import Nanny, Scheduler, Security, get_worker
from distributed.diagnostics.plugin import WorkerPlugin

from cpulab import workloads
from cpulab.compile import artifacts
from cpulab.compile.artifacts import Built
from cpulab.compile.programs import built_here, unpacked_source
from cpulab.measure import probes
from cpulab.measure.execute import executor as execute
from cpulab.measure.schedule import targets
from cpulab.measure.schedule import runner as run
from cpulab.measure.execute.executor import Outcome
from cpulab.measure.execute.processes import ProcessJob, launcher
from cpulab.model import Status
from cpulab.plan import toolchain
from cpulab.plan.programs import Program


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
    return targets.build_variant(w, v).as_dict()


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


