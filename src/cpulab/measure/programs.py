"""A plan's `[program]` tables measured: each (program, variant) built (build.programs),
each input point's files made (build.inputs), then checked and timed as whole processes
(measure.processes) in the one rounds loop with the plan's looks and budget.
"""
from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

from cpulab.build.inputs import random_file
from cpulab.build.programs import ProgramBuild, build_program, run_argv, template_values
from cpulab.measure import processes
from cpulab.measure.processes import ProcessTarget, Rounds
from cpulab.measure.rounds import Schedule
from cpulab.model import Status
from cpulab.plan import toolchain
from cpulab.plan.programs import Program, parse_size
from cpulab.plan.toolchain import Variant


def point_argv(p: Program, v: Variant, b: ProgramBuild, point: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """The input files of one parameter point (made once, cached) and the run's argv."""
    files = {k: str(random_file(parse_size(s, k))) for k, s in point.items()}
    return files, run_argv(p, {**template_values(v, Path(b.tree)), **files})


def run_in_plan(plan, store, run_id: int, executor, progress, rng: random.Random) -> None:
    """Build every (program, variant) of the plan, then check and time their runs,
    one experiment at a time, in the one rounds loop with the plan's looks and budget."""
    schedule = Schedule.of_plan(plan.as_dict())
    for e in plan.experiments:
        names = [w for w in e.workloads if w in plan.programs]
        if not names:
            continue
        targets = _program_targets(plan, e, names, store, run_id, progress)
        how = Rounds(warmup=1, timeout=plan.timeout, cold=plan.cold)
        processes.measure(store, targets, how, schedule, executor, progress, rng)


def _program_targets(plan, e, names: list[str], store, run_id: int, progress) -> list[ProcessTarget]:
    targets = []
    progress.phase("build", len(names) * len(e.variants))
    for pname, vname in itertools.product(names, e.variants):
        p, v = plan.programs[pname], plan.variant(vname)
        cv = toolchain.compiler_version(v.compiler)
        store.add_variant(run_id, v.as_dict(), cv)
        status, error, b = Status.PENDING, "", None
        if why := toolchain.unavailable_reason(v):
            status, error = Status.SKIPPED, why
        else:
            b = build_program(p, v)
            store.add_analysis(run_id, "program-build", {"status": b.status, "commands": b.commands, "log": b.log,
                                                         "tree": b.tree, "error": b.error}, key=f"{pname}/{vname}")
            if b.status == Status.OK:
                store.add_artifact(b.artifact(cv))
            else:
                status, error = b.status, b.error
        for point in p.grid(e.params.get(pname)):
            rid = store.add_result(run_id, pname, vname, point, processes.UNIT, status, error,
                                   b.hash if b and b.status == Status.OK else None, experiment=e.name)
            if status != Status.PENDING:
                continue
            files, argv = point_argv(p, v, b, point)
            targets.append(ProcessTarget(rid, f"{pname} {vname} {' '.join(point.values())}",
                                         (e.name, pname, json.dumps(point, sort_keys=True)), argv, p.check,
                                         cold_files=list(files.values()), env=dict(v.env)))
        progress.advance(f"{pname} / {vname}" + (f": {status}" if status != Status.PENDING else ""))
    return targets
