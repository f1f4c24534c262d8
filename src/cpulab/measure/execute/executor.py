"""Executing one measured process: the one way cpulab runs anything it measures.

A *job* says what to run (argv, environment, timeout) and how to read what the process
left behind; an *executor* runs it and returns an Outcome.  Plan jobs, probes, the
alignment table, timing calibration, doctor, the bench scripts and the tests' helpers
all come through here, so every measured process is treated alike:

* a fresh process pinned to one CPU (the last one: CPU 0 takes most interrupts);
* an environment that is small and fixed, plus a pad of random length that moves the
  stack (layout is a variable: Mytkowicz et al., ASPLOS 2009);
* stdin from /dev/null, its own session (so Ctrl-C reaches cpulab, which kills it);
* killed with its whole process group at its timeout, or when cpulab is interrupted;
* reaped with wait4, so its wall time, CPU time, peak RSS and context switches are kept.

A *group* (`execute_group`) is several harness processes alive together on the one CPU,
taking their samples in turns (`--turns`): cpulab hands a token to one process at a
time, so sample j of every member is taken within milliseconds of the others and shares
the host's state (a co-tenant on the core, the clock) -- the time scale of the noise on
a shared host.  Each member keeps its own layout pad; a member that fails, fails alone.

LocalExecutor runs jobs here; a distributed executor implements the same `execute` and
`execute_group`.
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import random
import select
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from cpulab.measure.execute import cpulock
from cpulab.measure.execute.reaping import finished, kill_group, output_file, wait4_within
# What a job and an executor are, and the harness's job, live in jobs.py; imported from here too
from cpulab.measure.execute.jobs import (  # noqa: F401
    Executor, Finished, HarnessJob, Job, Outcome, parse_harness_output
)
from cpulab.model import Status

BASE_ENV = {"PATH": "/usr/bin:/bin", "LC_ALL": "C"}
MAX_LAYOUT_PAD = 4096
SHARED = "CPULAB_SHARED_PAGES"  # the run's directory for what its processes share (shared_pages)


_shared_lock = threading.Lock()  # shared_pages' users in this process (a cluster's machine runs are threads)
_shared_users = 0


@contextlib.contextmanager
def shared_pages(root: str = "/dev/shm"):
    """A directory on tmpfs, for the duration, where the run's processes keep what one of
    them made for the others (memlat's colour-balanced pages, kernels/memlat.c), named to
    each in its environment; removed with what it holds when its last user in this
    process ends (runs at once in threads share it), and a killed run's at the next
    run's start (the directory names its pid).  One named by a parent process is its."""
    global _shared_users
    with _shared_lock:
        inherited = os.environ.get(SHARED) and not _shared_users  # named by a parent process
        mine = os.path.isdir(root) and not inherited
        if mine and not _shared_users:
            for stale in Path(root).glob("cpulab-pages-*"):
                pid = stale.name.split("-")[2]
                if pid.isdigit() and not Path(f"/proc/{pid}").exists():
                    shutil.rmtree(stale, ignore_errors=True)
            os.environ[SHARED] = tempfile.mkdtemp(prefix=f"cpulab-pages-{os.getpid()}-", dir=root)
        _shared_users += mine
    try:
        yield
    finally:
        with _shared_lock:
            _shared_users -= mine
            if mine and not _shared_users:
                shutil.rmtree(os.environ.pop(SHARED), ignore_errors=True)


def fixed_env(job: Job) -> dict[str, str]:
    """A process's environment before its layout: small and fixed (the run's shared
    directory where there is one), and the job's own."""
    return {**BASE_ENV, **({SHARED: os.environ[SHARED]} if os.environ.get(SHARED) else {}), **job.env}


_tsc_hz: float | None = None  # this machine's TSC rate, as the first native harness here measured it


def with_known_tsc(job: Job) -> Job:
    """A native harness job given the TSC rate a process here measured before: it skips
    its own 30 ms spin to measure it again (a run's kernels are given the run's; seed 004's
    two tables were 144 processes of ~80 ms that each spun)."""
    if isinstance(job, HarnessJob) and not (job.emulator or job.calibrate_only or job.tsc_hz) and _tsc_hz:
        return dataclasses.replace(job, tsc_hz=_tsc_hz)
    return job


def _keep_tsc(job: Job, out: Outcome) -> None:
    global _tsc_hz
    hz = out.data.get("tsc_hz") if isinstance(job, HarnessJob) and not job.emulator and out.status == Status.OK else None
    if _tsc_hz is None and isinstance(hz, (int, float)) and math.isfinite(hz) and hz > 0:
        _tsc_hz = float(hz)


_claimed: int | None = None  # the CPU this cpulab process claimed (cpulock.claim_cpu), kept for its life
_claim = None


def claimed_cpu() -> int:
    """This process's CPU: the last allowed one no other cpulab claims (claimed once)."""
    global _claimed, _claim
    if _claimed is None:
        _claimed, _claim = cpulock.claim_cpu(os.sched_getaffinity(0))
    return _claimed


@contextlib.contextmanager
def on_cpu(cpu: int):
    """This thread pinned to one CPU for the block: a process or thread started in it
    keeps the pin for life (so a child is pinned without a preexec_fn, which would force
    a full fork of this process)."""
    own = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    try:
        yield
    finally:
        os.sched_setaffinity(0, own)


class LocalExecutor:
    """Runs each job here, pinned to one CPU, one at a time, holding the CPU's host-wide
    lock while it measures (cpulock): `waited_s` says how long it waited for it, and
    `on_wait` (if set) is told why."""

    def __init__(self, cpu: int | None = None, seed: int | None = None):
        self.cpu = claimed_cpu() if cpu is None else cpu
        self.rng = random.Random(seed)
        self.waited_s = 0.0
        self.on_wait = None
        self.claim = None  # the claim of a spare CPU (spare), held for this executor's life
        self.live: set[int] = set()  # process groups measuring now (kill_all)

    def spare(self) -> "LocalExecutor | None":
        """An executor on another allowed CPU that no other cpulab claims, or None."""
        others = os.sched_getaffinity(0) - {self.cpu}
        if not others:
            return None
        cpu, claim = cpulock.claim_cpu(others)
        if claim is None:
            return None
        ex = LocalExecutor(cpu, self.rng.randrange(2 ** 32))
        ex.claim, ex.on_wait = claim, self.on_wait
        return ex

    def kill_all(self) -> None:
        """Kill what this executor is measuring (from another thread: a run stopping)."""
        for pid in list(self.live):
            kill_group(pid)

    @contextlib.contextmanager
    def _holding_cpu(self):
        with cpulock.measuring(self.cpu, self.on_wait) as waited:
            self.waited_s += waited
            yield

    def _layout_env(self, pad: int) -> dict[str, str]:
        """What moves a process's stack (the pad) and its kernel's heap buffers (harness.c
        k_alloc) where its executable does not say: drawn anew for each process."""
        return {"CPULAB_LAYOUT_PAD": "x" * pad, "CPULAB_HEAP_SEED": str(self.rng.randrange(2 ** 63))}

    def execute(self, job: Job) -> Outcome:
        job = with_known_tsc(job)
        pad = self.rng.randrange(MAX_LAYOUT_PAD)
        env = {**fixed_env(job), **self._layout_env(pad)}
        argv = job.argv()
        try:
            with self._holding_cpu():
                done = self._spawn_and_reap(argv, env, job.timeout)
        except OSError as e:
            return Outcome(Status.ERROR, f"cannot execute {argv[0]}: {e.strerror or e}", layout_pad=pad)
        out = job.outcome(done)
        out.layout_pad, out.process = pad, done
        _keep_tsc(job, out)
        return out

    def _spawn_and_reap(self, argv: list[str], env: dict[str, str], timeout: float) -> Finished:
        timed_out = threading.Event()
        with output_file() as out, output_file() as err:
            with on_cpu(self.cpu):
                t0 = time.perf_counter()
                proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env,
                                        start_new_session=True)
            self.live.add(proc.pid)
            try:
                status, ru = wait4_within(proc.pid, timeout, lambda: (timed_out.set(), kill_group(proc.pid)))
            except BaseException:  # Ctrl-C, SIGTERM: the measured process must not outlive us
                kill_group(proc.pid)
                proc.wait()
                raise
            finally:
                self.live.discard(proc.pid)
            proc.returncode = os.waitstatus_to_exitcode(status)
            return finished(status, ru, out, err, time.perf_counter() - t0, timed_out.is_set())

    def execute_group(self, jobs: list[HarnessJob], orders: list[list[int]]) -> list[Outcome]:
        """Run the jobs' harnesses alive together on this executor's CPU, in turns: in turn
        j the token goes to the members in the order orders[j] (job indices), each taking
        one sample while the others sleep in read() (one named twice in a row takes two).
        Each job's `samples` must be the times `orders` names it.  A member gets its own
        timeout to be ready, then the group shares the longest one for its samples; a
        member that dies or hangs is killed and fails alone, the others go on."""
        with self._holding_cpu():
            return self._run_group(jobs, orders)

    def _run_group(self, jobs: list[HarnessJob], orders: list[list[int]]) -> list[Outcome]:
        pads = [self.rng.randrange(MAX_LAYOUT_PAD) for _ in jobs]
        members: list[_Member] = []
        try:
            for job, pad in zip(jobs, pads):
                env = {**fixed_env(job), **self._layout_env(pad)}
                m = _Member()
                members.append(m)  # listed before its process exists: an interrupt from here on kills it
                try:
                    m.spawn(job.argv(), env, self.cpu)
                    self.live.add(m.pid)
                except OSError as e:
                    m.error = f"cannot execute {job.argv()[0]}: {e.strerror or e}"
                # Its set-up and calibration run alone; one that hangs there is killed at its own timeout.
                m.wait_ready(time.perf_counter() + job.timeout)
            deadline = time.perf_counter() + max(j.timeout for j in jobs)
            last = None  # every member's first sample follows the others' set-up
            for order in orders:
                for i in order:
                    members[i].take_turn(deadline, after_other=last != i)
                    last = i
            for m in members:
                m.stop_turns()
            done = [m.reap(deadline) for m in members]
        except BaseException:  # Ctrl-C, SIGTERM: no member may outlive us
            for m in members:
                m.kill()
            for m in members:
                with contextlib.suppress(ChildProcessError):  # one reaped as the interrupt came
                    m.reap(time.perf_counter())
            raise
        finally:
            self.live.clear()
        outs = []
        for job, pad, m, fin in zip(jobs, pads, members, done):
            out = Outcome(Status.ERROR, m.error, layout_pad=pad) if fin is None else job.outcome(fin)
            if fin is not None and m.error and out.status == Status.OK:
                out = Outcome(Status.ERROR, m.error)  # it exited cleanly after missing its turn
            out.layout_pad, out.process = pad, fin
            outs.append(out)
        return outs


class _Member:
    """One process of a group: spawned with its token pipe on fd 3 and its hand-back
    pipe on fd 4 (posix_spawn's dup2: no preexec_fn), stdout and stderr to files."""

    def __init__(self):
        self.pid, self.error, self.timed_out = 0, "", False
        self.token_w = self.done_r = -1
        self.out = self.err = None
        self.t0 = time.perf_counter()

    def spawn(self, argv: list[str], env: dict[str, str], cpu: int) -> None:
        token_r, self.token_w = os.pipe()
        self.done_r, done_w = os.pipe()
        self.out, self.err = output_file(), output_file()
        try:
            with on_cpu(cpu), open(os.devnull, "rb") as null:
                self.pid = os.posix_spawn(argv[0], argv, env, setsid=True, file_actions=[
                    (os.POSIX_SPAWN_DUP2, null.fileno(), 0), (os.POSIX_SPAWN_DUP2, self.out.fileno(), 1),
                    (os.POSIX_SPAWN_DUP2, self.err.fileno(), 2), (os.POSIX_SPAWN_DUP2, token_r, 3),
                    (os.POSIX_SPAWN_DUP2, done_w, 4)])
        finally:
            os.close(token_r)  # the child's ends: its exit then reads as EOF here
            os.close(done_w)

    def take_turn(self, deadline: float, after_other: bool) -> None:
        """Hand over the token and wait until the member hands it back (one sample).  The
        token says whether another member ran since its last sample ('o': the harness
        re-warms) or none did ('s')."""
        if self.error or not self.pid:
            return
        try:
            os.write(self.token_w, b"o" if after_other else b"s")
        except BrokenPipeError:
            self.error = "exited before its turn"
            return
        self.wait_ready(deadline)

    def wait_ready(self, deadline: float) -> None:
        """Wait for the member's byte on fd 4: set up (after spawn) or a sample taken."""
        if self.error or not self.pid:
            return
        ready, _, _ = select.select([self.done_r], [], [], max(0.0, deadline - time.perf_counter()))
        if not ready:
            self.timed_out, self.error = True, "no sample within the group's timeout"
            self.kill()
        elif not os.read(self.done_r, 1):
            self.error = "exited before its turn"

    def stop_turns(self) -> None:
        """End of file on fd 3: the harness prints what it measured and exits."""
        if self.token_w >= 0:
            os.close(self.token_w)
            self.token_w = -1

    def reap(self, deadline: float) -> Finished | None:
        if not self.pid:
            return None
        status, ru = wait4_within(self.pid, max(0.0, deadline - time.perf_counter()), self._time_out)
        self.pid = 0  # reaped: kill() must not signal a recycled pid
        self.stop_turns()
        os.close(self.done_r)
        fin = finished(status, ru, self.out, self.err, time.perf_counter() - self.t0, self.timed_out)
        self.out.close()
        self.err.close()
        return fin

    def _time_out(self) -> None:
        self.timed_out = True
        self.kill()

    def kill(self) -> None:
        if self.pid:
            kill_group(self.pid)


_default: LocalExecutor | None = None


def default_executor() -> LocalExecutor:
    """The executor used when a caller names none: one per cpulab process."""
    global _default
    if _default is None:
        _default = LocalExecutor()
    return _default


def calibrate_timing(artifact_path: str, timer: str = "auto", executor: Executor | None = None) -> dict:
    """The harness's timer choice, TSC frequency and core/TSC ratio on this machine."""
    out = (executor or default_executor()).execute(HarnessJob(artifact_path, timer=timer, timeout=60,
                                                                calibrate_only=True))
    if out.status != Status.OK:
        return {"timer": "unknown", "error": out.error}
    return out.data
