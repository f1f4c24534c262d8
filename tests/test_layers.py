"""The package layout is the flow of data: each stage imports only from the shared values and
from the stages before it, never from a later one, and nothing hides an import inside a
function to get round that."""
from __future__ import annotations

import ast
from pathlib import Path

import cpulab

SRC = Path(cpulab.__file__).resolve().parent
# In import order.  The store comes before the stages that write it (measure) and read it.
LAYERS = ["shared", "store", "plan", "compile", "measure", "analysis", "report", "cli"]
SHARED_FOLDERS = {"workloads", "machine"}  # catalogues of what can be measured, and this machine
MAX_FLAT = 8
MAX_LINES = 600
# Imports allowed inside a function, with why: an optional dependency is imported only when used.
LAZY = {("cpulab.cli.common", "cpulab.measure.cluster"), ("cpulab.cli.run", "cpulab.measure.cluster"),
        ("cpulab.cli.cluster", "cpulab.measure.cluster")}


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


# Stages that read what an earlier one stored and must not redo its work: analysis reads
# the store and measures nothing (a stored or imported run analyses alike anywhere), and
# the report draws the Summary and computes no analysis.
NOT_FROM = {"analysis": "measure", "report": "analysis"}


def test_analysis_measures_nothing_and_the_report_analyses_nothing():
    wrong = [f"{a} (stage {layer(a)}) imports {b} (stage {layer(b)}) at line {line}"
             for a, b, line, _ in edges() if NOT_FROM.get(layer(a)) == layer(b)]
    assert not wrong, "\n".join(wrong)


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
