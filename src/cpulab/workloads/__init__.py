"""The workload registry: name -> kernel source, parameters and unit of work.

Each module in this package declares its workloads in a module-level list named
``WORKLOADS``; the registry collects them all.  A workload is one C kernel file under
``cpulab/kernels/`` (implementing ``native/cpulab.h``) plus what is needed to build and
sweep it.  Adding a workload means adding a module here and a C file there; nothing else
changes.
"""
from __future__ import annotations

import dataclasses
import itertools
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Callable

from cpulab.declarations import collect, lookup
from cpulab.params import Param

KERNEL_DIR = Path(__file__).resolve().parent.parent / "kernels"
CXX_SUFFIXES = (".cc", ".cpp", ".cxx", ".c++", ".C")  # a kernel's sources built as C++

# How a unit of work is shown: (rate label, divisor of units/s), per-clock label.
UNITS = {
    "bytes": ("MB/s", 1e6, "cycles/byte"),
    "keys": ("keys/s", 1.0, "cycles/key"),
    "flop": ("MFLOPS", 1e6, "cycles/flop"),
    "loads": ("Mloads/s", 1e6, "cycles/load"),
    "elements": ("Melem/s", 1e6, "cycles/element"),
    "iterations": ("Miter/s", 1e6, "cycles/iteration"),
    "runs": ("runs/s", 1.0, "cycles/run"),  # whole processes (cpulab time, programs)
}


@dataclass(frozen=True)
class Workload:
    """One kernel and how to build and sweep it.

    params: every parameter, declared as a Param (default, kind, range or choices);
        values given by users are parsed against it (cpulab.params) before anything runs.
    quick / full: parameter grids for the two profiles; each maps a parameter name to the
        list of values to sweep, in canonical form, or is a list of such maps whose points
        are joined (a mode swept over sizes of its own).  Parameters not named keep their default.
    libs: extra link flags (e.g. ``("-lcrypto",)``) for peers built on a library.
    requires: header files the kernel includes from a -dev package, as
        ``{"openssl/sha.h": "libssl-dev"}``; missing -> skipped, naming the package.
    A kernel that needs an instruction set checks CPUID itself and calls k_skip.
    """

    name: str
    kernel: str
    unit: str
    description: str
    params: dict[str, Param] = field(default_factory=dict)
    quick: dict[str, list[str]] | list[dict[str, list[str]]] = field(default_factory=dict)
    full: dict[str, list[str]] | list[dict[str, list[str]]] = field(default_factory=dict)
    libs: tuple[str, ...] = ()
    requires: dict[str, str] = field(default_factory=dict)
    extra_sources: tuple[str, ...] = ()  # headers the kernel includes (for the cache hash)
    # A user's kernel (a plan's [kernel.NAME] table, plan/kernels.py): absolute paths, its
    # library sources compiled under the variant beside the kernel, the directories its
    # includes are searched in (every header the compiler reads enters the build's hash),
    # and where it was declared.  Without a k_verify of its own, its check is automatic:
    # the checksum of one k_run call equals the baseline's, exactly or (check_tolerance)
    # as doubles within that relative tolerance.
    library_sources: tuple[str, ...] = ()
    include_dirs: tuple[str, ...] = ()
    declared_in: str = ""
    check_tolerance: float | None = None
    # `cpulab ci`: the git work tree (root) its files live in, and the tree each variant
    # builds instead ("base", "head": the two commits, exported): for_variant.
    root: str = ""
    trees: tuple[tuple[str, str], ...] = ()
    # Called with one parameter point before it runs; returns parameters to add (e.g. the
    # path of a data file it made and the digest Python's hashlib expects of it).
    prepare: Callable[[dict[str, str]], dict[str, str]] | None = None
    # How it is shown (generic views read these; none of them knows a workload by name):
    hidden_params: tuple[str, ...] = ()  # parameters no table shows (a file's path, its digest)
    sweep_axis: str | None = None  # the numeric parameter its curves run along
    times: bool = False  # show real/user/sys per repetition (the work is a whole file)
    io_bound: bool = False  # waits for a device count as its time (signals.contamination)
    # The analysis kinds made of its results after a run (cli/kinds.py declares how each
    # is made and drawn); with
    # view="analysis" the report draws them instead of rate curves and knees.
    analyses: tuple[str, ...] = ()
    view: str = "rate"
    # Bytes of memory one parameter point allocates (at least): a plan with a point that
    # needs more than the machine has available is refused before anything is built.
    memory: Callable[[dict[str, str]], int] | None = None
    # Files `prepare` would write for one point, path -> bytes (none if already made):
    # their total is checked against the free space where they go.
    files: Callable[[dict[str, str]], dict[Path, int]] | None = None
    # Floating-point operations per byte of operands it reads and writes at one point,
    # by its unit's convention (None: no flops there): where the roofline places it
    # (analysis/roofline.py).
    flops_per_byte: Callable[[dict[str, str]], float | None] | None = None
    # Its instruction count (where a plan asks for one) runs valgrind's cache model too:
    # simulated D1 and last-level misses per unit, for kernels whose work is the memory.
    simulate_caches: bool = False

    def __post_init__(self):
        for key, p in self.params.items():
            if not isinstance(p, Param):
                raise TypeError(f"workload {self.name!r}: parameter {key!r} must be declared as a Param")

    def for_variant(self, variant: str) -> "Workload":
        """The workload as `variant` builds it: its files in that variant's tree, if it has one."""
        tree = dict(self.trees).get(variant)
        if not tree:
            return self

        def moved(path: str) -> str:
            p = Path(path)
            return str(Path(tree) / p.relative_to(self.root)) if p.is_relative_to(self.root) else path
        return dataclasses.replace(self, kernel=moved(self.kernel),
                                   library_sources=tuple(map(moved, self.library_sources)),
                                   include_dirs=tuple(map(moved, self.include_dirs)))

    def held(self, points: list[dict[str, str]]) -> tuple[str, ...]:
        """The compiler flags of a build that runs these points: for each compiled
        parameter (Param.compiled) of which they run some choices, not all, a define
        -DCPULAB_<NAME>_<CHOICE> per choice they run; none where they run every choice."""
        flags = []
        for key, p in self.params.items():
            run = {pt.get(key, p.default) for pt in points}
            if p.compiled and run < set(p.choices):
                flags += ["-D" + re.sub(r"\W", "_", f"CPULAB_{key}_{c}".upper()) for c in p.choices if c in run]
        return tuple(flags)

    def defaults(self) -> dict[str, str]:
        return {k: p.default for k, p in self.params.items()}

    @property
    def source(self) -> Path:
        return KERNEL_DIR / self.kernel

    def sources(self) -> list[Path]:
        """Every file whose content goes into the artifact hash."""
        return [self.source] + [KERNEL_DIR / s for s in self.extra_sources]

    def grid(self, grid: str = "quick", overrides: dict[str, list[str]] | None = None) -> list[dict[str, str]]:
        """The parameter points to measure: each product of the grid's sweep (quick or full)
        over the defaults, overrides replacing an axis in every product, points in order
        and once each."""
        for key in overrides or {}:
            if key not in self.params:
                raise KeyError(f"workload {self.name!r} has no parameter {key!r} "
                               f"(it has: {', '.join(sorted(self.params)) or 'none'})")
        sweep = self.full if grid == "full" else self.quick
        points: dict[tuple, dict[str, str]] = {}
        for product in (sweep if isinstance(sweep, list) else [sweep]):
            axes = {**{k: [p.default] for k, p in self.params.items()}, **product, **(overrides or {})}
            for combo in itertools.product(*axes.values()):
                points.setdefault(combo, dict(zip(axes, combo)))
        return list(points.values())


def size_bytes(point: dict[str, str]) -> int:
    """Workload.memory of a kernel whose working set is its `size` parameter."""
    return int(point["size"])


@cache
def registry() -> dict[str, Workload]:
    found = collect(__name__, __path__, "WORKLOADS", "workload")
    for w in found.values():
        if w.unit not in UNITS:
            raise ValueError(f"workload {w.name!r} has unknown unit {w.unit!r}")
    return found


def get(name: str) -> Workload:
    return lookup(registry(), name, "workload")


def code_key(experiment: str, workload: str, variant: str, params: dict[str, str]) -> str:
    """The key of the code read of a build (a `code` analysis) that a comparison's why at
    these parameters is read from: its experiment, workload and variant, and the values of
    the parameters that choose which code runs (a `choice`: DES's table or bitslice core);
    points that differ only in sizes run the same loops and share one reading."""
    w = registry().get(workload)
    chosen = [f"{k}={v}" for k, v in sorted(params.items()) if w and k in w.params and w.params[k].kind == "choice"]
    return "/".join([experiment, workload, variant, *chosen])
