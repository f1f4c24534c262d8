"""Exports of a run's Summary: JSON (everything: the `--json` document), CSV and Markdown
(the results and comparisons tables of report/views.py), and the formats dashboards and
other tools read:

* `github-action-benchmark`: its custom format, a list of {name, unit, value, range,
  extra}; values are rates, so the action's tool is `customBiggerIsBetter`;
* `bencher`: Bencher Metric Format, {benchmark: {measure: {value, lower_value,
  upper_value}}}, the measure named by the rate's unit, the bounds the median's interval;
* `hyperfine`: hyperfine's `--export-json` document, for runs of whole commands
  (`cpulab time`, programs), so scripts written for hyperfine read them.
"""
from __future__ import annotations

import json
import statistics

from cpulab.model import Result, Summary
from cpulab.report.tables import to_csv, to_markdown
from cpulab.report.views import comparison_list, fmt_params, result_list

FORMATS = ("json", "csv", "markdown", "github-action-benchmark", "bencher", "hyperfine")


class ExportError(Exception):
    """This run cannot be written in that format; the message says why."""


def render(summary: Summary, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(summary.to_dict(), indent=1, default=str) + "\n"
    if fmt in DASHBOARD:
        return json.dumps(DASHBOARD[fmt](summary), indent=1) + "\n"
    tables = [result_list(summary), comparison_list(summary)]
    if fmt == "csv":
        return to_csv(tables)
    m = summary.machine
    return "\n".join([f"# cpulab run {summary.run_id}", "", f"{m['cpu_model']}, timer {summary.timing.get('timer')}",
                      ""] + [to_markdown(t) for t in tables])


def benchmark_name(r: Result, summary: Summary) -> str:
    """One name per result, stable from run to run: what a dashboard keys its history by."""
    experiments = {x.experiment for x in summary.results}
    parts = [r.experiment] if len(experiments) > 1 else []
    parts += [r.workload, r.variant] + ([fmt_params(r.params)] if r.params else [])
    return " ".join(p for p in parts if p)


def _estimated(summary: Summary) -> list[Result]:
    return [r for r in summary.results if r.status.measured and r.median is not None]


def github_action_benchmark(summary: Summary) -> list[dict]:
    out = []
    for r in _estimated(summary):
        half = f"± {(r.ci[1] - r.ci[0]) / 2:.6g}" if r.ci else ""
        extra = (f"{r.processes} processes; median {r.median:.6g} {r.rate_unit}"
                 + (f", interval [{r.ci[0]:.6g}, {r.ci[1]:.6g}] ({r.ci_coverage:.0%})" if r.ci else ", no interval")
                 + f"; cpulab run {summary.run_id}")
        out.append({"name": benchmark_name(r, summary), "unit": r.rate_unit, "value": r.median, "range": half,
                    "extra": extra})
    return out


def bencher(summary: Summary) -> dict:
    out: dict[str, dict] = {}
    for r in _estimated(summary):
        metric = {"value": r.median}
        if r.ci:
            metric.update(lower_value=r.ci[0], upper_value=r.ci[1])
        out.setdefault(benchmark_name(r, summary), {})[r.rate_unit] = metric
    return out


def hyperfine(summary: Summary) -> dict:
    """The whole-process results (unit `runs`: one process is one run of the command)."""
    commands = summary.plan.commands
    results = []
    for r in _estimated(summary):
        if r.unit != "runs":
            continue
        times = [1.0 / rate for rate in r.samples]  # one sample per process: runs/s -> s per run
        results.append({"command": commands.get(r.variant, r.variant), "mean": statistics.fmean(times),
                        "stddev": statistics.stdev(times) if len(times) > 1 else None,
                        "median": statistics.median(times), "user": r.user_s, "system": r.sys_s,
                        "min": min(times), "max": max(times), "times": times, "exit_codes": [0] * len(times),
                        "parameters": dict(r.params)})
    if not results:
        raise ExportError(f"run {summary.run_id} has no whole-command results (cpulab time or a program) "
                          "to write in hyperfine's format")
    return {"results": results}


DASHBOARD = {"github-action-benchmark": github_action_benchmark, "bencher": bencher, "hyperfine": hyperfine}
