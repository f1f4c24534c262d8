"""A run's lifecycle: the row recorded with this machine's identity (fingerprint,
conditions, timing calibration), marked done, interrupted or failed however it ends.
Ctrl-C, SIGTERM and SIGHUP stop a run alike (Interrupted, exit status 128+signal);
Stopped ends a run that cannot go on, keeping what it stored.
"""
from __future__ import annotations

import signal
import sys
import threading
from contextlib import contextmanager

from cpulab import machine, workloads
from cpulab.compile import artifacts
from cpulab.measure.execute.executor import Executor, LocalExecutor, calibrate_timing
from cpulab.plan import toolchain
from cpulab.spec.record import RunRecord
from cpulab.store.db import Store


class Interrupted(KeyboardInterrupt):
    """Ctrl-C, SIGTERM or SIGHUP: the run stops cleanly and what was measured stays.
    run_id is the run it stopped (None before one was recorded)."""

    def __init__(self, signum: int = signal.SIGINT, run_id: int | None = None):
        super().__init__(signal.Signals(signum).name)
        self.signum, self.run_id = signum, run_id

    @property
    def exit_status(self) -> int:
        return 128 + self.signum  # as a shell reports a process ended by that signal


STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


@contextmanager
def stop_signals_interrupt():
    """While the block runs, SIGTERM and SIGHUP raise Interrupted as Ctrl-C raises
    KeyboardInterrupt; the executor kills the process being measured when it is
    interrupted, so no child outlives the run.  Repeats are ignored until the block has
    ended, so the clean-up (one store write) is not cut short."""
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may handle signals; a caller's thread keeps its defaults
        return

    def stop(signum, frame):
        for s in STOP_SIGNALS:
            signal.signal(s, signal.SIG_IGN)
        raise Interrupted(signum)

    previous = {s: signal.signal(s, stop) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


class Stopped(Exception):
    """The run cannot go on (e.g. its cluster's scheduler is gone): what was stored stays,
    and the run is marked interrupted."""


def machine_identity(timer: str = "auto", executor: Executor | None = None) -> dict:
    """This machine's fingerprint, its id, its conditions now and its timing calibration."""
    # Calibrate with the sha256 O2 artifact: any artifact's harness will do.
    probe_art = artifacts.build_artifact(workloads.get("sha256"), toolchain.BUILTIN["O2"])
    timing = calibrate_timing(probe_art.path, timer, executor)
    fp = machine.fingerprint(timing)
    return {"fingerprint": fp, "machine_id": machine.fingerprint_id(fp), "conditions": machine.conditions(),
            "timing": timing}


@contextmanager
def recorded_run(store: Store, record: RunRecord, timer: str = "auto", argv: list[str] | None = None,
                 resume: int | None = None, executor: Executor | None = None, identity: dict | None = None,
                 label: str = "", origin: dict | None = None):
    """A run row with the machine's fingerprint and timing (`identity`, default: this
    machine's; with `parent` and `machine` it is one machine's part of a cluster run), or
    with resume a stopped run taken over; yields its id and marks it done, interrupted
    (Ctrl-C, SIGTERM, SIGHUP: Interrupted is raised with the run id; Stopped: what was
    stored stays) or failed."""
    with stop_signals_interrupt():
        if resume is None:
            ident = identity or machine_identity(timer, executor)
            run_id = store.start_run(ident["fingerprint"], ident["machine_id"], record, ident["conditions"],
                                     ident["timing"], argv if argv is not None else sys.argv, ident.get("parent"),
                                     ident.get("machine", ""), label, origin)
        else:
            store.claim_run(resume)
            run_id = resume
        status = "failed"
        try:
            yield run_id
            status = "done"
        except Stopped:
            status = "interrupted"
            raise
        except KeyboardInterrupt as e:
            status = "interrupted"
            raise Interrupted(getattr(e, "signum", signal.SIGINT), run_id) from None
        finally:
            if isinstance(executor, LocalExecutor):  # where it measured, and how long it waited for that CPU
                store.add_conditions(run_id, {"cpu": executor.cpu, "cpu_wait_s": round(executor.waited_s, 3)})
            store.finish_run(run_id, status)
