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
    how = { choices = ["bytes", "words"], default = "bytes", compiled = true }  # -DCPULAB_HOW_BYTES ...

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
from cpulab.params import Param, ParamError
from cpulab.plan import model
from cpulab.plan.model import KernelTable

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*")
SOURCE_SUFFIXES = (".c", *workloads.CXX_SUFFIXES)


class KernelError(ValueError):
    """A [kernel.NAME] table that cannot be a workload; one line naming the field."""


def _path(text: str, base: Path, where: str, folder: bool = False) -> str:
    p = (base / Path(text).expanduser()).resolve()
    if not (p.is_dir() if folder else p.is_file()):
        raise KernelError(f"{where}: {p} is not {'a directory' if folder else 'a file'}")
    if not folder and p.suffix not in SOURCE_SUFFIXES:
        raise KernelError(f"{where}: {p.name} is not a C or C++ source ({', '.join(SOURCE_SUFFIXES)})")
    return str(p)


def resolved(tables: dict[str, KernelTable] | dict[str, dict], base: Path, where: str) -> dict[str, dict]:
    """A plan's `kernel` tables (read by its model, plan/model.py), with every path absolute
    (relative ones are read from `base`, the plan's folder) and every parameter parsed."""
    if not all(isinstance(v, KernelTable) for v in tables.values()):  # a -k file's, a benchmark's: read as a plan's
        try:
            tables = model.read({"kernel": tables}, where).kernel
        except model.PlanError as e:
            raise KernelError(str(e)) from None
    out = {}
    for name, table in tables.items():
        at = f"{where}: kernel.{name}"
        if not _NAME.fullmatch(name):
            raise KernelError(f"{at}: a kernel's name is letters, digits and _ . + -")
        d = table.model_dump(exclude_none=True)
        out[name] = {**d, "source": _path(d["source"], base, f"{at}.source"),
                     "library": [_path(f, base, f"{at}.library") for f in d["library"]],
                     "include": [_path(f, base, f"{at}.include", folder=True) for f in d["include"]]}
        workload(name, out[name], where)  # every parameter parsed now, before anything is built
    return out


def workload(name: str, d: dict, where: str) -> workloads.Workload:
    """One resolved table as a workload."""
    at = f"{where}: kernel.{name}"
    tolerance = d.get("check_tolerance")
    return workloads.Workload(
        name=name, kernel=d["source"], unit=d["unit"], description=d.get("description") or
        f"your kernel {Path(d['source']).name}",
        params={k: _param(spec, f"{at}.params.{k}") for k, spec in d.get("params", {}).items()},
        libs=tuple(d["libs"]), library_sources=tuple(d["library"]), include_dirs=tuple(d["include"]),
        declared_in=where, check_tolerance=None if tolerance is None else float(tolerance),
        root=d.get("root", ""), trees=tuple(sorted(d.get("trees", {}).items())))


def _param(spec: dict, where: str) -> Param:
    """{ kind = "size", default = "64K", min = "1K", max = "1G" } -> Param; a table with
    choices is a choice, one without a kind an int."""
    choices = spec.get("choices", [])
    kind = spec.get("kind") or ("choice" if choices else "int")
    kw = {"kind": kind, "choices": tuple(choices), "compiled": bool(spec.get("compiled", False))}
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
