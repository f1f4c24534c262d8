"""Exports of a run's summary: JSON (everything), CSV and Markdown (results and comparisons)."""
from __future__ import annotations

import csv
import io
import json

from .terminal import fmt_num, fmt_params

RESULT_FIELDS = ["experiment", "workload", "variant", "params", "status", "unit", "rate_unit", "median", "ci_low",
                 "ci_high", "cv", "cycles_per_unit", "ns_per_unit", "real_s", "user_s", "sys_s", "invocations",
                 "excluded_samples", "ci_coverage", "timer", "error"]
COMPARISON_FIELDS = ["experiment", "workload", "params", "baseline", "variant", "ratio", "ci_low", "ci_high", "p",
                     "verdict", "method", "rounds"]


def _flat(row: dict, fields: list[str]) -> dict:
    d = {k: row.get(k) for k in fields}
    d["params"] = fmt_params(row["params"])
    ci = row.get("ci") or [None, None]
    d["ci_low"], d["ci_high"] = ci
    return d


def render(summary: dict, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(summary, indent=1, default=str) + "\n"
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=["table"] + RESULT_FIELDS + [f for f in COMPARISON_FIELDS
                                                                         if f not in RESULT_FIELDS])
        w.writeheader()
        for r in summary["results"]:
            w.writerow({"table": "result", **_flat(r, RESULT_FIELDS)})
        for c in summary["comparisons"]:
            w.writerow({"table": "comparison", **_flat(c, COMPARISON_FIELDS)})
        return buf.getvalue()
    lines = [f"# cpulab run {summary['run_id']}", "",
             f"{summary['machine']['cpu_model']}, timer {summary['timing'].get('timer')}", "",
             "| workload | params | variant | median | 95% CI | per clock | status |", "|---|---|---|---:|---:|---:|---|"]
    for r in summary["results"]:
        ci = f"{fmt_num(r['ci'][0])} .. {fmt_num(r['ci'][1])}" if r["ci"] else ""
        med = f"{fmt_num(r['median'])} {r['rate_unit']}" if r["median"] is not None else ""
        pc = f"{fmt_num(r['cycles_per_unit'])} {r['per_clock_unit']}" if r["cycles_per_unit"] else ""
        lines.append(f"| {r['workload']} | {fmt_params(r['params'])} | {r['variant']} | {med} | {ci} | {pc} | "
                     f"{r['status']} |")
    lines += ["", "| workload | params | variant | vs | ratio | 95% CI | p | verdict |",
              "|---|---|---|---|---:|---:|---:|---|"]
    for c in summary["comparisons"]:
        ratio = f"{c['ratio']:.3f}" if c["ratio"] is not None else ""
        ci = f"{c['ci'][0]:.3f} .. {c['ci'][1]:.3f}" if c["ci"] else ""
        p = f"{c['p']:.3g}" if c["p"] is not None else ""
        lines.append(f"| {c['workload']} | {fmt_params(c['params'])} | {c['variant']} | {c['baseline']} | {ratio} | "
                     f"{ci} | {p} | {c['verdict']} |")
    return "\n".join(lines) + "\n"
