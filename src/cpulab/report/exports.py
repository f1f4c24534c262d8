"""Exports of a run's Summary: JSON (everything: the `--json` document), CSV and Markdown
(the results and comparisons tables of report/views.py)."""
from __future__ import annotations

import json

from cpulab.model import Summary
from cpulab.report.tables import to_csv, to_markdown
from cpulab.report.views import comparison_list, result_list


def render(summary: Summary, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(summary.to_dict(), indent=1, default=str) + "\n"
    tables = [result_list(summary), comparison_list(summary)]
    if fmt == "csv":
        return to_csv(tables)
    m = summary.machine
    return "\n".join([f"# cpulab run {summary.run_id}", "", f"{m['cpu_model']}, timer {summary.timing.get('timer')}",
                      ""] + [to_markdown(t) for t in tables])
