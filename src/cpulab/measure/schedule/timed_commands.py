"""`cpulab time`: any whole commands, hyperfine's job, with cpulab's rounds and statistics.

Every command at every scan point (-P/-L) is one result whose samples are its processes
(measure.processes).  The commands are checked once, warmed up, then timed in the one
rounds loop; the first command is the baseline.  Bad input raises CommandError before
anything runs.
"""
from __future__ import annotations

import os
import shlex
import shutil

from cpulab import time_split
from cpulab.measure import randomness
from cpulab.measure.execute.executor import Executor, LocalExecutor
from cpulab.measure.execute.processes import UNIT, ProcessJob, launcher
from cpulab.measure.schedule.process_rounds import ProcessTarget, Rounds, measure
from cpulab.spec.schedule import Schedule
from cpulab.measure.schedule.session import recorded_run
from cpulab.model import Status, params_key
from cpulab.plan.programs import Check, CommandError
from cpulab.spec.record import RunRecord
from cpulab.spec.settings import DEFAULTS, Settings
from cpulab.store.db import Store


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


# `cpulab time`'s settings before its flags: its processes are compared by round, and `same`
# within 0.5%: whole processes are cheap to repeat, and a 0.5% change within 1% was called
# `same` in 6 of 20 tries (bench/time_power.py --more 0.5).
TIME_DEFAULTS = DEFAULTS.given(method="paired", precision=0.005)


def time_record(commands: list[str], labels: list[str], scans: dict[str, list[str]], how: Rounds, shell: bool,
                cpu: int, settings: Settings = TIME_DEFAULTS) -> RunRecord:
    """The run's record: what `cpulab time` was asked, as the rounds' schedule, summarise
    and the report read it."""
    return RunRecord.make("time", {
        "name": "time", **settings.model_dump(include={"processes", "budget", "precision", "method", "metric", "seed",
                                                       "timeout"}), "warmup_runs": how.warmup, "cpu": cpu, "shell": shell,
        "commands": dict(zip(labels, commands)), "scans": scans,
        "experiments": [{"name": "time", "title": "cpulab time", "workloads": ["time"], "variants": labels,
                         "baseline": labels[0], "first_look": settings.processes}]}, settings)


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
                                         ("time", params_key(point)),
                                         command_argv(fill_scan(text, point), shell), check, prep, env=env))
    return targets


def run_once(executor: Executor, argv: list[str], timeout: float, what: str) -> None:
    """A --setup or --cleanup command: must exit 0, is not timed."""
    out = executor.execute(ProcessJob(argv, launcher(), Check(), False, timeout,
                                      {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}))
    if out.status != Status.OK:
        raise CommandError(f"{what} {shlex.join(argv)}: {out.status}: {out.error}")


def time_commands(store: Store, commands: list[str], settings: Settings = TIME_DEFAULTS, *, names: list[str] = (),
                  scans: dict[str, list[str]] = None, how: Rounds = Rounds(), shell: bool = False,
                  prepare: str | None = None, setup: str | None = None, cleanup: str | None = None,
                  check: Check | None = Check(), cpu: int | None = None, progress=None,
                  argv: list[str] | None = None, label: str = "", origin: dict | None = None) -> int:
    """`cpulab time`: every command at every scan point, checked, warmed up and timed in
    interleaved random rounds (processes of each at the first look; with a budget, more for undecided
    comparisons at the looks); the first command is the baseline.  Returns the run id.
    As `cpulab run` decides by default: without processes, the first look is the fewest rounds
    at which the comparisons can be significant; with processes and no budget, exactly that
    many (hyperfine's fixed count: plan/overrides.py).  Bad input raises CommandError
    before anything runs."""
    scans = scans or {}
    labels = command_labels(list(commands), list(names))
    for text in [*commands, *(t for t in (prepare, setup, cleanup) if t)]:
        for point in scan_points(scans):
            program = command_argv(fill_scan(text, point), shell)[0]
            if not shell and not shutil.which(program):
                raise CommandError(f"{program}: no such command (not in PATH, or not executable)")
    family = (len(labels) - 1) * len(scan_points(scans))  # no processes given: the first look that can decide
    settings = settings.given(seed=randomness.new_seed() if settings.seed is None else settings.seed,
                              processes=settings.processes or settings.policy.first_look(family))
    executor = LocalExecutor(cpu=cpu, seed=randomness.derived(settings.seed, "executor"))
    record = time_record(list(commands), labels, scans, how, shell, executor.cpu, settings)
    with recorded_run(store, record, "clock", argv, executor=executor, label=label, origin=origin) as run_id:
        targets = time_targets(store, run_id, list(commands), labels, scans, shell, prepare, check)
        if setup:
            run_once(executor, command_argv(setup, shell), how.timeout, "--setup")
        split = time_split.TimeSplit()
        try:
            schedule = Schedule({"time": settings.processes}, {"time": settings.budget}, record.policy,
                                {"time": labels[0]})
            with split.timing(time_split.RUN, "programs"):  # the whole processes, checks and warm-ups
                measure(store, targets, how, schedule, executor, progress, randomness.stream(settings.seed, "rounds"))
        finally:
            store.add_conditions(run_id, {"time_split": split.to_dict()})  # stopped too: what it took so far
            if cleanup:
                run_once(executor, command_argv(cleanup, shell), how.timeout, "--cleanup")
    return run_id
