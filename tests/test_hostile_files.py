"""Hostile and careless files against `cpulab import` and plans, generated: each of a
real file of every import format, mutated (a value replaced by a wrong type, an absurd
or non-finite number, a key dropped, an entry doubled, a number token rewritten in the
text), must either import whole, after which every reader of the store (runs, summary,
exports, the run file again) works on it, or be refused as one line naming the file,
with the store's row counts unchanged.  A mutated plan must load or be a PlanError.
Nothing here measures; the stores live in memory-backed files where there are any."""
from __future__ import annotations

import json
import random
import re
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from conftest import read_back, row_counts

from cpulab.plan import plan as plans
from cpulab.store import exchange, harnesses
from cpulab.store.db import Store

FIXTURES = Path(__file__).resolve().parent / "fixtures"
# One real file of each format (criterion: its folder), and the format's name.
FILES = {"cpulab": "cpulab-run-file-hash.json", "hyperfine": "foreign/hyperfine-sha256-md5.json",
         "gbench": "foreign/gbench-repetitions.json", "pyperf": "foreign/pyperf-timeit.json",
         "criterion": "foreign/criterion/sha256/1KiB/new/sample.json", "gotest": "foreign/go-bench-count3.txt",
         "jmh": "foreign/jmh-hash.json", "bdn": "foreign/bdn-hash-report-full.json"}
EXAMPLES = 500  # per format (issue 58: at least 500 each)

HOSTILE = [0, -1, 1, 1e308, -1e308, 5e-324, 2**63, 2**64, -2**63, 10**30, "", "x" * 300, None, True, False, [], {},
           [[[[]]]], {"a": {"b": {}}}, "NaN", "1e400", 0.5, "ops", "us/op", "../../../etc/passwd", "; touch /tmp/pwn",
           "ok", "done", "pending", "interrupted", "turns", "-O2", ["-wrapper", "sh,-c,touch /tmp/pwn"]]
# Keys that the readers of a run look up in its free-form parts (origin, conditions, plan,
# notes, analyses).
KEYS = ["commit", "dirty", "commit_time", "time_split", "tsc_hz", "core_per_tsc", "cpu_model", "caches", "tlbs",
        "name", "kind", "method", "precision", "budget", "metric", "experiments", "against", "commands", "processes",
        "tool", "estimator", "instructions", "instructions_per_unit", "no_verdict", "aggregate_only", "cv", "n",
        "loadavg", "governor", "thp", "rows", "points", "levels", "steps", "series", "title", "params", "variants",
        "baseline", "workloads", "emulator", "flops", "bytes", "peak_rss_kb", "cpu_wait", "phases"]
NUMBER = re.compile(r"(?<![\w.])-?\d+(\.\d+)?([eE][-+]?\d+)?(?![\w.])")


def _fields(doc) -> dict[tuple, list]:
    """Every place in a JSON document but its root, (its parent, its key or index, its
    value), in document order, under its field: its path with list positions left out."""
    fields: dict[tuple, list] = {}
    stack = [((), None, None, doc)]
    while stack:
        field, parent, key, value = stack.pop()
        if parent is not None:
            fields.setdefault(field, []).append((parent, key, value))
        items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
        stack.extend(((*field, k) if isinstance(k, str) else field, value, k, v) for k, v in reversed(list(items)))
    return fields


def _place(doc, rnd: random.Random) -> tuple:
    """A place in a JSON document, each field as likely as the next (a run's start as likely
    as a sample's time, though it has a thousand samples); then one of its places: (parent,
    key, value), the root's parent None."""
    fields = _fields(doc)
    return rnd.choice(fields[rnd.choice(sorted(fields, key=repr))]) if fields else (None, None, doc)


def _mutated_json(doc, rnd: random.Random):
    """doc with one to three mutations: a value replaced, scaled, dropped, doubled or added."""
    doc = json.loads(json.dumps(doc))
    for _ in range(rnd.randint(1, 3)):
        parent, key, value = _place(doc, rnd)
        if parent is None:
            return rnd.choice(HOSTILE)
        action = rnd.random()
        if isinstance(value, (int, float)) and not isinstance(value, bool) and action < 0.5:
            parent[key] = value * rnd.choice([-1, 0, 1e-300, 1e-10, 1e10, 2**40, 1e300])
        elif action < 0.6:
            parent[key] = rnd.choice(HOSTILE)
        elif action < 0.7 and isinstance(parent, dict):
            del parent[key]
        elif action < 0.8 and isinstance(parent, list):
            parent.insert(rnd.randint(0, len(parent)), json.loads(json.dumps(value)))
        elif isinstance(value, dict) or isinstance(parent, dict):  # a key some reader looks for, of the wrong kind
            (value if isinstance(value, dict) else parent)[rnd.choice(KEYS)] = rnd.choice(HOSTILE)
        else:
            parent[key] = rnd.choice(HOSTILE)
    return doc


def _mutated_text(text: str, rnd: random.Random) -> str:
    """A text (go test's) or JSON text with a number token, or a line, rewritten."""
    lines = text.splitlines()
    for _ in range(rnd.randint(1, 3)):
        i = rnd.randrange(len(lines))
        action = rnd.random()
        if action < 0.6 and NUMBER.search(lines[i]):
            spans = [m.span() for m in NUMBER.finditer(lines[i])]
            a, b = rnd.choice(spans)
            new = rnd.choice(["NaN", "Infinity", "-Infinity", "inf", "nan", "1e400", "-1", "0", "5e-324",
                              "99999999999999999999999", "1e305", "x"])
            lines[i] = lines[i][:a] + new + lines[i][b:]
        elif action < 0.75:
            lines.insert(i, lines[i])
        elif action < 0.85:
            del lines[i]
            lines = lines or [""]
        else:
            lines[i] = rnd.choice(["Benchmark", "BenchmarkX-2 1", "BenchmarkX-2 1 5 ns/op 1", "{", "]", "\x00", "é"])
    return "\n".join(lines) + "\n"


def _workdir() -> Path:
    shm = Path("/dev/shm")
    return Path(tempfile.mkdtemp(prefix="cpulab-hostile-", dir=shm if shm.is_dir() else None))


def _write_mutant(fmt: str, rnd: random.Random, where: Path) -> Path:
    """A mutated copy of the format's file in `where` (criterion: its benchmark folder)."""
    src = FIXTURES / FILES[fmt]
    name = "sample.json" if fmt == "criterion" else src.name
    dest = where / ("bench/new" if fmt == "criterion" else "") / name
    dest.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "criterion":
        shutil.copy(src.parent / "benchmark.json", dest.parent / "benchmark.json")
    text = src.read_text()
    if fmt == "cpulab":  # a run of its own each time (a run file's run is known by its start): read back each
        doc = json.loads(text)
        doc["runs"][0]["started"] += rnd.random()
        text = json.dumps(doc)
    if fmt == "gotest" or rnd.random() < 0.25:
        dest.write_text(_mutated_text(text, rnd))
    else:
        dest.write_text(json.dumps(_mutated_json(json.loads(text), rnd)))
    return dest


@pytest.mark.parametrize("fmt", sorted(FILES))
def test_mutated_files_import_whole_or_not_at_all(fmt):
    where = _workdir()
    store = Store(where / "store.sqlite")
    seen = {"imported": 0, "refused": 0}

    @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(st.integers(0, 2**32))
    def one(seed):
        rnd = random.Random(seed)
        case = where / f"case-{seed}"
        path = _write_mutant(fmt, rnd, case)
        before = row_counts(store.path)
        try:
            runs, source = harnesses.read_runs(path if fmt != "criterion" else case / "bench/new/sample.json", fmt)
        except exchange.RunFileError as e:
            seen["refused"] += 1
            assert "\n" not in str(e) and str(case) in str(e), str(e)
            assert row_counts(store.path) == before
            return
        finally:
            shutil.rmtree(case)
        ids = store.import_runs(runs, source)
        seen["imported"] += 1
        for run_id, added in ids:
            if added:  # the HTML report of one in 25 (80 ms each), by the example's seed: repeatable
                read_back(store, run_id, where / "r.html" if seed % 25 == 0 else None)

    try:
        one()
    finally:
        shutil.rmtree(where)
    print(fmt, seen)
    assert seen["imported"] + seen["refused"] >= EXAMPLES and seen["refused"], seen


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {_toml_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(type(v))


def _toml(d: dict) -> str:
    """A plan dict as TOML: top-level keys, then its tables and arrays of tables."""
    head = [f"{json.dumps(k)} = {_toml_value(v)}" for k, v in d.items()
            if not isinstance(v, dict) and not (isinstance(v, list) and v and all(isinstance(x, dict) for x in v))]
    body = []
    for k, v in d.items():
        if isinstance(v, dict):
            body.append(f"[{json.dumps(k)}]\n" + "\n".join(f"{json.dumps(a)} = {_toml_value(b)}" for a, b in v.items()))
        elif isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            body += [f"[[{json.dumps(k)}]]\n" + "\n".join(f"{json.dumps(a)} = {_toml_value(b)}" for a, b in x.items())
                     for x in v]
    return "\n".join(head) + "\n\n" + "\n\n".join(body) + "\n"


def test_mutated_plans_load_or_say_why():
    import tomllib
    base = tomllib.loads((plans.PLAN_DIR / "seeds.toml").read_text())
    where = _workdir()
    hostile = [x for x in HOSTILE if x is not None]

    @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(st.integers(0, 2**32))
    def one(seed):
        rnd = random.Random(seed)
        d = _mutated_json(base, rnd)
        d = d if isinstance(d, dict) else {"experiment": d}
        text = json.dumps(d)
        for x in hostile:  # TOML has no null: what the mutation put there becomes a hostile value
            text = text.replace("null", json.dumps(rnd.choice(hostile)), 1)
        path = where / f"plan-{seed}.toml"
        path.write_text(_toml(json.loads(text)))
        try:
            p = plans.validate(plans.load(str(path)), str(path))
            json.dumps(p.as_dict(), allow_nan=False)
            for e in p.experiments:
                p.points_of(e)
        except plans.PlanError as e:
            assert "\n" not in str(e), str(e)
        finally:
            path.unlink()

    try:
        one()
    finally:
        shutil.rmtree(where)
