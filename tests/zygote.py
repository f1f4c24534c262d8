"""The tests' `cpulab` processes, forked from one that has imported the command line.

Each of the ~190 commands the tests run would otherwise pay Python's start-up and
cpulab's imports, about 0.5 s of CPU, and a run another 0.6 s importing matplotlib and
scipy.special.  A child forked from the zygote is still a process of its own, started as
`python -m cpulab.cli ARGS` is (runpy, so click names the program alike), with the
environment and standard streams it was given, its own signals, and its exit status,
`atexit` handlers and streams flushed as at Python's exit (exit_now).  What it cannot
take from the request is what Python reads at start-up (PYTHONHASHSEED,
PYTHONPYCACHEPREFIX, ...): a test that needs those starts a real process.

    python tests/zygote.py   # reads requests (JSON lines) on stdin; answers a child's
                             # pid, then its exit status, a line each on stdout
"""
from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import threading
import traceback
from pathlib import Path


def serve() -> None:
    """Import the command line once; fork a child for each request and wait for it."""
    import cpulab.cli.main  # noqa: F401 -- what every child would import first
    import matplotlib
    matplotlib.use("Agg")  # as report/plots.py sets it up before pyplot, when a command draws
    import matplotlib.pyplot  # noqa: F401 -- what a run imports to draw its report (0.3 s)
    import scipy.special  # noqa: F401 -- and to test its comparisons (the t distribution: 0.3 s)
    answers = sys.stdout.buffer
    for line in sys.stdin.buffer:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            run_command(request)  # never returns: the child exits as the command does
        answers.write(f"{pid}\n".encode())
        answers.flush()
        _, status = os.waitpid(pid, 0)
        answers.write(f"{os.waitstatus_to_exitcode(status)}\n".encode())
        answers.flush()


def run_command(request: dict) -> None:
    """In the child: its streams, environment and argv, then `python -m cpulab.cli`."""
    import runpy
    streams = (os.open(os.devnull, os.O_RDONLY),
               *(os.open(request[k], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644) for k in ("out", "err")))
    for target, fd in enumerate(streams):
        os.dup2(fd, target)
        os.close(fd)
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = ["-m", *request["args"]]
    try:
        runpy.run_module("cpulab.cli", run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 0 if e.code is None else print(e.code, file=sys.stderr) or 1
    except BaseException:
        traceback.print_exc()
        code = 1
    exit_now(code)


def exit_now(code: int) -> None:
    """What Python's exit does that a command could see (its other threads joined, atexit
    and weakref finalizers run, streams flushed), then the exit itself: the interpreter's
    teardown would touch every object the zygote imported, copying each page it shares
    with the zygote (0.3 s a child)."""
    for t in threading.enumerate():
        if t is not threading.main_thread() and not t.daemon:
            t.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code)


class Zygote:
    """The test process's side: one zygote, started on first use, one command at a time."""

    def __init__(self, env: dict[str, str]):
        self.env, self.proc, self.lock = env, None, threading.Lock()

    def run(self, args: list[str], env: dict[str, str], timeout: float, folder: Path) -> subprocess.CompletedProcess:
        """As subprocess.run(capture_output=True, text=True, timeout=timeout) would."""
        out, err = folder / "stdout", folder / "stderr"
        with self.lock:
            if self.proc is None or self.proc.poll() is not None:
                self.proc = subprocess.Popen([sys.executable, __file__], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                             env=self.env, bufsize=0)  # unbuffered: select sees every answer
            self.proc.stdin.write((json.dumps({"args": args, "env": env, "out": str(out), "err": str(err)}) + "\n").encode())
            self.proc.stdin.flush()
            pid = int(self._answer(None))
            try:
                code = int(self._answer(timeout))
            except subprocess.TimeoutExpired:
                os.kill(pid, signal.SIGKILL)
                self._answer(None)
                raise subprocess.TimeoutExpired(["cpulab", *args], timeout, out.read_text(), err.read_text()) from None
        return subprocess.CompletedProcess(["cpulab", *args], code, out.read_text(), err.read_text())

    def _answer(self, timeout: float | None) -> str:
        if not select.select([self.proc.stdout], [], [], timeout)[0]:
            raise subprocess.TimeoutExpired("zygote", timeout)
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the zygote ended (status {self.proc.wait()})")
        return line.decode()

    def close(self) -> None:
        if self.proc is not None:
            self.proc.stdin.close()
            self.proc.wait()


if __name__ == "__main__":
    serve()
