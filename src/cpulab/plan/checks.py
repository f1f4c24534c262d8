"""A plan (plan.Plan) checked before anything runs, for what its model's types cannot say
(plan/model.py checks those): every workload, variant, parameter and program known, each
baseline among its variants, the machine able to hold its working sets; one line naming
the file and the field when something is wrong (PlanError)."""
from __future__ import annotations

from pathlib import Path

from cpulab import machine, workloads
from cpulab.machine import events
from cpulab.params import ParamError, human_bytes
from cpulab.plan import kernels, toolchain
from cpulab.plan.model import PlanError
from cpulab.plan.programs import CommandError, check_plan_programs


def check(cond: bool, where: str, msg: str) -> None:
    if not cond:
        raise PlanError(f"{where}: {msg}")


def _check_unique(values: list[str], where: str) -> None:
    for i, v in enumerate(values):
        check(v not in values[:i], where, f"{v!r} is listed twice")


def validate(plan, where: str = "plan"):
    """Check the whole plan before anything is built, and make every parameter value
    canonical (cpulab.params); PlanError names the first problem in one line."""
    _check_unique(plan.probe_tables, f"{where}: probe_tables")
    _check_unique(plan.settings.events, f"{where}: events")
    try:
        events.resolve(plan.settings.events)
    except events.EventError as e:
        raise PlanError(f"{where}: events: {e}") from None
    try:  # first: the experiments name them
        kernels.register(plan.kernels, where)
    except kernels.KernelError as e:
        raise PlanError(str(e)) from None
    check(bool(plan.experiments) or bool(plan.probe_tables), where, "no experiments")
    for name in plan.custom_variants:
        check(name not in toolchain.BUILTIN, f"{where}: variants.{name}",
               "a built-in variant has this name; give yours another")
    _check_unique([e.name for e in plan.experiments], f"{where}: experiment names")
    for i, e in enumerate(plan.experiments):
        _check_experiment(plan, e, f"{where}: experiment {e.name or i!r}")
    _check_resources(plan, where)
    _validate_programs(plan, where)
    return plan


def _check_experiment(plan, e, at: str) -> None:
    check(bool(e.workloads), at, "no workloads")
    check(bool(e.variants), at, "no variants")
    _check_unique(e.workloads, f"{at}: workloads")
    _check_unique(e.variants, f"{at}: variants")
    for w in e.workloads:
        if w in plan.programs:
            continue  # checked by _validate_programs
        try:
            workloads.get(w)
        except KeyError as err:
            raise PlanError(f"{at}: workloads: {err.args[0]}") from None
    check(isinstance(e.params, dict), f"{at}: params", "expected a table per workload")
    for w, given in e.params.items():
        check(w in e.workloads, f"{at}: params", f"{w!r} is not one of this experiment's workloads")
        if w not in plan.programs:  # a program's inputs are checked by _validate_programs
            e.params[w] = canonical_params(workloads.get(w), given, f"{at}: params.{w}.")
    for v in e.variants:
        try:
            plan.variant(v)
        except KeyError as err:
            raise PlanError(f"{at}: variants: {err.args[0]}") from None
    check(e.baseline in e.variants, f"{at}: baseline",
           f"{e.baseline!r} is not one of its variants ({', '.join(e.variants)})")


def canonical_params(w: workloads.Workload, given, prefix: str) -> dict[str, list[str]]:
    """{'size': '1K..4K'} -> {'size': ['1024', '2048', '4096']}, each value parsed once
    against the workload's declaration of that parameter; errors start prefix + key."""
    check(isinstance(given, dict), prefix.rstrip(". "), "expected a table of parameter = values")
    out = {}
    for key, spec in given.items():
        check(key in w.params, f"{prefix}{key}", f"workload {w.name!r} has no parameter {key!r} "
                                                  f"(it has: {', '.join(sorted(w.params)) or 'none'})")
        try:
            out[key] = w.params[key].values(spec)
        except ParamError as err:
            raise PlanError(f"{prefix}{key}: {err}") from None
    return out


def _check_resources(plan, where: str) -> None:
    """Every point fits in available memory, and the data files the plan would write
    fit on their disk: a run that cannot fit fails here, not an hour in."""
    available = machine.mem_available()
    files: dict[Path, tuple[int, str]] = {}
    for e in plan.experiments:
        for name in (w for w in e.workloads if w not in plan.programs):
            w = workloads.get(name)
            for point in w.grid(plan.settings.grid, e.params.get(name)):
                at = f"{where}: experiment {e.name!r}: {name} {_point_label(w, point)}"
                need = w.memory(point) if w.memory else 0
                check(available is None or need <= available, at,
                       f"needs {human_bytes(need)} of memory, {human_bytes(available or 0)} is available")
                for path, size in (w.files(point) if w.files else {}).items():
                    files[path] = (size, at)
    for d in {p.parent for p in files}:
        in_d = {p: v for p, v in files.items() if p.parent == d}
        need, free = sum(size for size, _ in in_d.values()), machine.disk_free(d)
        _, at = max(in_d.values())
        check(need <= free, at, f"its data files need {human_bytes(need)} in {d}, {human_bytes(free)} is free there")


def _point_label(w: workloads.Workload, point: dict[str, str]) -> str:
    """The parameters of a point that are not at their defaults: 'size=1099511627776'."""
    return " ".join(f"{k}={v}" for k, v in point.items() if v != w.params[k].default) or "(defaults)"


def _validate_programs(plan, where: str) -> None:
    try:
        check_plan_programs(plan, where)
    except CommandError as e:
        raise PlanError(str(e)) from None
