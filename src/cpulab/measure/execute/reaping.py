"""Waiting for a process the executor spawned, and reading what it left: its exit status,
its rusage and its output (executor.py)."""
from __future__ import annotations

import math
import os
import select
import signal
import threading

from cpulab.measure.execute.jobs import Finished


def wait4_within(pid: int, seconds: float, on_timeout) -> tuple[int, object]:
    """wait4 for pid, calling on_timeout (which kills it) if it outlives `seconds`: its
    pidfd polled until then, no thread started (a timer thread took 0.14 ms a process
    idle, longer while the other CPU's threads held the interpreter, the measuring CPU
    waiting).  Before Linux 5.3 (no pidfd), the timer."""
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return _wait4_timed(pid, seconds, on_timeout)
    try:
        poll = select.poll()
        poll.register(fd, select.POLLIN)
        if not poll.poll(math.ceil(seconds * 1000)):
            on_timeout()
    finally:
        os.close(fd)
    _, status, ru = os.wait4(pid, 0)
    return status, ru


def _wait4_timed(pid: int, seconds: float, on_timeout) -> tuple[int, object]:
    """wait4_within with a timer thread.  The timer is a daemon: an interrupt that lands
    before cancel() must not keep cpulab waiting for it at exit."""
    killer = threading.Timer(seconds, on_timeout)
    killer.daemon = True
    try:
        killer.start()
        _, status, ru = os.wait4(pid, 0)
    finally:
        killer.cancel()
    return status, ru


def output_file():
    """Where a process's stdout or stderr goes, read back once it is reaped: a file in
    memory (memfd), no file system's metadata to create and remove (15 us, where a
    temporary file on /tmp took 50)."""
    return open(os.memfd_create("cpulab-output"), "w+b")


def finished(status: int, ru, out, err, wall_s: float, timed_out: bool) -> Finished:
    """What a reaped process left: its exit, its output files read back, its rusage."""
    out.seek(0)
    err.seek(0)
    return Finished(os.waitstatus_to_exitcode(status), out.read().decode(errors="replace"),
                    err.read().decode(errors="replace"), wall_s, ru.ru_utime, ru.ru_stime, ru.ru_maxrss,
                    ru.ru_nvcsw, ru.ru_nivcsw, timed_out)


def kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
