"""Your own kernels in a plan: the `[kernel.NAME]` tables, read, checked and made workloads.

    [kernel.find]
    source = "find.c"              # the kernel (cpulab.h's k_* functions): C, or C++ (.cc .cpp .cxx)
    library = ["lib/search.c"]     # what is being tuned: compiled under each variant beside it
    include = ["include"]          # directories its includes are found in
    libs = ["-lz"]                 # link flags
    unit = "bytes"                 # what k_work counts (workloads.UNITS)
    check_tolerance = 1e-9         # without k_verify: checksums compared as doubles
    [kernel.find.params]
    size = { kind = "size", default = "64K", min = "1K", max = "1G" }
    how = { choices = ["bytes", "words"], default = "bytes" }

Paths are relative to the plan's folder.  A kernel becomes a workload like the built-in
ones (workloads.Workload, registered for this process under its name): swept and
validated alike, built with the harness, placed anew each round, counted and explained.
A plan stores its tables with the paths made absolute (Plan.kernels), so that a stopped
run resumes with the same files.
"""
from __future__ import annotations

import re
from pathlib import Path

from cpulab import workloads
from cpulab.params import KINDS, Param, ParamError

_KERNEL_KEYS = {"source", "library", "include", "libs", "unit", "description", "check_tolerance", "params"}
_PARAM_KEYS = {"kind", "default", "min", "max", "choices"}
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*")
SOURCE_SUFFIXES = (".c", *workloads.CXX_SUFFIXES)


class KernelError(ValueError):
    """A [kernel.NAME] table that cannot be a workload; one line naming the field."""


def _strings(d: dict, key: str, where: str) -> list[str]:
    v = d.get(key, [])
    v = [v] if isinstance(v, str) else v
    if not isinstance(v, list) or not all(isinstance(x, str) and x for x in v):
        raise KernelError(f"{where}.{key}: expected a list of strings")
    return v


def _path(text: str, base: Path, where: str, folder: bool = False) -> str:
    p = (base / Path(text).expanduser()).resolve()
    if not (p.is_dir() if folder else p.is_file()):
        raise KernelError(f"{where}: {p} is not {'a directory' if folder else 'a file'}")
    if not folder and p.suffix not in SOURCE_SUFFIXES:
        raise KernelError(f"{where}: {p.name} is not a C or C++ source ({', '.join(SOURCE_SUFFIXES)})")
    return str(p)


def resolved(table, base: Path, where: str) -> dict[str, dict]:
    """A plan's `kernel` tables, checked, with every path absolute (relative ones are read
    from `base`, the plan's folder)."""
    if table is None:
        return {}
    if not isinstance(table, dict):
        raise KernelError(f"{where}: kernel: expected [kernel.NAME] tables")
    out = {}
    for name, d in table.items():
        at = f"{where}: kernel.{name}"
        if not _NAME.fullmatch(name):
            raise KernelError(f"{at}: a kernel's name is letters, digits and _ . + -")
        if not isinstance(d, dict):
            raise KernelError(f"{at}: expected a table")
        if unknown := sorted(set(d) - _KERNEL_KEYS):
            raise KernelError(f"{at}: unknown key {unknown[0]!r} (known: {', '.join(sorted(_KERNEL_KEYS))})")
        if not isinstance(d.get("source"), str) or not d["source"]:
            raise KernelError(f"{at}.source: required, the kernel's source file")
        out[name] = {**d, "source": _path(d["source"], base, f"{at}.source"),
                     "library": [_path(f, base, f"{at}.library") for f in _strings(d, "library", at)],
                     "include": [_path(f, base, f"{at}.include", folder=True) for f in _strings(d, "include", at)],
                     "libs": _strings(d, "libs", at)}
        workload(name, out[name], where)  # every other field checked now, before anything is built
    return out


def workload(name: str, d: dict, where: str) -> workloads.Workload:
    """One resolved table as a workload."""
    at = f"{where}: kernel.{name}"
    unit = d.get("unit")
    if unit not in workloads.UNITS:
        raise KernelError(f"{at}.unit: expected one of {', '.join(workloads.UNITS)}, got {unit!r}")
    tolerance = d.get("check_tolerance")
    if tolerance is not None and (isinstance(tolerance, bool) or not isinstance(tolerance, (int, float))
                                  or not 0 <= tolerance < 1):
        raise KernelError(f"{at}.check_tolerance: expected a relative tolerance in [0, 1), got {tolerance!r}")
    description = d.get("description", f"your kernel {Path(d['source']).name}")
    if not isinstance(description, str):
        raise KernelError(f"{at}.description: expected a string")
    params = d.get("params") or {}
    if not isinstance(params, dict):
        raise KernelError(f"{at}.params: expected a table of NAME = {{ kind, default, ... }}")
    return workloads.Workload(
        name=name, kernel=d["source"], unit=unit, description=description,
        params={k: _param(spec, f"{at}.params.{k}") for k, spec in params.items()},
        libs=tuple(d["libs"]), library_sources=tuple(d["library"]), include_dirs=tuple(d["include"]),
        declared_in=where, check_tolerance=None if tolerance is None else float(tolerance),
        root=d.get("root", ""), trees=tuple(sorted(d.get("trees", {}).items())))


def _param(spec, where: str) -> Param:
    """{ kind = "size", default = "64K", min = "1K", max = "1G" } -> Param; a table with
    choices is a choice, one without a kind an int."""
    if not isinstance(spec, dict) or "default" not in spec:
        raise KernelError(f"{where}: expected {{ default = ..., kind = ..., min/max or choices }}")
    if unknown := sorted(set(spec) - _PARAM_KEYS):
        raise KernelError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(sorted(_PARAM_KEYS))})")
    choices = spec.get("choices", [])
    kind = spec.get("kind", "choice" if choices else "int")
    if kind not in KINDS:
        raise KernelError(f"{where}.kind: expected one of {', '.join(KINDS)}, got {kind!r}")
    if not isinstance(choices, list) or not all(isinstance(c, str) and c for c in choices):
        raise KernelError(f"{where}.choices: expected a list of strings")
    kw = {"kind": kind, "choices": tuple(choices)}
    try:
        if kind in ("int", "size"):
            unbounded = Param("0", kind, min=-2**63)
            kw |= {b: int(unbounded.parse(spec[b])) for b in ("min", "max") if b in spec}
        placeholder = Param(choices[0] if choices else str(kw.get("min", 0)) if kind != "text" else "", **kw)
        return Param(placeholder.parse(spec["default"]), **kw)
    except (ParamError, ValueError) as e:
        raise KernelError(f"{where}: {e}") from None


def from_file(path: str) -> tuple[str, dict]:
    """`cpulab run -k FILE`: a kernel with no plan, named after its file, its unit read
    from its `k_unit[] = "..."` and no parameters of its own (declare them in a plan's
    [kernel] table)."""
    p = Path(path)
    if not p.is_file():
        raise KernelError(f"--kernel {path}: no such file")
    text = p.read_text(errors="replace")
    m = re.search(r'k_unit\s*\[\s*\]\s*=\s*"([^"]*)"', text)
    if not m:
        raise KernelError(f"--kernel {path}: no k_unit[] = \"...\" found in it (cpulab.h)")
    name = re.sub(r"[^A-Za-z0-9_.+-]", "_", p.stem)
    return name, resolved({name: {"source": p.name, "unit": m[1]}}, p.parent, "--kernel")[name]


def register(tables: dict[str, dict], where: str) -> None:
    """The plan's kernels as workloads of this process, by name; a built-in's name is refused."""
    for name, d in tables.items():
        known = workloads.registry().get(name)
        if known is not None and not known.declared_in:
            raise KernelError(f"{where}: kernel.{name}: a built-in workload has this name; give yours another")
        workloads.registry()[name] = workload(name, d, where)
