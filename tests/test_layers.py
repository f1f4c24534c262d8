"""The package layout is the flow of data: each stage imports only from the shared values and
from the stages before it, never from a later one, and nothing hides an import inside a
function to get round that."""
from __future__ import annotations

import ast
import sys
from pathlib import Path

import cpulab

SRC = Path(cpulab.__file__).resolve().parent
# In import order.  The store comes before the stages that write it (measure) and read it.
LAYERS = ["shared", "store", "plan", "compile", "measure", "analysis", "report", "cli"]
SHARED_FOLDERS = {"workloads", "machine", "spec", "estimates"}  # what can be measured, this machine, what a run is asked, how results are estimated
MAX_FLAT = 6
MAX_LINES = 400
# Imports allowed inside a function, with why: an optional dependency is imported only when
# used; the result files' parsers (pydantic models) only by `cpulab import` and `export`
# (loaded by every command, they took 0.17 s of its start).
LAZY = {("cpulab.cli.common", "cpulab.measure.cluster"), ("cpulab.cli.run", "cpulab.measure.cluster"),
        ("cpulab.cli.cluster", "cpulab.measure.cluster"),
        *(("cpulab.cli.results", f"cpulab.store.{m}") for m in ("exchange", "foreign", "harnesses"))}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer(module: str) -> str:
    top = module.split(".")[1] if "." in module else ""
    return top if top in LAYERS else "shared"


def imports(path: Path):
    """(imported module, line, inside a function) for every import of a cpulab module."""
    me = module_name(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    tree = ast.parse(path.read_text())
    inner = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
             for n in ast.walk(f)}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([node.module] if node.module else []))
            names = [f"{base}.{a.name}" for a in node.names]
            targets = [n if (SRC.parent / n.replace(".", "/")).with_suffix(".py").exists()
                       or (SRC.parent / n.replace(".", "/")).is_dir() else base for n in names]
        elif isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            continue
        for t in targets:
            if t.startswith("cpulab"):
                yield t, node.lineno, id(node) in inner


def edges() -> list[tuple[str, str, int, bool]]:
    return [(module_name(f), t, line, inner) for f in sorted(SRC.rglob("*.py")) for t, line, inner in imports(f)]


def test_no_import_from_a_later_stage():
    wrong = [f"{a} (stage {layer(a)}) imports {b} (stage {layer(b)}) at line {line}"
             for a, b, line, _ in edges() if LAYERS.index(layer(b)) > LAYERS.index(layer(a))]
    print("\n".join(f"{s:9} {sorted({module_name(f) for f in SRC.rglob('*.py') if layer(module_name(f)) == s})}"
                    for s in LAYERS))
    assert not wrong, "\n".join(wrong)


# Inside a stage with folders of its own, the same rule: the folders in import order, its flat
# modules (measure/randomness.py, instructions.py, stepmap.py) beneath all of them.
SUBLAYERS = {"measure": ["execute", "probes", "explain", "schedule", "cluster"]}


def sublayer(module: str) -> tuple[str, int] | None:
    """(stage, the folder's place in its stage's order; -1 for a flat module), if the
    stage has folders."""
    parts = module.split(".")
    folders = SUBLAYERS.get(parts[1] if len(parts) > 1 else "")
    if folders is None or len(parts) < 3:
        return None
    return parts[1], folders.index(parts[2]) if parts[2] in folders else -1


def imports_up_inside_stages(found) -> list[str]:
    return [f"{a} imports {b} (a later folder of {sublayer(a)[0]}/) at line {line}" for a, b, line, _ in found
            if sublayer(a) and sublayer(b) and sublayer(a)[0] == sublayer(b)[0] and sublayer(b)[1] > sublayer(a)[1]]


def test_no_import_from_a_later_folder_of_the_same_stage():
    assert sorted({m.split(".")[2] for m, *_ in edges() if m.startswith("cpulab.measure.") and
                   (SRC / "measure" / m.split(".")[2]).is_dir()}) == sorted(SUBLAYERS["measure"])
    wrong = imports_up_inside_stages(edges())
    assert not wrong, "\n".join(wrong)


def test_the_guard_catches_an_import_up_inside_a_stage():
    """execute/processes.py once imported schedule/rounds.py (the rounds loop it ran in)."""
    found = [("cpulab.measure.execute.processes", "cpulab.measure.schedule.rounds", 30, False),
             ("cpulab.measure.schedule.runner", "cpulab.measure.execute.processes", 36, False),
             ("cpulab.measure.randomness", "cpulab.measure.probes", 9, False)]
    assert imports_up_inside_stages(found) == [
        "cpulab.measure.execute.processes imports cpulab.measure.schedule.rounds (a later folder of measure/) at line 30",
        "cpulab.measure.randomness imports cpulab.measure.probes (a later folder of measure/) at line 9"]


# Stages that read what an earlier one stored and must not redo its work: analysis reads
# the store and measures nothing (a stored or imported run analyses alike anywhere), and
# the report draws the Summary and computes no analysis.
# The report draws from the Summary alone: it may import its own modules and these shared
# values, nothing that measures, builds, stores or analyses.  Analysis reads the store and
# runs nothing: no compiler, no measurement, no probe of this machine.
REPORT_MAY_IMPORT = ("cpulab.report", "cpulab.model", "cpulab.spec.record", "cpulab.spec.policy", "cpulab.params",
                     "cpulab.stats", "cpulab.time_split", "cpulab.workloads")
ANALYSIS_MAY_NOT = ("cpulab.compile", "cpulab.measure", "cpulab.machine", "cpulab.plan")
# Modules that start other programs: only the stages that build and measure do that.
RUNS_PROGRAMS = ("subprocess", "multiprocessing", "pty")


def beneath(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def wrong_imports() -> list[str]:
    """Every import the report or analysis may not make."""
    return [f"{a} imports {b} at line {line}" for a, b, line, _ in edges()
            if (layer(a) == "report" and not beneath(b, REPORT_MAY_IMPORT))
            or (layer(a) == "analysis" and beneath(b, ANALYSIS_MAY_NOT))]


def test_analysis_measures_nothing_and_the_report_analyses_nothing():
    wrong = wrong_imports()
    assert not wrong, "\n".join(wrong)


def test_the_guard_catches_a_report_that_reads_the_measure_stage(monkeypatch):
    """The guard itself: round 4's report imported measure.time_split (views.py:14)."""
    monkeypatch.setattr(sys.modules[__name__], "edges",
                        lambda: [("cpulab.report.views", "cpulab.measure.time_split", 14, False)])
    assert wrong_imports() == ["cpulab.report.views imports cpulab.measure.time_split at line 14"]


def test_analysis_and_the_report_start_no_program():
    found = []
    for f in sorted(SRC.rglob("*.py")):
        if layer(module_name(f)) in ("analysis", "report"):
            for node in ast.walk(ast.parse(f.read_text())):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                    [node.module or ""] if isinstance(node, ast.ImportFrom) else []
                found += [f"{module_name(f)} imports {n} at line {node.lineno}" for n in names
                          if n.split(".")[0] in RUNS_PROGRAMS]
    assert not found, "\n".join(found)


def test_no_import_hides_inside_a_function():
    hidden = [f"{a} imports {b} inside a function, line {line}" for a, b, line, inner in edges()
              if inner and (a, b) not in LAZY]
    assert not hidden, "\n".join(hidden)


def test_no_circle_between_modules():
    graph: dict[str, set[str]] = {}
    for a, b, _, inner in edges():
        if not inner and a != b and not b.startswith(a + "."):  # a package importing its own parts is not a circle
            graph.setdefault(a, set()).add(b)
    state: dict[str, int] = {}

    def visit(m: str, path: list[str]) -> list[str] | None:
        state[m] = 1
        for n in graph.get(m, ()):
            if state.get(n) == 1:
                return path + [n]
            if not state.get(n) and (found := visit(n, path + [n])):
                return found
        state[m] = 2
        return None

    for m in sorted(graph):
        if not state.get(m):
            circle = visit(m, [m])
            assert circle is None, " -> ".join(circle)


def test_the_top_holds_only_shared_values_and_stage_folders():
    flat = sorted(f.name for f in SRC.glob("*.py") if f.name != "__init__.py")
    assert len(flat) <= MAX_FLAT, flat
    folders = {d.name for d in SRC.iterdir() if (d / "__init__.py").exists()}
    assert folders == set(LAYERS[1:]) | SHARED_FOLDERS, folders
    for d in folders:
        doc = ast.get_docstring(ast.parse((SRC / d / "__init__.py").read_text()))
        assert doc and len(doc.split("\n\n")[0]) > 40, f"{d}/ needs a docstring saying what the stage does"


def test_no_python_file_is_too_long_to_read():
    long = {str(f.relative_to(SRC)): n for f in SRC.rglob("*.py") if (n := len(f.read_text().splitlines())) > MAX_LINES}
    assert not long, long
