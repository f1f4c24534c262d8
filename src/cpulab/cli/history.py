"""`cpulab history WORKLOAD`: one result's estimate over stored runs, in commit order, with
the change points found in it."""
from __future__ import annotations

from pathlib import Path

import click

from cpulab import workloads
from cpulab.analysis import history as histories
from cpulab.cli import complete
from cpulab.cli.common import emit_json, fail, open_store, out
from cpulab.cli.flags import grouped, output_options
from cpulab.params import ParamError
from cpulab.plan import plan as plans
from cpulab.report import plots
from cpulab.report.tables import to_rich
from cpulab.report.analysis_views import history_tables


@click.command()
@click.argument("workload", shell_complete=complete.workload_names)
@grouped("only", "variant", "param_flags", "experiment", "machine", "label")
@click.option("-v", "--variant", default=None, shell_complete=complete.variant_names, help="Only this variant (default: each its own series).")
@click.option("-p", "--param", "param_flags", multiple=True, help="key=value: only this parameter point.")
@click.option("-e", "--experiment", default=None, help="Only this experiment (default: each its own series).")
@click.option("--machine", default=None, help="Only runs on this machine (fingerprint id prefix, worker name, CPU model).")
@click.option("--label", default=None, help="Only runs with this label.")
@click.option("--plot", type=click.Path(dir_okay=False), default=None,
              help="Write the first series' plot here (.png, else SVG).")
@output_options
def history(workload, only, plot, output):
    """A workload's estimate and interval per stored run, in commit order (else start order),
    and where it changed (PELT over the whole history, penalised by its own noise)."""
    try:
        params = canonical(workload, plans.parse_param_flags(list(only.param_flags)))
    except (plans.PlanError, ParamError) as e:
        fail(str(e))
    found = [histories.with_changes(s) for s in histories.series(
        open_store(output.db, create=False), workload, only.variant, params, only.machine, only.label,
        experiment=only.experiment)]
    if not found:
        fail(f"no history of {workload}: fewer than {histories.MIN_RUNS} stored runs measured it"
             + (" with those filters" if any(vars(only).values()) else ""))
    if plot:
        png = plot.lower().endswith(".png")
        data = plots.history(found[0], png=png)
        Path(plot).write_bytes(data) if png else Path(plot).write_text(data)
    if output.as_json:
        emit_json(found)
        return
    for t in history_tables(found):
        out.print(to_rich(t))


def canonical(workload: str, given: dict[str, str]) -> dict[str, str]:
    """Parameter values as runs store them (size=64K is 65536), for a known workload."""
    w = workloads.registry().get(workload)
    return {k: w.params[k].parse(v) if w and k in w.params else v for k, v in given.items()}


COMMANDS = [history]
