"""`cpulab bisect GOOD BAD --plan PLAN`: the first commit at which the plan's programs got
slower than at GOOD (plan/bisect.py), each step a `cpulab ci GOOD..CANDIDATE` run."""
from __future__ import annotations

import sys

import click

from cpulab.analysis.gate import REGRESSION, gate
from cpulab.cli import complete
from cpulab.cli.common import FiniteRange, db_option, emit_json, fail, json_option, open_store, out
from cpulab.cli.flags import grouped, setting_options
from cpulab.cli.pipeline import carry_plan
from cpulab.model import Status, Verdict
from cpulab.plan import plan as plans
from cpulab.plan.bisect import BAD, GOOD, SKIP, UNDECIDED, Bisection, commits_between, subject
from cpulab.plan.ci import Range, ci_plan, repository_of
from cpulab.plan.origin import git_origin
from cpulab.plan.overrides import Overrides
from cpulab.report.tables import fmt_delta
from cpulab.spec.policy import LIMITS


@click.command()
@click.argument("good")
@click.argument("bad")
@click.option("--plan", "plan_file", required=True, help="The plan whose [program] tables (and [kernel] tables in git) are built at each commit.")
@grouped("chosen", "variant", "threshold")
@click.option("--variant", default=None, shell_complete=complete.variant_names,
              help="Build every commit with this variant (default: each experiment's baseline).")
@click.option("--threshold", type=FiniteRange(0.0, 1.0), default=None,
              help="A regression is a significant slowdown of at least this much (default: the plan's precision).")
@setting_options("processes", "budget", "events", "seed")
@grouped("output", "db", "as_json")
@db_option
@json_option
def bisect(good, bad, plan_file, chosen, settings, output):
    """The first commit from GOOD to BAD at which the plan's programs are slower than at
    GOOD, beyond the plan's precision.  Each step measures a candidate against GOOD's build
    in one run, in turns, with the usual looks; a candidate that fails to build is skipped
    and named.  Exit 0: found, or no regression from GOOD to BAD; 3: a step stayed
    undecided within the budget (reported, never guessed); 2: usage or input error."""
    try:
        p = Overrides(**settings).apply(plans.load(plan_file))
        repo = repository_of(p)
        search = Bisection(commits_between(repo, good, bad))
    except plans.PlanError as e:
        fail(str(e))
    threshold = p.settings.precision if chosen.threshold is None else chosen.threshold
    # A step is decided once its interval lies within +-threshold (no regression that
    # large): its looks stop there, not at a finer precision the search does not ask.
    low, high = LIMITS["precision"]
    p = p.given(precision=min(max(threshold, low), high))
    store = open_store(output.db)
    steps = []
    while (commit := search.next()) is not None:
        try:
            plan, _ = ci_plan(p, Range(good, commit), chosen.variant)
        except plans.PlanError as e:
            fail(str(e))
        summary, _ = carry_plan(plan, store, f"bisect {good}..{commit[:12]}", git_origin(repo))
        outcome, step = _step(summary, threshold)
        search.record(commit, outcome)
        steps.append({"commit": commit, "subject": subject(repo, commit), "outcome": outcome, "run_id": summary.run_id, **step})
        if not output.as_json:
            out.print(f"step {len(steps)}: {commit[:12]} {steps[-1]['subject'][:50]!r}: {outcome} "
                      f"{fmt_delta(step['ratio'], step['ci']) if step['ratio'] else ''}", soft_wrap=True)
    first = search.first_bad()
    # BAD first: unless it is a regression there is nothing to find; "no regression" only
    # where its interval excludes one of the threshold.  An undecided step, BAD's too,
    # stops the search and is said, unguessed
    undecided = any(s["outcome"] == UNDECIDED for s in steps) or (steps and steps[0]["outcome"] == SKIP)
    doc = {"good": good, "bad": bad, "steps": steps,
           "status": "undecided" if undecided else "found" if first else "none",
           "first_bad": next((s for s in steps if s["commit"] == first), None),
           "skipped": [s["commit"] for s in steps if s["outcome"] == SKIP],
           "maybe_first_bad": search.skipped_before(first) if first else []}
    if output.as_json:
        emit_json(doc)
    else:
        out.print(_conclusion(doc, good, bad), soft_wrap=True)
    sys.exit(3 if doc["status"] == "undecided" else 0)


def _step(summary, threshold: float) -> tuple[str, dict]:
    """A step's outcome from its run: a build of the candidate that failed is skipped; a
    significant regression of any program beyond the threshold is BAD; GOOD when every
    program's interval excludes a regression that large; else UNDECIDED.  With the
    slowest program's ratio and interval against GOOD."""
    heads = [r for r in summary.results if r.variant == "head"]
    compared = [c for c in summary.comparisons if (c.baseline, c.variant) == ("base", "head")]
    worst = min((c for c in compared if c.ratio), key=lambda c: c.ratio, default=None)
    figures = {"ratio": worst.ratio if worst else None, "ci": worst.ci if worst else None,
               "verdict": str(worst.verdict) if worst else None,
               "error": next((r.error for r in heads if r.status != Status.OK), "")}
    if any(r.status == Status.BUILD_FAILED for r in heads):
        return SKIP, figures
    if gate(summary.comparisons, threshold).status == REGRESSION:
        return BAD, figures
    excluded = compared and all(c.verdict == Verdict.IDENTICAL_CODE or (c.ci and c.ci[0] > 1 - threshold)
                                for c in compared)
    return (GOOD if excluded else UNDECIDED), figures


def _conclusion(doc: dict, good: str, bad: str) -> str:
    n = f"{len(doc['steps'])} step{'s' * (len(doc['steps']) != 1)}"
    skipped = f"; skipped (did not build): {', '.join(c[:12] for c in doc['skipped'])}" if doc["skipped"] else ""
    if doc["status"] == "undecided":
        s = next((s for s in doc["steps"] if s["outcome"] == UNDECIDED), doc["steps"][0])
        return (f"undecided at {s['commit'][:12]} ({s['subject']}): {fmt_delta(s['ratio'], s['ci'])} after its "
                f"budget; give --budget or --processes to decide it ({n}{skipped})")
    if doc["status"] == "none":
        s = doc["steps"][0]
        return f"no regression from {good} to {bad}: {fmt_delta(s['ratio'], s['ci'])} ({n}{skipped})"
    f = doc["first_bad"]
    maybe = f"; or one of the skipped {', '.join(c[:12] for c in doc['maybe_first_bad'])}" \
        if doc["maybe_first_bad"] else ""
    return (f"first slower commit: {f['commit'][:12]} ({f['subject']}): {fmt_delta(f['ratio'], f['ci'])} against "
            f"{good}{maybe} ({n}{skipped})")


COMMANDS = [bisect]
