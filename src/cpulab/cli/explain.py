"""`cpulab explain A B`: where two builds of a kernel or a program spend their time, and
that code side by side.
"""
from __future__ import annotations

import click

from cpulab import workloads
from cpulab.analysis.why import with_why
from cpulab.measure.explain import compare, profile
from cpulab.compile import artifacts
from cpulab.compile.programs import build_program
from cpulab.cli import complete
from cpulab.cli.common import emit_json, fail, json_option, out
from cpulab.cli.flags import grouped
from cpulab.measure.schedule.programs import point_argv
from cpulab.model import Status
from cpulab.plan import kernels, plan as plans
from cpulab.plan import toolchain
from cpulab.plan.checks import canonical_params
from cpulab.report.terminal import print_explain
from cpulab.machine import toolchains


@click.command("explain")
@click.argument("variant_a", shell_complete=complete.variant_names)
@click.argument("variant_b", shell_complete=complete.variant_names)
@grouped("what", "workload_name", "kernel_file", "param_flags", "program_name", "plan_file")
@click.option("-w", "--workload", "workload_name", default="sha256", show_default=True,
              shell_complete=complete.workload_names)
@click.option("-k", "--kernel", "kernel_file", default=None, type=click.Path(dir_okay=False),
              help="A kernel file of your own (cpulab.h), instead of --workload.")
@click.option("-p", "--param", "param_flags", multiple=True, help="key=value: the parameter point to profile at.")
@click.option("--program", "program_name", default=None,
              help="Explain two builds of this program of --plan instead of a kernel.")
@click.option("--plan", "plan_file", default=None,
              help="The plan that declares --program, or the [kernel] named by --workload and its variants.")
@click.option("--profile-code/--no-profile-code", default=True, show_default=True,
              help="Find the hot region from a sampled profile of both builds (else a static guess).")
@grouped("output", "rows", "as_json")
@click.option("--rows", type=int, default=60, show_default=True, help="Rows of the side-by-side listing to print.")
@json_option
def explain_(variant_a, variant_b, what, profile_code, output):
    """Where the kernel (or a program) spends its time under two variants, and that code
    side by side."""
    workload_name, param_flags, plan_file = what.workload_name, what.param_flags, what.plan_file
    if what.program_name:
        doc = explain_program(variant_a, variant_b, what.program_name, plan_file, param_flags, profile_code)
        if output.as_json:
            emit_json({"program": what.program_name, "a": variant_a, "b": variant_b, **doc})
        else:
            print_explain({**doc, "a_name": variant_a, "b_name": variant_b}, output.rows, out)
        return
    try:
        # a plan's [kernel] tables and [variants] are known by name; a kernel file by its own
        custom = plans.load(plan_file).custom_variants if plan_file else {}
        if what.kernel_file:
            workload_name, table = kernels.from_file(what.kernel_file)
            kernels.register({workload_name: table}, "--kernel")
        w = workloads.get(workload_name)
        va, vb = toolchain.get(variant_a, custom), toolchain.get(variant_b, custom)
        # canonical values, unknown parameters refused, as for a run
        given = canonical_params(w, plans.parse_param_flags(list(param_flags)), "--param ")
        params = {k: v[0] for k, v in given.items()}
    except kernels.KernelError as e:
        fail(str(e))
    except KeyError as e:
        fail(e.args[0])
    except plans.PlanError as e:
        fail(str(e))
    arts = []
    for v in (va, vb):
        if reason := toolchains.unavailable_reason(v):
            fail(f"variant {v.name}: skipped: {reason}")
        try:
            arts.append(artifacts.build_artifact(w, v))
        except artifacts.BuildError as e:
            fail(f"variant {v.name}: build failed: {e}")
    try:
        doc = with_why(compare.explain(arts[0].path, arts[1].path, {**w.defaults(), **params},
                                       profile.PROFILE_SECONDS if profile_code else 0, (variant_a, variant_b)))
    except RuntimeError as e:
        fail(str(e))
    if output.as_json:
        emit_json({"workload": workload_name, "a": variant_a, "b": variant_b, **doc})
        return
    print_explain({**doc, "a_name": variant_a, "b_name": variant_b}, output.rows, out)


def explain_program(variant_a: str, variant_b: str, name: str, plan_file: str | None, param_flags,
                    profile_code: bool) -> dict:
    """Build the plan's program under both variants and explain them (one-line errors)."""
    if not plan_file:
        fail("--program needs --plan FILE (the plan that declares it)")
    try:
        p_plan = plans.load(plan_file)
        p = p_plan.programs[name]
        va, vb = p_plan.variant(variant_a), p_plan.variant(variant_b)
        given = plans.parse_param_flags(list(param_flags))
        if unknown := sorted(set(given) - set(p.inputs)):
            fail(f"--param {unknown[0]}: program {name} has no input of that name (it has: {', '.join(p.inputs) or 'none'})")
        point = {**p.grid()[0], **given}
    except plans.PlanError as e:
        fail(str(e))
    except KeyError as e:
        fail(e.args[0] if e.args and " " in str(e.args[0]) else
             f"--program {name}: not in {plan_file} (it has: {', '.join(p_plan.programs) or 'none'})")
    runs = []
    for v in (va, vb):
        b = build_program(p, v)
        if b.status != Status.OK or not b.exe:
            fail(f"program {name} under {v.name}: {b.error or 'its run template names no built file'}")
        runs.append((b.exe, point_argv(p, v, b, point)[1]))
    try:
        return with_why(compare.explain_programs(*runs[0], *runs[1], (variant_a, variant_b), profile_code))
    except RuntimeError as e:
        fail(str(e))


COMMANDS = [explain_]
