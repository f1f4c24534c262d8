"""Other tools' results brought into the store: hyperfine, Google Benchmark and pyperf JSON.

Each file becomes one run whose raw times are processes and samples, so `compare`,
`report`, `export` and the summary's statistics work on them as on cpulab's own:

* hyperfine (`--export-json`): each command is a variant of the workload `time` (as in
  `cpulab time`), at its scan parameters; each entry of `times` is one process with one
  sample of wall time.  A run whose exit code was not 0 is left out, saying so.
* Google Benchmark (`--benchmark_format=json`): each benchmark (its `run_name`) is a
  workload, under the variant `gbench`; with repetitions each iteration entry is one
  process whose one sample is `iterations` runs of `real_time`.  A benchmark that only
  has aggregates (`--benchmark_report_aggregates_only`) keeps its median as one process
  with `n` and `cv` in its notes: one process gives no interval, so no verdict.
* pyperf: each benchmark is a workload under the variant `pyperf`; each run that has
  values (pyperf's worker processes) is one process, its values the samples (seconds per
  loop); warm-ups are dropped.

The tool, its version when the file says it, and the estimator the tool itself reports
(hyperfine: mean; Google Benchmark: per-iteration real time; pyperf: mean) are kept in
the run's plan and each result's notes.  The whole file is checked before anything is
written: a malformed one is one line naming the file and the field.
"""
from __future__ import annotations

import hashlib
import json
import math
import time
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from cpulab.model import Status
from cpulab.store import formats
from cpulab.store.db import Store
from cpulab.store.exchange import ExportedRun, RunFileError, first_error, validated

TOOLS = formats.JSON_TOOLS
UNIT_NS = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}

Positive = Annotated[float, Field(gt=0, allow_inf_nan=False)]
Finite = Annotated[float, Field(allow_inf_nan=False)]


class ForeignFileError(RunFileError):
    """The file is not a result file of a tool cpulab reads; the message names where."""


class Loose(BaseModel):
    model_config = ConfigDict(extra="ignore")  # tools add fields from version to version


class HyperfineResult(Loose):
    command: Annotated[str, Field(min_length=1)]
    mean: Positive
    times: Annotated[list[Positive], Field(min_length=1)]
    exit_codes: list[int | None] | None = None
    parameters: dict[str, str] | None = None


class HyperfineFile(Loose):
    results: Annotated[list[HyperfineResult], Field(min_length=1)]


class GbenchEntry(Loose):
    name: Annotated[str, Field(min_length=1)]
    run_name: str | None = None
    run_type: Literal["iteration", "aggregate"] = "iteration"
    repetitions: int | None = None
    iterations: Annotated[int, Field(gt=0)]
    real_time: Finite
    time_unit: Literal["ns", "us", "ms", "s"] = "ns"
    aggregate_name: str | None = None
    error_occurred: bool = False


class GbenchFile(Loose):
    context: dict[str, Any]
    benchmarks: Annotated[list[GbenchEntry], Field(min_length=1)]


class PyperfRun(Loose):
    metadata: dict[str, Any] = {}
    values: list[Positive] | None = None


class PyperfBenchmark(Loose):
    metadata: dict[str, Any] = {}
    runs: Annotated[list[PyperfRun], Field(min_length=1)]


class PyperfFile(Loose):
    version: str
    metadata: dict[str, Any] = {}
    benchmarks: Annotated[list[PyperfBenchmark], Field(min_length=1)]


def detect(doc) -> str | None:
    """Which tool wrote this JSON document (cpulab's own format is 'cpulab')."""
    if not isinstance(doc, dict):
        return None
    if doc.get("format") == "cpulab-run":
        return "cpulab"
    if isinstance(doc.get("results"), list):
        return "hyperfine"
    if isinstance(doc.get("benchmarks"), list):
        return "gbench" if "context" in doc else "pyperf" if "version" in doc else None
    return None


# A parsed file, ready to write: the plan record and, per result, what add_result and
# add_process take.
Parsed = tuple[dict, dict, list[dict]]


def parse(doc, tool: str, path: Path, variant: str | None = None) -> Parsed:
    """(plan, fingerprint, results) of a tool's document, or ForeignFileError."""
    if tool == "hyperfine":
        return _hyperfine(validated(HyperfineFile, doc, path))
    if tool == "gbench":
        return _gbench(validated(GbenchFile, doc, path), variant or "gbench", path)
    if tool == "pyperf":
        return _pyperf(validated(PyperfFile, doc, path), variant or "pyperf", path)
    raise ForeignFileError(f"{path}: not a result file of {', '.join(TOOLS)} (or cpulab's own)")


def plan_of(tool: str, version: str, estimator: str, results: list[dict]) -> dict:
    """The run's plan record: one experiment per workload, its first variant the baseline;
    processes compared as independent samples (their order was the tool's, not rounds)."""
    exps: dict[str, list[str]] = {}
    for r in results:
        if r["variant"] not in exps.setdefault(r["workload"], []):
            exps[r["workload"]].append(r["variant"])
    return {"name": f"imported from {tool}", "tool": tool, "tool_version": version, "estimator": estimator,
            "processes": max(len(r["processes"]) for r in results), "budget": 0.0, "method": "unpaired",
            "experiments": [{"name": w, "title": f"{w} ({tool})", "workloads": [w], "variants": vs,
                             "baseline": vs[0]} for w, vs in exps.items()]}


def fingerprint_of(tool: str, context: dict | None = None) -> dict:
    """A machine.fingerprint's keys, filled with what the file says (Google Benchmark's
    context names the host, its CPUs and their clock) and unknown otherwise."""
    c = context or {}
    return {"hostname": str(c.get("host_name", "")), "arch": "", "cpu_model": f"unknown (imported from {tool})",
            "cpu_family": "", "cpu_model_id": "", "cpus": c.get("num_cpus"), "flags_hash": "", "caches": [],
            "tlbs": {"tlbs": [], "source": f"imported from {tool}"}, "kernel": "unknown", "os": "",
            "memory_bytes": None, "hypervisor": None, "tsc_hz": None, "core_per_tsc": None, "timer": tool,
            "perf_error": "", "mhz": c.get("mhz_per_cpu"), "imported_from": tool}


def process_of(seconds: list[float], work: float, tool: str, excluded: str = "") -> dict:
    n = len(seconds)
    return {"out": {"ns": [s * 1e9 for s in seconds], "cycles": [None] * n, "instructions": [None] * n,
                    "work": work, "reps": 1, "user_s": [None] * n, "sys_s": [None] * n, "timer": tool, "notes": {}},
            "excluded": [excluded] * n if excluded else None}


def _hyperfine(f: HyperfineFile) -> Parsed:
    results, named = [], {}
    for r in f.results:
        # one command given twice (an A/A run) is two variants: the second is 'CMD #2'
        key = (r.command, tuple(sorted((r.parameters or {}).items())))
        named[key] = named.get(key, 0) + 1
        name = r.command if named[key] == 1 else f"{r.command} #{named[key]}"
        codes = r.exit_codes or [0] * len(r.times)
        procs = [process_of([t], 1, "hyperfine", "" if code in (0, None) else f"exit status {code}")
                 for t, code in zip(r.times, codes + [0] * (len(r.times) - len(codes)))]
        results.append({"workload": "time", "variant": name, "params": dict(r.parameters or {}), "unit": "runs",
                        "processes": procs, "notes": {"tool": "hyperfine", "estimator": "mean", "tool_mean_s": r.mean}})
    return plan_of("hyperfine", "", "mean", results), fingerprint_of("hyperfine"), results


def _gbench(f: GbenchFile, variant: str, path: Path) -> Parsed:
    by_name: dict[str, list[GbenchEntry]] = {}
    for b in f.benchmarks:
        if b.error_occurred:
            continue
        by_name.setdefault(b.run_name or b.name, []).append(b)
    results = []
    for name, entries in by_name.items():
        scale = {b.time_unit for b in entries}
        iters = [b for b in entries if b.run_type == "iteration"]
        notes = {"tool": "gbench", "estimator": "real_time per iteration"}
        if iters:
            procs = [process_of([b.real_time * UNIT_NS[b.time_unit] * b.iterations / 1e9], b.iterations, "gbench")
                     for b in iters]
        else:
            agg = {b.aggregate_name: b for b in entries}
            if "median" not in agg and "mean" not in agg:
                raise ForeignFileError(f"{path}: benchmarks: {name}: no iteration entries and no mean or median")
            central = agg.get("median") or agg["mean"]
            procs = [process_of([central.real_time * UNIT_NS[central.time_unit] * central.iterations / 1e9],
                              central.iterations, "gbench")]
            notes.update({"aggregate_only": True, "n": central.repetitions,
                          "cv": agg["cv"].real_time if "cv" in agg else None,
                          "no_verdict": "Google Benchmark gave aggregates only: no process's own time to test"})
        if not all(math.isfinite(p["out"]["ns"][0]) and p["out"]["ns"][0] > 0 for p in procs):
            raise ForeignFileError(f"{path}: benchmarks: {name}: real_time must be a positive number")
        results.append({"workload": name, "variant": variant, "params": {}, "unit": "iterations",
                        "processes": procs, "notes": {**notes, "time_units": sorted(scale)}})
    if not results:
        raise ForeignFileError(f"{path}: benchmarks: every entry reported an error")
    version = str(f.context.get("library_version", ""))
    return plan_of("gbench", version, "real_time", results), fingerprint_of("gbench", f.context), results


def _pyperf(f: PyperfFile, variant: str, path: Path) -> Parsed:
    results = []
    for i, b in enumerate(f.benchmarks):
        name = b.metadata.get("name") or f.metadata.get("name")
        if not isinstance(name, str) or not name:
            raise ForeignFileError(f"{path}: benchmarks.{i}.metadata.name: required, a string")
        procs = [process_of(list(r.values), 1, "pyperf") for r in b.runs if r.values]
        if not procs:
            raise ForeignFileError(f"{path}: benchmarks.{i}: no run has values")
        results.append({"workload": name, "variant": variant, "params": {}, "unit": "loops", "processes": procs,
                        "notes": {"tool": "pyperf", "estimator": "mean"}})
    return plan_of("pyperf", str(f.version), "mean", results), fingerprint_of("pyperf"), results


def run_document(parsed: Parsed, argv: list[str]) -> dict:
    """A parsed file as one run of cpulab's own run file (exchange.ExportedRun): every import
    is checked by the one schema and written by the one all-or-nothing write."""
    plan, fp, results = parsed
    now = time.time()
    variants = list(dict.fromkeys(r["variant"] for r in results))
    return {"parent": None, "machine": "", "machine_id": hashlib.sha256(json.dumps(fp, sort_keys=True).encode())
            .hexdigest()[:16], "fingerprint": fp, "started": now, "finished": now, "status": "done",
            "plan": {**plan, "kind": "imported"}, "conditions": {}, "timing": {"timer": plan["tool"]}, "argv": argv,
            "variants": [{"name": v} for v in variants], "artifacts": [], "analyses": [],
            "results": [{"experiment": r["workload"], "workload": r["workload"], "variant": r["variant"],
                         "params": r["params"], "unit": r["unit"], "status": Status.OK, "error": "",
                         "artifact_hash": None, "same_as": "", "notes": r["notes"],
                         "samples": [_sample(i, j, p, ns) for i, p in enumerate(r["processes"])
                                     for j, ns in enumerate(p["out"]["ns"])]} for r in results]}


def _sample(process: int, idx: int, p: dict, ns: float) -> dict:
    out = p["out"]
    return {"process": process, "idx": idx, "ns": ns, "cycles": None, "instructions": None, "work": out["work"],
            "reps": out["reps"], "user_s": None, "sys_s": None, "timer": out["timer"], "tsc_hz": None,
            "core_per_tsc": None, "layout_pad": 0, "excluded": p["excluded"][idx] if p["excluded"] else ""}


def source_of(parsed: Parsed) -> str:
    """What an imported file is known by: its tool and a digest of what was read from it (its
    variant's name included), so that the same file imported twice is one run."""
    plan, _, results = parsed
    return f"{plan['tool']}:" + hashlib.sha256(json.dumps([plan, results], sort_keys=True).encode()).hexdigest()


def checked(parsed: Parsed, argv: list[str], path: Path) -> dict:
    """The run document of a parsed file, checked as a cpulab run file is (finite, in range,
    consistent); ForeignFileError naming the benchmark and field at fault."""
    doc = run_document(parsed, argv)
    try:
        return ExportedRun.model_validate(doc).model_dump()
    except ValidationError as e:
        loc, msg = first_error(e)
        if loc[:1] == ["results"] and len(loc) > 1:  # named as the file names it: its benchmark
            r, loc = doc["results"][int(loc[1])], loc[2:]
            where = f"{r['workload']} ({r['variant']})"
            if loc[:1] == ["samples"] and len(loc) > 1:
                where, loc = f"{where}, process {r['samples'][int(loc[1])]['process']}", loc[2:]
            loc = [where, *loc]
        raise ForeignFileError(f"{path}: {': '.join(loc) or 'document'}: {msg}") from None


def import_parsed(store: Store, parsed: Parsed, argv: list[str], path: Path = Path("-")) -> tuple[int, bool]:
    """Write one parsed file as one run, all or nothing, once: (its id, True if new; False:
    the same file was imported before, and that run is its id)."""
    return store.import_runs([checked(parsed, argv, path)], source_of(parsed))[0]
