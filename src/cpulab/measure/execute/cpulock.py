"""One CPU, one measurement: host-wide locks per CPU, so that two cpulab processes (two
runs, a run and `cpulab time`, a run and a cluster worker) never measure on one CPU at once.

Each CPU N has two lock files in a directory every user of the host shares
(/run/lock/cpulab, else the temp directory; $CPULAB_LOCK_DIR overrides):

* `cpuN.claim`, held (flock, exclusive) by one executor for its whole life: a new
  executor picks an allowed CPU nobody claims, one no other program keeps busy first,
  then the last first (CPU 0 takes most interrupts), so concurrent runs spread over the
  CPUs and none measures beside a busy loop while a quiet CPU is free;
* `cpuN`, held while a process (or a group) is measured on CPU N.  When every allowed
  CPU is claimed, an executor shares one and waits for this lock before each process,
  saying so: the processes of two runs then take turns, never overlap.

flock locks are released by the kernel when their holder dies, so a killed cpulab
leaves no stale lock behind.
"""
from __future__ import annotations

import fcntl
import os
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Callable


def lock_dir() -> Path:
    if d := os.environ.get("CPULAB_LOCK_DIR"):
        path = Path(d)
    elif os.access("/run/lock", os.W_OK):
        path = Path("/run/lock/cpulab")
    else:
        path = Path(tempfile.gettempdir()) / "cpulab-locks"
    path.mkdir(parents=True, exist_ok=True)
    try:
        path.chmod(0o1777)  # every user's cpulab locks here (sticky, like /tmp)
    except PermissionError:
        pass  # made by another user, who opened it already
    return path


def _open(name: str) -> IO:
    path = lock_dir() / name
    f = open(path, "a+")
    try:
        os.chmod(path, 0o666)
    except PermissionError:
        pass
    return f


def runnable_by_cpu() -> dict[int, int]:
    """Processes other than this one that are running or waiting to run, by the CPU each
    last ran on (/proc/PID/stat: state R, field 39): a CPU a busy program holds has one.
    A snapshot (a few ms), not an average: it tells a CPU a program holds from one it
    passes through."""
    counts: dict[int, int] = {}
    me = str(os.getpid())
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or entry.name == me:
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
            fields = stat[stat.rindex(b")") + 2:].split()  # from field 3 (state); the name may hold spaces
            if fields[0] == b"R":
                counts[int(fields[36])] = counts.get(int(fields[36]), 0) + 1
        except (OSError, ValueError, IndexError):
            continue  # ended meanwhile, or not readable
    return counts


def claim_cpu(allowed: set[int]) -> tuple[int, IO | None]:
    """(cpu, claim): an allowed CPU no other executor claims, with its claim held until
    the file is closed: one where no other program runs, the last first; when all are
    claimed, the last one, shared (claim None)."""
    busy = runnable_by_cpu() if len(allowed) > 1 else {}
    for cpu in sorted(allowed, key=lambda c: (busy.get(c, 0) > 0, -c)):
        f = _open(f"cpu{cpu}.claim")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return cpu, f
        except BlockingIOError:
            f.close()
    return max(allowed), None


@contextmanager
def measuring(cpu: int, on_wait: Callable[[str], None] | None = None):
    """Hold CPU `cpu` for one measurement; yields the seconds spent waiting for it."""
    with _open(f"cpu{cpu}") as f:
        waited = 0.0
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if on_wait:
                on_wait(f"waiting for CPU {cpu}: another cpulab is measuring on it")
            t0 = time.monotonic()
            fcntl.flock(f, fcntl.LOCK_EX)
            waited = time.monotonic() - t0
        try:
            yield waited
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
