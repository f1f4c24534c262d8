"""`cpulab ci BASE..HEAD`: a CI gate that builds a plan's programs and kernels at both commits,
measures them in one run, prints a Markdown summary a CI job can post, and exits with a
documented status (analysis/gate.py)."""
from __future__ import annotations

import os

import click

from cpulab.analysis.gate import INSTRUCTION_THRESHOLD, UNDECIDED, gate
from cpulab.cli import complete
from cpulab.cli.common import FiniteRange, db_option, fail, open_store
from cpulab.cli.flags import grouped, setting_options
from cpulab.cli.pipeline import carry_plan
from cpulab.machine import events
from cpulab.plan import plan as plans
from cpulab.spec.policy import METRICS
from cpulab.plan.ci import ci_plan, parse_range, repository_of
from cpulab.plan.origin import git_origin
from cpulab.plan.overrides import Overrides
from cpulab.report.tables import to_markdown
from cpulab.report.views import gate_table


@click.command()
@click.argument("refs", metavar="BASE..HEAD")
@click.option("--plan", "plan_file", required=True, help="The plan whose [program] tables (and [kernel] tables in git) are built at both commits.")
@click.option("--variant", default=None, shell_complete=complete.variant_names, help="Build both with this variant (default: each experiment's baseline).")
@grouped("gate_by", "metric", "threshold", "fail_on_unclear", "markdown_file")
@click.option("--metric", default="time", show_default=True,
              help="What decides: the time (a significant slowdown), the instructions per unit counted "
                   "under valgrind (exact, for noisy runners; a proxy for time, both are shown), each run's "
                   "peak memory (a significantly larger peak RSS), or a named event counted around each "
                   "sample (branch-misses, page-faults, task-clock: significantly more of it).")
@click.option("--threshold", type=FiniteRange(0.0, 1.0), default=None,
              help="A regression is a significant slowdown of at least this much (default: the plan's precision), "
                   f"or with --metric instructions this much more instructions (default {INSTRUCTION_THRESHOLD:.1%}).")
@click.option("--fail-on-unclear", is_flag=True, help="Exit 3 when a comparison is still undecided within the budget.")
@click.option("--markdown", "markdown_file", type=click.Path(dir_okay=False), default=None,
              help="Write the Markdown summary here too (default: also $GITHUB_STEP_SUMMARY when set).")
@setting_options("processes", "budget", "events", "seed")
@db_option
def ci(refs, plan_file, variant, gate_by, settings, db):
    """Is HEAD slower than BASE?  Both commits of the plan's programs and kernels, measured in
    one run in turns.  Exit 0: no regression; 1: a significant regression beyond --threshold; 2: usage or
    input error; 3: undecided within the budget, or without an instruction count with --metric
    instructions (only with --fail-on-unclear)."""
    try:
        r = parse_range(refs)
        p = plans.load(plan_file)
        metric = gate_by.metric
        event = metric not in METRICS
        if event:
            events.resolve([metric])
        counted = settings.pop("events") or p.settings.events  # the metric's event among them
        p = Overrides(**settings, instructions=metric == "instructions" or None,
                      metric=metric if metric == "memory" else None,
                      events=[*counted, metric] if event and metric not in counted else counted).apply(p)
        p, commits = ci_plan(p, r, variant)
    except (plans.PlanError, events.EventError) as e:
        fail(f"--metric: {e}" if isinstance(e, events.EventError) else str(e))
    summary, _ = carry_plan(p, open_store(db), f"ci {refs}", git_origin(repository_of(p)))
    threshold = gate_by.threshold
    if threshold is None:
        threshold = INSTRUCTION_THRESHOLD if metric == "instructions" else p.settings.precision
    outcome = gate(summary.comparisons, threshold, gate_by.fail_on_unclear, metric)
    text = markdown(refs, commits, summary, outcome, metric)
    click.echo(text)
    for path in filter(None, (gate_by.markdown_file, os.environ.get("GITHUB_STEP_SUMMARY"))):
        with open(path, "a") as f:
            f.write(text)
    raise SystemExit(outcome.status)


def markdown(refs: str, commits: dict, summary, outcome, metric: str = "time") -> str:
    verdict = (f"**{len(outcome.regressions)} regression(s)**" if outcome.regressions else
               f"no regression; {len(outcome.undecided)} undecided" + (" (exit 3)" if outcome.status == UNDECIDED else "")
               if outcome.undecided else "no regression")
    shas = ", ".join(f"{name} {c['base'][:10]}..{c['head'][:10]}" for name, c in commits.items())
    verdict += {"instructions": " by instruction count", "memory": " by peak memory", "time": ""}.get(
        metric, f" by {metric}")
    return "\n".join([f"## cpulab ci {refs}", "", f"{verdict} (exit {outcome.status}); {shas}; cpulab run "
                      f"{summary.run_id}", "", to_markdown(gate_table(summary, outcome.regressions, metric)), ""])


COMMANDS = [ci]
