"""A plan's `[program]` tables measured: each (program, variant) built (build.programs),
each input point's files made (build.inputs), then checked and timed as whole processes
(measure.processes) in the one rounds loop with the plan's looks and budget.
"""
from __future__ import annotations

import itertools
import random
from pathlib import Path

from cpulab.compile import inputs
from cpulab.compile.programs import ProgramBuild, run_argv, template_values
from cpulab.compile.relink import Relink
from cpulab.machine import events
from cpulab.measure.execute.processes import UNIT
from cpulab.measure.schedule import process_rounds
from cpulab.measure.execute.executor import LocalExecutor
from cpulab.measure.schedule.process_rounds import ProcessTarget, Rounds
from cpulab.spec.schedule import Schedule
from cpulab.model import Status, params_key
from cpulab.plan.programs import CommandError, Program, parse_size
from cpulab.plan.toolchain import Variant


def point_argv(p: Program, v: Variant, b: ProgramBuild, point: dict[str, str],
               input_file=inputs.input_file) -> tuple[dict[str, str], list[str]]:
    """The input files of one parameter point (made once, cached, where the program runs:
    `input_file(size)`) and the run's argv."""
    files = {k: input_file(parse_size(s, k)) for k, s in point.items()}
    return files, run_argv(p, {**template_values(v, Path(b.tree)), **files})


def run_in_plan(plan, schedule: Schedule, store, run_id: int, site, progress,
                rng: random.Random) -> list[ProcessTarget]:
    """Build every (program, variant) of the plan at the site (this machine, or a worker
    that gets the source and builds, makes its inputs and runs it there), then check and
    time their runs, one experiment at a time, in the one rounds loop with the plan's
    looks and budget (the run's schedule).  Returns the timed commands."""
    ran = []
    for e in plan.experiments:
        names = [w for w in e.workloads if w in plan.programs]
        if not names:
            continue
        targets = _program_targets(plan, e, names, store, run_id, site, progress)
        how = Rounds(warmup=1, timeout=plan.settings.timeout, cold=plan.settings.cold,
                     events=events.spec_of(plan.settings.events))
        process_rounds.measure(store, targets, how, schedule, site.executor, progress, rng, evict=site.evict)
        ran += targets
    return ran


def _program_targets(plan, e, names: list[str], store, run_id: int, site, progress) -> list[ProcessTarget]:
    targets = []
    progress.phase("build", len(names) * len(e.variants))
    for pname, vname in itertools.product(names, e.variants):
        p, v = plan.programs[pname], plan.variant(vname)
        b = site.build_program(p, v)
        store.add_variant(run_id, v.as_dict(), b.compiler_version)
        if b.status != Status.SKIPPED:
            store.add_analysis(run_id, "program-build", {"status": b.status, "commands": b.commands, "log": b.log,
                                                         "tree": b.tree, "error": b.error}, key=f"{pname}/{vname}")
        if b.status == Status.OK:
            store.add_artifact(b.artifact())
        status, error = (Status.PENDING, "") if b.status == Status.OK else (b.status, b.error)
        for point in p.grid(e.params.get(pname)):
            rid = store.add_result(run_id, pname, vname, point, UNIT, status, error,
                                   b.hash if b.status == Status.OK else None, experiment=e.name)
            if status != Status.PENDING:
                continue
            try:
                files, argv = point_argv(p, v, b, point, site.input_file)
            except CommandError as err:  # that machine has no room for the inputs
                store.set_status(rid, Status.SETUP_FAILED, str(err))
                continue
            # relinked each round where its objects are here (a cluster's worker keeps its own)
            here = isinstance(site.executor, LocalExecutor) and b.link is not None
            targets.append(ProcessTarget(rid, f"{pname} {vname} {' '.join(point.values())}",
                                         (e.name, pname, params_key(point)), argv, p.check,
                                         cold_files=list(files.values()), env=dict(v.env),
                                         relink=Relink(b.exe, b.hash, b.link) if here else None,
                                         one_layout=b.one_layout or ("" if here else "one layout: built elsewhere")))
        progress.advance(f"{pname} / {vname}" + (f": {status}" if status != Status.PENDING else ""))
    return targets
