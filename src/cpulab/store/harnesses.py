"""Other languages' benchmark harnesses brought into the store: criterion.rs, `go test
-bench`, JMH and BenchmarkDotNet, beside foreign.py's JSON tools, and the one way a file
(or criterion's folder) is read by path: which tool wrote it, then its run.

* criterion.rs: its folder (`target/criterion`) or one `new/sample.json` in it.  Each
  benchmark (its `benchmark.json`'s `full_id`, else its folder) is a workload; each of
  its samples (`times[i]` nanoseconds for `iters[i]` iterations) one process.
* `go test -bench` text (benchstat's input; `-count N` repeats each line): each line
  `BenchmarkName-P  N  X ns/op ...` is one process of N iterations of the benchmark
  `Name` (the -GOMAXPROCS suffix is kept in the notes); other units (B/op, allocs/op,
  MB/s) go to the notes.
* JMH (`-rf json`): each benchmark at its params is a workload; each fork one process
  whose samples are its measurement iterations, in throughput (`thrpt`), average time
  (`avgt`) or single-shot (`ss`) mode, in any of JMH's time units.
* BenchmarkDotNet (`JsonExporter.Full`): each benchmark (Type.Method) at its parameters
  is a workload; each launch one process whose samples are its workload iterations
  (stage `Result`, overhead already taken out; `Actual` where a file has no Result).

Each keeps the tool and its own estimator in the run's plan and the results' notes, and
the whole file is checked before anything is written: a malformed one is one line naming
the file and the field (or line).
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field

from cpulab.store import exchange, foreign, formats
from cpulab.store.exchange import read_json, validated
from cpulab.store.foreign import ForeignFileError, Parsed, Positive, Loose

TOOLS = formats.TOOLS
# JMH's time units (its TimeUnit names as scoreUnit spells them) in nanoseconds
JMH_UNIT_NS = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9, "min": 60e9}


class CriterionSample(Loose):
    iters: Annotated[list[Positive], Field(min_length=1)]
    times: Annotated[list[Positive], Field(min_length=1)]


class JmhMetric(Loose):
    score: float
    scoreUnit: Annotated[str, Field(min_length=1)]
    rawData: Annotated[list[Annotated[list[Positive], Field(min_length=1)]], Field(min_length=1)]


class JmhBenchmark(Loose):
    jmhVersion: str = ""
    benchmark: Annotated[str, Field(min_length=1)]
    mode: Literal["thrpt", "avgt", "ss", "sample"]
    params: dict[str, str] = {}
    primaryMetric: JmhMetric


class BdnMeasurement(Loose):
    IterationMode: str
    IterationStage: str
    LaunchIndex: Annotated[int, Field(ge=0)]
    Operations: Annotated[int, Field(gt=0)]
    Nanoseconds: Positive


class BdnBenchmark(Loose):
    Type: Annotated[str, Field(min_length=1)]
    Method: Annotated[str, Field(min_length=1)]
    Parameters: str = ""
    Measurements: Annotated[list[BdnMeasurement], Field(min_length=1)]


class BdnFile(Loose):
    HostEnvironmentInfo: dict[str, Any] = {}
    Benchmarks: Annotated[list[BdnBenchmark], Field(min_length=1)]


def detect(path: Path) -> str | None:
    """Which tool wrote the file (or criterion's folder) at path; None when none did."""
    if not path.exists():
        raise ForeignFileError(f"{path}: No such file or directory")
    if path.is_dir():
        return "criterion" if next(path.glob("**/new/sample.json"), None) else None
    with path.open("rb") as f:
        head = f.read(4096)
    if not head.lstrip().startswith((b"{", b"[")):
        text = head.decode("utf-8", "replace")
        return "gotest" if re.search(r"^Benchmark\S*\s+\d+\s", text, re.M) else None
    doc = read_json(path)
    if isinstance(doc, list) and doc and isinstance(doc[0], dict) and "jmhVersion" in doc[0]:
        return "jmh"
    if isinstance(doc, dict) and "Benchmarks" in doc and "HostEnvironmentInfo" in doc:
        return "bdn"
    if isinstance(doc, dict) and {"iters", "times"} <= set(doc):
        return "criterion"
    return foreign.detect(doc)


def parse(path: Path, tool: str, variant: str | None = None) -> Parsed:
    """(plan, fingerprint, results) of the file at path as `tool` wrote it, or ForeignFileError."""
    if tool == "criterion":
        return _criterion(path, variant or "criterion")
    if tool == "gotest":
        return _gotest(path, variant or "gotest")
    if tool == "jmh":
        return _jmh(read_json(path), path, variant or "jmh")
    if tool == "bdn":
        return _bdn(validated(BdnFile, read_json(path), path), path, variant or "bdn")
    return foreign.parse(read_json(path), tool, path, variant)


def read_runs(path: Path, fmt: str = "auto", variant: str | None = None,
              argv: list[str] = ()) -> tuple[list[dict], str]:
    """A file to import, read whole and checked, nothing written: (its runs as
    exchange.ExportedRun documents, parents first; what they came from, for
    Store.import_runs).  ForeignFileError (a RunFileError) names the file and the field."""
    tool = fmt if fmt != "auto" else detect(path)
    if tool is None:
        raise ForeignFileError(f"{path}: not a result file of cpulab, {', '.join(TOOLS)} (give --format)")
    if tool == "cpulab":
        return [r.model_dump() for r in exchange.read_document(path).runs], "cpulab"
    parsed = parse(path, tool, variant)
    return [foreign.checked(parsed, list(argv), path)], foreign.source_of(parsed)


def _result(workload: str, variant: str, params: dict, unit: str, procs: list[dict], notes: dict) -> dict:
    return {"workload": workload, "variant": variant, "params": params, "unit": unit, "processes": procs,
            "notes": notes}


def _criterion(path: Path, variant: str) -> Parsed:
    files = sorted(path.glob("**/new/sample.json")) if path.is_dir() else [path]
    if not files:
        raise ForeignFileError(f"{path}: no criterion new/sample.json below it")
    results = []
    for f in files:
        s = validated(CriterionSample, read_json(f), f)
        if len(s.iters) != len(s.times):
            raise ForeignFileError(f"{f}: iters and times differ in length ({len(s.iters)}, {len(s.times)})")
        meta = f.parent / "benchmark.json"
        name = (str(f.parent.parent.relative_to(path)) if path.is_dir() else f.parent.parent.name) or f.stem
        if meta.is_file() and isinstance(full := read_json(meta).get("full_id"), str) and full:
            name = full
        procs = [foreign.process_of([t * 1e-9], n, "criterion") for n, t in zip(s.iters, s.times)]
        results.append(_result(name, variant, {}, "iterations", procs,
                               {"tool": "criterion", "estimator": "slope of time over iterations"}))
    return foreign.plan_of("criterion", "", "slope", results), foreign.fingerprint_of("criterion"), results


_GO_LINE = re.compile(r"^Benchmark(?P<name>\S+?)(?:-(?P<procs>\d+))?\s+(?P<n>\d+)\s+(?P<rest>.*)$")


def _gotest(path: Path, variant: str) -> Parsed:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise ForeignFileError(f"{path}: {getattr(e, 'strerror', None) or e}") from None
    context, by_name = {}, {}
    for i, line in enumerate(lines, 1):
        if m := re.match(r"^(goos|goarch|pkg|cpu):\s*(.*)$", line):
            context[m[1]] = m[2]
            continue
        if not line.startswith("Benchmark") or line.startswith("Benchmark:"):
            continue
        m = _GO_LINE.match(line)
        fields = m["rest"].split() if m else []
        if not m or len(fields) % 2 or not fields:
            raise ForeignFileError(f"{path}: line {i}: not a benchmark result (name, iterations, value unit ...)")
        values = {}
        for value, unit in zip(fields[::2], fields[1::2]):
            try:
                values[unit] = float(value)
            except ValueError:
                raise ForeignFileError(f"{path}: line {i}: {value!r} is not a number") from None
        n = int(m["n"])
        if "ns/op" not in values or not values["ns/op"] > 0 or n < 1:
            raise ForeignFileError(f"{path}: line {i}: needs a positive ns/op and at least one iteration")
        entry = by_name.setdefault(m["name"], {"procs": [], "notes": {}, "gomaxprocs": m["procs"]})
        entry["procs"].append(foreign.process_of([values["ns/op"] * n * 1e-9], n, "gotest"))
        for unit, v in values.items():
            if unit != "ns/op":
                entry["notes"].setdefault(unit, []).append(v)
    if not by_name:
        raise ForeignFileError(f"{path}: no Benchmark lines")
    results = [_result(name, variant, {}, "iterations", e["procs"],
                       {"tool": "gotest", "estimator": "ns/op", "gomaxprocs": e["gomaxprocs"],
                        **{f"median {u}": sorted(v)[len(v) // 2] for u, v in e["notes"].items()}})
               for name, e in by_name.items()]
    fp = {**foreign.fingerprint_of("gotest"), **({"cpu_model": context["cpu"]} if "cpu" in context else {}),
          "arch": context.get("goarch", "")}
    return foreign.plan_of("gotest", "", "ns/op", results), fp, results


def _jmh_ns_per_op(mode: str, unit: str, score: float, where: str) -> float:
    """Nanoseconds per operation of one JMH score: thrpt is ops per time unit, avgt and
    ss are time units per op."""
    per = unit.split("/")
    base = (per[1] if mode == "thrpt" else per[0]) if len(per) == 2 else ""
    if (per[0] != "ops" if mode == "thrpt" else per[-1] != "op") or base not in JMH_UNIT_NS:
        raise ForeignFileError(f"{where}: scoreUnit {unit!r} is not one JMH writes in mode {mode}")
    return JMH_UNIT_NS[base] / score if mode == "thrpt" else score * JMH_UNIT_NS[base]


def _jmh(doc, path: Path, variant: str) -> Parsed:
    if not isinstance(doc, list) or not doc:
        raise ForeignFileError(f"{path}: document: a JMH result file is a list of benchmarks")
    results = []
    for i, raw in enumerate(doc):
        b = validated(JmhBenchmark, raw, Path(f"{path}: {i}"))
        if b.mode == "sample":
            raise ForeignFileError(f"{path}: {i}.mode: sample-time results keep histograms only; run -bm avgt")
        m = b.primaryMetric
        procs = []
        for fork in m.rawData:
            ns = [_jmh_ns_per_op(b.mode, m.scoreUnit, x, f"{path}: {i}.primaryMetric") for x in fork]
            procs.append(foreign.process_of([x * 1e-9 for x in ns], 1, "jmh"))
        results.append(_result(b.benchmark, variant, dict(b.params), "ops", procs,
                               {"tool": "jmh", "estimator": f"mean ({b.mode})", "tool_score": m.score,
                                "tool_unit": m.scoreUnit}))
    version = str(doc[0].get("jmhVersion", "")) if isinstance(doc[0], dict) else ""
    return foreign.plan_of("jmh", version, "mean", results), foreign.fingerprint_of("jmh"), results


def _bdn_params(text: str) -> dict[str, str]:
    """BenchmarkDotNet's parameter string ("N=1000&Mode=fast", or comma-separated)."""
    pairs = [p.strip() for p in re.split(r"[&,]", text) if p.strip()]
    return dict(p.split("=", 1) for p in pairs if "=" in p)


def _bdn(f: BdnFile, path: Path, variant: str) -> Parsed:
    results = []
    for i, b in enumerate(f.Benchmarks):
        work = [m for m in b.Measurements if m.IterationMode == "Workload"]
        stage = "Result" if any(m.IterationStage == "Result" for m in work) else "Actual"
        launches: dict[int, list] = {}
        for m in work:
            if m.IterationStage == stage:
                launches.setdefault(m.LaunchIndex, []).append(m)
        if not launches:
            raise ForeignFileError(f"{path}: Benchmarks.{i}.Measurements: no Workload iterations")
        procs = []
        for ms in launches.values():
            ops = {m.Operations for m in ms}
            if len(ops) > 1:  # one process, one count of operations per sample (the store's work)
                raise ForeignFileError(f"{path}: Benchmarks.{i}: a launch's iterations ran {sorted(ops)} operations")
            procs.append(foreign.process_of([m.Nanoseconds * 1e-9 for m in ms], ops.pop(), "bdn"))
        results.append(_result(f"{b.Type}.{b.Method}", variant, _bdn_params(b.Parameters), "ops", procs,
                               {"tool": "bdn", "estimator": "mean", "stage": stage}))
    version = str(f.HostEnvironmentInfo.get("BenchmarkDotNetVersion", ""))
    fp = {**foreign.fingerprint_of("bdn"),
          **({"cpu_model": str(f.HostEnvironmentInfo["ProcessorName"])} if "ProcessorName" in f.HostEnvironmentInfo
             else {})}
    return foreign.plan_of("bdn", version, "mean", results), fp, results

