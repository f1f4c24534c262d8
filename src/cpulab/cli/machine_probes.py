"""This machine and its core: `list` (workloads, variants, what builds here), `doctor`,
`probe` (cycles of a few instructions) and `align` (load latency by alignment).
"""
from __future__ import annotations

import click
from rich.markup import escape
from rich.table import Table

from cpulab import machine, workloads
from cpulab.compile import artifacts
from cpulab.cli.pipeline import carry
from cpulab.cli.common import emit_json, fail, json_option, open_store, out
from cpulab.cli.flags import grouped, output_options, setting_options
from cpulab.measure import probes
from cpulab.measure.schedule import runner
from cpulab.measure.execute.executor import calibrate_timing
from cpulab.measure.execute.processes import events_here
from cpulab.plan import plan as plans
from cpulab.plan import toolchain
from cpulab.params import cache_label
from cpulab.spec.record import RunRecord
from cpulab.spec.settings import DEFAULTS
from cpulab.report.terminal import print_analysis
from cpulab.machine import toolchains
from cpulab.cli.kinds import VIEWS


@click.command("list")
@json_option
def list_(as_json):
    """Workloads, variants, and which variants can be built here."""
    wl = [{"name": w.name, "unit": w.unit, "description": w.description, "params": w.defaults(),
           "accepts": {k: p.describe() for k, p in w.params.items()},
           "quick": w.quick, "full": w.full, "requires": w.requires} for w in workloads.registry().values()]
    vs = []
    for v in map(toolchains.resolved, toolchain.BUILTIN.values()):
        why = toolchains.unavailable_reason(v)
        vs.append({**v.as_dict(), "available": not why, "reason": why,
                   "compiler_version": toolchains.compiler_version(v.compiler) if not why else ""})
    plan_names = sorted(f.stem for f in plans.PLAN_DIR.glob("*.toml"))
    if as_json:
        emit_json({"workloads": wl, "variants": vs, "plans": plan_names})
        return
    t = Table(title="workloads", title_justify="left")
    for c in ("name", "unit", "parameters: default (accepted)", "description"):
        t.add_column(c)
    for w in wl:
        t.add_row(w["name"], w["unit"], escape("\n".join(f"{k}={v} ({w['accepts'][k]})" for k, v in w["params"].items())),
                  escape(w["description"]))
    out.print(t)
    t = Table(title="variants", title_justify="left")
    for c in ("name", "here", "compiler", "flags", "description"):
        t.add_column(c)
    for v in vs:
        flags = " ".join(v["abi_flags"] + v["cflags"] + (["| link:"] + v["ldflags"] if v["ldflags"] else []))
        here = "[green]yes[/]" if v["available"] else f"[yellow]skipped: {escape(v['reason'])}[/]"
        t.add_row(escape(v["name"]), here, v["compiler"], escape(flags), escape(v["description"]))
    out.print(t)
    out.print(f"built-in plans: {', '.join(plan_names)}")


@click.command()
@json_option
def doctor(as_json):
    """Timers, counters, toolchains, governor and load: what would make results noisy."""
    art = artifacts.build_artifact(workloads.get("sha256"), toolchain.BUILTIN["O2"])
    timing = calibrate_timing(art.path)
    fp, cond = machine.fingerprint(timing), machine.conditions()
    tools = {}
    for name in ("gcc", "clang", "musl-gcc", "llvm-mca", "llvm-objdump", "objdump", "perf",
                 "arm-linux-gnueabi-gcc", "arm-linux-gnueabihf-gcc", "aarch64-linux-gnu-gcc", "qemu-arm", "qemu-aarch64"):
        tools[name] = toolchains.compiler_version(name) or None
    counting = events_here(DOCTOR_EVENTS)
    doc = {"machine": fp, "conditions": cond, "timing": timing, "tools": tools, "events": counting,
           "warnings": machine.warnings(cond, fp)}
    if as_json:
        emit_json(doc)
        return
    t = Table(title="cpulab doctor", title_justify="left", show_header=False)
    t.add_column(style="bold")
    t.add_column()
    t.add_row("cpu", f"{fp['cpu_model']} ({fp['cpus']} CPUs, {fp['arch']})")
    t.add_row("caches", ", ".join(cache_label(c) for c in fp["caches"]) or "unknown")
    t.add_row("timer", f"{timing.get('timer')}" + (f" (counters: {timing.get('perf_error')})"
                                                     if timing.get("perf_error") else " (hardware counters)"))
    if timing.get("tsc_hz"):
        t.add_row("TSC", f"{timing['tsc_hz'] / 1e9:.3f} GHz; core/TSC {timing['core_per_tsc']:.3f} "
                         f"(core about {timing['tsc_hz'] * timing['core_per_tsc'] / 1e9:.2f} GHz under load)")
    for k, v in cond.items():
        t.add_row(k, str(v))
    for k, v in tools.items():
        t.add_row(k, escape(v) if v else "[yellow]not found[/]")
    t.add_row("events", ", ".join(n for n, why in counting.items() if not why) or "[yellow]none[/]")
    for why in dict.fromkeys(counting.values()):
        if why:
            t.add_row("", f"[yellow]not counted:[/] {', '.join(n for n, w in counting.items() if w == why)}: "
                          f"{escape(why)}")
    out.print(t)
    for w in doc["warnings"]:
        out.print(f"[yellow]warning:[/] {w}")


# What `doctor` tries: the software events, perf's generic hardware and cache events, top-down.
DOCTOR_EVENTS = ["task-clock", "page-faults", "context-switches", "cpu-migrations", "cycles", "instructions",
                 "branches", "branch-misses", "cache-references", "cache-misses", "L1-dcache-load-misses",
                 "LLC-load-misses", "dTLB-load-misses", "topdown"]


@click.command()
@click.argument("body", required=False)
@grouped("loop", "att", "as_loop", "counter", "table", "mca", "repeats")
@click.option("--att", is_flag=True, help="The body is AT&T syntax (default: Intel).")
@click.option("--as-loop", is_flag=True, help="The body is its own loop: it decrements --counter and jumps back with 'jnz LOOP'.")
@click.option("--counter", default="rcx", show_default=True, help="The loop counter register with --as-loop.")
@click.option("--table", type=click.Choice(["seed004"]), default=None, help="Reproduce seed 004's table 2 instead.")
@click.option("--mca", is_flag=True, help="Put llvm-mca's prediction for the same loop beside the measurement.")
@click.option("--repeats", type=click.IntRange(1, 100), default=5, show_default=True, help="Runs of each length (N and 2N).")
@setting_options("timer")
@output_options
def probe(body, loop, settings, output):
    """Cycles per iteration, IPC and ns of a few x86-64 instructions, e.g. 'imul rax, rbx'.

    The body is unrolled in an aligned loop and run at two lengths (N and 2N) in several
    processes; the median run per execution, less the call's fixed cost, is the headline.
    Registers: rsi points at a zeroed 4 KiB buffer whose first qword holds its own
    address; rax = rsi (so 'mov rax, [rax]' chases in L1)."""
    table, mca, as_loop = loop.table, loop.mca, loop.as_loop
    syntax, timer = "att" if loop.att else "intel", settings["timer"] or DEFAULTS.timer
    if (body is None) == (table is None):
        fail("give an instruction sequence or --table seed004 (one of them)")
    store = open_store(output.db)

    def measure() -> int:
        with runner.recorded_run(store, RunRecord.make("probe", {"name": "probe", "body": body, "table": table}),
                                 timer) as run_id:
            try:
                if table:
                    doc = {"run_id": run_id, "rows": probes.seed004_table(mca=mca, repeats=loop.repeats, timer=timer)}
                else:
                    doc = {"run_id": run_id, **probes.measure_loop(body, syntax, repeats=loop.repeats, timer=timer,
                                                                   as_loop=as_loop, counter=loop.counter)}
                    if mca:
                        doc["mca"] = probes.mca_predict(body, syntax, as_loop=as_loop)
            except probes.ProbeError as e:
                fail(str(e).replace("\n", "; "))
            store.add_analysis(run_id, "probe", doc, key=table or body)
        return run_id

    summary, _ = carry(store, measure)
    doc = next(a.data for a in summary.analyses if a.kind == "probe")
    if output.as_json:
        emit_json(doc)
        return
    print_analysis("probe", doc, out, VIEWS)


@click.command()
@click.option("--full", is_flag=True, help="Every offset 0..63 (default: a few per group).")
@setting_options("timer")
@output_options
def align(full, settings, output):
    """Latency of a dependent load by alignment (seed 004 table 3): L1 hit and L2 hit,
    4- and 8-byte loads, grouped as the seed groups them."""
    store, timer = open_store(output.db), settings["timer"] or DEFAULTS.timer

    def measure() -> int:
        with runner.recorded_run(store, RunRecord.make("align", {"name": "align", "full": full}), timer) as run_id:
            store.add_analysis(run_id, "align", {"run_id": run_id, **probes.align_table(full=full, timer=timer)})
        return run_id

    summary, _ = carry(store, measure)
    doc = next(a.data for a in summary.analyses if a.kind == "align")
    if output.as_json:
        emit_json(doc)
        return
    print_analysis("align", doc, out, VIEWS)


COMMANDS = [list_, doctor, probe, align]
