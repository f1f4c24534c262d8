"""Timing whole processes: any command, hyperfine's job, with cpulab's statistics.

One timed run is a ProcessJob: the executor (execute.LocalExecutor, pinned, own session,
killed at its timeout) runs native/launch.c, which spawns the command and reports its
wall time and wait4 rusage.  The launcher exists because Python's subprocess spends
about a millisecond between fork and exec, 20% of a 5 ms command; the launcher's
posix_spawn costs what hyperfine's does.

Each result's samples are its processes: one sample per process, whose "ns" is the
process's wall time and whose work is one run, so analysis.summarise reports runs/s
(higher is faster) and real/user/sys per run, and compare/report/export work unchanged.
Before any timing every command runs once with its output checked; one that fails the
check is never timed.  Then warm-up runs, then interleaved rounds in random order.
"""
from __future__ import annotations

import json
import os
import random
import re
import shlex
import signal
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from cpulab.build import artifacts as build
from cpulab.measure.execute import Executor, Finished, LocalExecutor, Outcome
from cpulab.model import Status
from cpulab.measure.rounds import QuietProgress, Schedule, measure_rounds
from cpulab.store.db import Store

LAUNCH_SOURCE = build.NATIVE_DIR / "launch.c"
LAUNCH_MARK = "cpulab-launch "
UNIT = "runs"  # workloads.UNITS: one run of the command is one unit of work


class CommandError(Exception):
    """Bad input for a command or a program: one line naming it."""


def launcher() -> str:
    return str(build.build_tool(LAUNCH_SOURCE))


@dataclass(frozen=True)
class Check:
    """What a correct run looks like: its exit status, and a regex its stdout must match
    (re.search, multiline) when one is given."""
    exit: int | None = 0
    stdout_regex: str | None = None

    def failure(self, exit_code: int, stdout: str | None) -> str:
        if self.exit is not None and exit_code != self.exit:
            return f"exit status {exit_code}, expected {self.exit}"
        if self.stdout_regex is not None and stdout is not None \
                and not re.search(self.stdout_regex, stdout, re.MULTILINE):
            return f"stdout does not match {self.stdout_regex!r}: {stdout.strip()[:120]!r}"
        return ""


def compile_regex(text: str, where: str) -> None:
    try:
        re.compile(text)
    except re.error as e:
        raise CommandError(f"{where}: not a valid regular expression: {e}") from None


@dataclass
class ProcessJob:
    """One run of a command under the launcher.  With capture_stdout the command's
    output is kept (for the check); timed runs discard it, as hyperfine does."""
    command: list[str]
    launcher: str
    check: Check | None = Check()
    capture_stdout: bool = False
    timeout: float = 300.0
    env: dict[str, str] = field(default_factory=dict)

    def argv(self) -> list[str]:
        return [self.launcher, *([] if self.capture_stdout else ["--null-stdout"]), *self.command]

    def outcome(self, done: Finished) -> Outcome:
        if done.timed_out:
            return Outcome(Status.TIMEOUT, f"no exit within {done.wall_s:.0f}s")
        head, _, line = done.stderr.rstrip("\n").rpartition("\n")
        if not line.startswith(LAUNCH_MARK):
            return Outcome(Status.ERROR, f"launcher said nothing (exit {done.returncode}): {done.stderr[-200:]}")
        data = json.loads(line[len(LAUNCH_MARK):])
        if "spawn_errno" in data:
            return Outcome(Status.ERROR, f"cannot execute {self.command[0]}: {os.strerror(data['spawn_errno'])}")
        if "wall_s" not in data:
            return Outcome(Status.ERROR, f"launcher failed: {line}")
        if data["signal"]:
            detail = head.strip()[-200:]
            return Outcome(Status.CRASH, f"killed by {_signal_name(data['signal'])}" + (f": {detail}" if detail else ""),
                           data=data)
        why = self.check.failure(data["exit"], done.stdout if self.capture_stdout else None) if self.check else ""
        if why:
            detail = head.strip()[-200:]
            return Outcome(Status.VERIFY_FAILED, why + (f"; stderr: {detail}" if detail else ""), data=data)
        return Outcome(Status.OK, data=data)


def _signal_name(n: int) -> str:
    try:
        return signal.Signals(n).name
    except ValueError:
        return f"signal {n}"


def invocation_record(data: dict) -> dict:
    """A launcher report as the store's invocation: one sample, one unit of work."""
    return {"ns": [data["wall_s"] * 1e9], "cycles": [data.get("cycles")], "instructions": [data.get("instructions")],
            "work": 1, "reps": 1, "user_s": [data["user_s"]], "sys_s": [data["sys_s"]], "timer": "wait4",
            "notes": {}}


PROCESS_NOTES = ("max_rss_kb", "voluntary_switches", "involuntary_switches")


def process_notes(reports: list[dict]) -> dict:
    """Medians over a result's processes of what wait4 said besides time."""
    return {f"median_{k}": statistics.median(r[k] for r in reports) for k in PROCESS_NOTES} if reports else {}


# ---- page cache --------------------------------------------------------------------

def evict(files: list[str], drop_caches: bool = True) -> str:
    """Drop files from the page cache before a cold run; returns the method used:
    drop_caches (all clean pages, needs root) or posix_fadvise DONTNEED (these files)."""
    if drop_caches and os.geteuid() == 0:
        try:
            os.sync()
            Path("/proc/sys/vm/drop_caches").write_text("1\n")
            return "drop_caches"
        except OSError:
            pass  # a container's read-only /proc: fall back to the per-file advice
    for f in files:
        fd = os.open(f, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    return "posix_fadvise"


# ---- interleaved rounds ------------------------------------------------------------

@dataclass
class ProcessTarget:
    """One command at one parameter point, stored as one result.  point: the comparison
    it belongs to, (experiment, ...): its rounds and looks are that point's."""
    result_id: int
    label: str
    point: tuple
    command: list[str]
    check: Check | None = Check()
    prepare: list[list[str]] = field(default_factory=list)  # before each run, untimed
    cold_files: list[str] = field(default_factory=list)  # evicted before each run when cold
    env: dict[str, str] = field(default_factory=dict)
    live: bool = True
    evicted_with: str = ""  # how the page cache was emptied before its cold runs
    reports: list[dict] = field(default_factory=list)
    done: int = 0  # processes timed so far: the next round


@dataclass
class Rounds:
    """How whole processes are timed: `warmup` untimed rounds, then rounds as the
    schedule says (rounds.Schedule: the first look, budget and looks)."""
    warmup: int = 1
    timeout: float = 300.0
    cold: bool = False


def _run(executor: Executor, t: ProcessTarget, argv: list[str], check: Check | None, capture: bool,
         timeout: float) -> Outcome:
    return executor.execute(ProcessJob(argv, launcher(), check, capture, timeout, t.env))


def _fail(store: Store, t: ProcessTarget, status: str, error: str) -> None:
    t.live = False
    store.set_status(t.result_id, status, error)


def _prepare_and_run(store: Store, executor: Executor, t: ProcessTarget, how: Rounds) -> Outcome | None:
    """Prepare commands, eviction, then one run of the command; None if preparing failed."""
    for p in t.prepare:
        out = _run(executor, t, p, Check(), False, how.timeout)
        if out.status != Status.OK:
            _fail(store, t, Status.SETUP_FAILED, f"prepare {shlex.join(p)}: {out.status}: {out.error}")
            return None
    if how.cold and t.cold_files:
        t.evicted_with = evict(t.cold_files)
    return _run(executor, t, t.command, t.check, False, how.timeout)


def measure(store: Store, targets: list[ProcessTarget], how: Rounds, schedule: Schedule,
            executor: Executor | None = None, progress=None, rng: random.Random | None = None) -> None:
    """Check each target once (output kept), warm it up, then time it in the one rounds
    loop (rounds.measure_rounds): in each round a point's commands run back to back in
    random order, so A and B are timed seconds apart at most."""
    executor = executor or LocalExecutor()
    rng = rng or random.Random()
    progress = progress or QuietProgress()
    live = [t for t in targets if t.live]
    progress.phase("check", len(live))
    for t in live:
        out = _run(executor, t, t.command, t.check, True, how.timeout)
        if out.status != Status.OK:
            _fail(store, t, out.status, out.error)
        progress.advance(f"{t.label}: {out.status}")
    live = [t for t in live if t.live]
    progress.phase("warm-up", len(live) * how.warmup)
    for _ in range(how.warmup):
        for t in rng.sample(live, len(live)):
            if t.live:
                out = _prepare_and_run(store, executor, t, how)
                if out is not None and out.status != Status.OK:
                    _fail(store, t, out.status, out.error)
                progress.advance(f"warm-up  {t.label}")

    def run_round(k: tuple, order: list[ProcessTarget]) -> float:
        seconds = 0.0
        for t in order:
            out = _prepare_and_run(store, executor, t, how)
            if out is None:
                continue
            seconds += out.process.wall_s if out.process else 0.0
            if out.status != Status.OK:
                _fail(store, t, out.status, out.error)
            else:
                store.add_invocation(t.result_id, t.done, invocation_record(out.data), out.layout_pad)
                t.reports.append(out.data)
                t.done += 1
            progress.advance(f"round {t.done}  {t.label}" + (f"  {out.status}: {out.error[:60]}"
                                                              if out.status != Status.OK else ""))
        return seconds

    points: dict[tuple, list[ProcessTarget]] = {}
    for t in targets:
        if t.live:
            points.setdefault(t.point, []).append(t)
    measure_rounds(store, points, schedule, run_round, progress, rng)
    for t in targets:
        if t.reports:
            store.set_notes(t.result_id, {**process_notes(t.reports),
                                          **({"cache": f"cold ({t.evicted_with})"} if t.evicted_with else {})})


# ---- cpulab time -------------------------------------------------------------------

def fill_scan(text: str, point: dict[str, str]) -> str:
    """Replace {name} of each scanned parameter; other braces are left alone (awk, ${VAR})."""
    for k, v in point.items():
        text = text.replace("{" + k + "}", v)
    return text


def command_argv(text: str, shell: bool) -> list[str]:
    """Split like a shell would, never through one; with --shell, through sh -c."""
    if shell:
        return ["/bin/sh", "-c", text]
    try:
        argv = shlex.split(text)
    except ValueError as e:
        raise CommandError(f"command {text!r}: {e}") from None
    if not argv:
        raise CommandError("empty command")
    return argv


def list_values(values: str, name: str) -> list[str]:
    """-L name a,b,c: the values as written, none empty."""
    out = values.split(",")
    if not all(v.strip() for v in out):
        raise CommandError(f"-L {name}: {values!r} has an empty value")
    return out


def scan_values(lo: str, hi: str, name: str) -> list[str]:
    """-P name lo hi: the integers lo..hi inclusive."""
    try:
        a, b = int(lo), int(hi)
    except ValueError:
        raise CommandError(f"-P {name}: {lo!r} and {hi!r} must be integers") from None
    if b < a or b - a > 10000:
        raise CommandError(f"-P {name}: want lo <= hi and at most 10001 values")
    return [str(i) for i in range(a, b + 1)]


def scan_points(scans: dict[str, list[str]]) -> list[dict[str, str]]:
    import itertools
    keys = list(scans)
    return [dict(zip(keys, combo)) for combo in itertools.product(*(scans[k] for k in keys))] or [{}]


def command_labels(commands: list[str], names: list[str]) -> list[str]:
    if names and len(names) != len(commands):
        raise CommandError(f"--name given {len(names)} times for {len(commands)} commands")
    labels = list(names) or list(commands)
    if len(set(labels)) != len(labels):
        raise CommandError("two commands have the same name; give each a --name")
    return labels


def time_plan(commands: list[str], labels: list[str], scans: dict[str, list[str]], how: Rounds, shell: bool,
              cpu: int, runs: int, budget: float) -> dict:
    """The run's plan record: what `cpulab time` was asked, as summarise, the report and
    the rounds' schedule read it (processes compared by round: method paired)."""
    return {"name": "time", "runs": runs, "budget": budget, "method": "paired", "warmup_runs": how.warmup,
            "cpu": cpu, "shell": shell,
            "commands": dict(zip(labels, commands)), "scans": scans,
            "experiments": [{"name": "time", "title": "cpulab time", "workloads": ["time"], "variants": labels,
                             "baseline": labels[0]}]}


def time_targets(store: Store, run_id: int, commands: list[str], labels: list[str], scans: dict[str, list[str]],
                 shell: bool, prepare: str | None, check: Check | None) -> list[ProcessTarget]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/")}
    targets = []
    for point in scan_points(scans):
        for label, text in zip(labels, commands):
            rid = store.add_result(run_id, "time", label, point, UNIT, Status.PENDING, experiment="time")
            prep = [command_argv(fill_scan(prepare, point), shell)] if prepare else []
            targets.append(ProcessTarget(rid, label + (" " + " ".join(f"{k}={v}" for k, v in point.items())
                                                       if point else ""),
                                         ("time", json.dumps(point, sort_keys=True)),
                                         command_argv(fill_scan(text, point), shell), check, prep, env=env))
    return targets


def run_once(executor: Executor, argv: list[str], timeout: float, what: str) -> None:
    """A --setup or --cleanup command: must exit 0, is not timed."""
    out = executor.execute(ProcessJob(argv, launcher(), Check(), False, timeout,
                                      {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}))
    if out.status != Status.OK:
        raise CommandError(f"{what} {shlex.join(argv)}: {out.status}: {out.error}")


def time_commands(store: Store, commands: list[str], *, names: list[str] = (), scans: dict[str, list[str]] = None,
                  how: Rounds = Rounds(), runs: int = 10, budget: float = 0.0, shell: bool = False,
                  prepare: str | None = None,
                  setup: str | None = None, cleanup: str | None = None, check: Check | None = Check(),
                  cpu: int | None = None, seed: int | None = None, progress=None,
                  argv: list[str] | None = None) -> int:
    """`cpulab time`: every command at every scan point, checked, warmed up and timed in
    interleaved random rounds (runs at the first look; with a budget, more for undecided
    comparisons at the looks); the first command is the baseline.  Returns the run id.
    Bad input raises CommandError before anything runs."""
    from cpulab.measure.runner import recorded_run
    scans = scans or {}
    labels = command_labels(list(commands), list(names))
    for text in [*commands, *(t for t in (prepare, setup, cleanup) if t)]:
        for point in scan_points(scans):
            command_argv(fill_scan(text, point), shell)
    executor = LocalExecutor(cpu=cpu, seed=seed)
    plan = time_plan(list(commands), labels, scans, how, shell, executor.cpu, runs, budget)
    with recorded_run(store, plan, "clock", argv, executor=executor) as run_id:
        targets = time_targets(store, run_id, list(commands), labels, scans, shell, prepare, check)
        if setup:
            run_once(executor, command_argv(setup, shell), how.timeout, "--setup")
        try:
            measure(store, targets, how, Schedule.of_plan(plan), executor, progress, random.Random(seed))
        finally:
            if cleanup:
                run_once(executor, command_argv(cleanup, shell), how.timeout, "--cleanup")
    return run_id
