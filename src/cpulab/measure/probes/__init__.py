"""Probes: small generated or fixed kernels that measure one fact of the core.

* asm.py      a body of x86-64 assembly: statements, rules, GNU as
* loop.py     the loop probe (`cpulab probe 'imul rax, rbx'`), its kernel template loop_probe.c
* mca.py      llvm-mca's prediction for the same body
* align.py    dependent-load latency by alignment (`cpulab align`)
* seed004.py  seed 004's tables 2 and 3, as probes a plan can ask for
* roofline.py the roofline's roofs: flops per cycle per instruction set, bytes per cycle per level
* sampling.py running a probe artifact through the executor, one figure per run

Every process goes through the executor (execute/executor.py), like a plan's jobs.  A probe that
a plan can name (plan key `probe_tables`) is a `Probe` in a module-level list `PROBES`
of any module here; the registry collects them, as the workload registry does.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Callable

from cpulab.declarations import collect, lookup
from cpulab.plan.plan import PlanError


@dataclass(frozen=True)
class Probe:
    name: str
    description: str
    # The analysis kind its data is stored as (declared with its view in cli/kinds.py),
    # e.g. "probe" or "align".
    kind: str
    # measure(timer=..., executor=...) -> the data stored with the run
    measure: Callable[..., dict]
    # Measures more than its own core (the last cache, the memory bus): never beside an
    # experiment on the other CPU.
    alone: bool = False


@cache
def registry() -> dict[str, Probe]:
    return collect(__name__, __path__, "PROBES", "probe")


def get(name: str) -> Probe:
    return lookup(registry(), name, "probe")


# The public API, so callers write probes.measure_loop(...) whatever module holds it.
__all__ = ["Probe", "registry", "get", "ALIGN_GROUPS", "align_group", "align_points", "align_table", "ProbeError",
           "assemble", "expand_loop", "split_body", "kernel_source", "measure_loop", "mca_predict",
           "SEED004_PUBLISHED", "SEED004_SEQUENCES", "seed004_table"]
from cpulab.measure.probes.align import ALIGN_GROUPS, align_group, align_points, align_table  # noqa: E402
from cpulab.measure.probes.asm import ProbeError, assemble, expand_loop, split_body  # noqa: E402
from cpulab.measure.probes.loop import kernel_source, measure_loop  # noqa: E402
from cpulab.measure.probes.mca import mca_predict  # noqa: E402
from cpulab.measure.probes.seed004 import SEED004_PUBLISHED, SEED004_SEQUENCES, seed004_table  # noqa: E402


def check_names(names: list[str], where: str) -> None:
    """A plan's probe_tables name known probes (the plan stage cannot see this catalogue)."""
    for t in names:
        if t not in registry():
            raise PlanError(f"{where}: probe_tables: unknown probe {t!r} (known: {', '.join(registry())})")
