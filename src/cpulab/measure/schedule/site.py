"""Where a plan meets a machine (Site): what the runner asks of this machine
(runner.LocalSite) or of a cluster worker (cluster.MachineSite) alike."""
from __future__ import annotations

from typing import Protocol

from cpulab import workloads
from cpulab.compile.artifacts import Artifact, Built
from cpulab.compile.programs import ProgramBuild
from cpulab.measure.execute.executor import Executor
from cpulab.plan import toolchain
from cpulab.plan.programs import Program


class Site(Protocol):
    """Where a plan meets a machine: its identity, its builds (kernels and programs), its
    data files, its page cache, its measured processes (`executor`) and its probe tables.
    LocalSite is this machine; cluster.MachineSite is a worker of a cluster, which is sent
    a program's source and builds it, makes its inputs and runs it with its own paths."""
    executor: Executor

    def identity(self, timer: str) -> dict: ...
    def compiler_version(self, v: toolchain.Variant) -> str: ...
    def build(self, w: workloads.Workload, v: toolchain.Variant) -> Built: ...
    def place(self, art: Artifact, i: int) -> str: ...  # the path of placement i, linked there
    def remove_placements(self) -> None: ...  # those this run linked there
    def build_program(self, p: Program, v: toolchain.Variant) -> ProgramBuild: ...
    def input_file(self, size: int) -> str: ...
    def evict(self, files: list[str]) -> str: ...
    def prepare(self, w: workloads.Workload, params: dict[str, str]) -> dict[str, str]: ...
    def probe_table(self, name: str, timer: str): ...
    def spare_executor(self) -> Executor | None: ...
