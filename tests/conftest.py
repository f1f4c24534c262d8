"""Shared test helpers: build one kernel with the harness and run it; skip what this
machine cannot build (optional toolchains and libraries), naming the Debian package."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from cpulab import toolchain, workloads
from cpulab.workloads import KERNEL_DIR

NATIVE_DIR = KERNEL_DIR.parent / "native"


def workload_of(kernel: str | None) -> workloads.Workload | None:
    """The workload declared with this kernel file, if any (its libraries and headers)."""
    return next((w for w in workloads.registry().values() if w.kernel == kernel), None)


def skip_unless_buildable(compiler: str = "gcc", flags=(), kernel: str | None = None) -> None:
    """Skip the calling test, in one line naming the Debian package, when this machine
    cannot build with `compiler` and the ABI flags among `flags` (-m32), or lacks a library
    that `kernel` (a file in cpulab/kernels) needs: the checks `cpulab run` makes
    (toolchain.unavailable_reason, libraries_reason), so tests and runs skip alike."""
    abi = tuple(f for f in flags if f == "-m32")
    package = next((v.package for v in toolchain.BUILTIN.values() if (v.compiler, v.abi_flags) == (compiler, abi)), "")
    v = toolchain.Variant("test", compiler, abi_flags=abi, package=package)
    why = toolchain.unavailable_reason(v)
    if not why and (w := workload_of(kernel)):
        why = toolchain.libraries_reason(v, w.requires, w.libs)
    if why:
        pytest.skip(why)


@pytest.fixture(scope="session")
def build_kernel(tmp_path_factory):
    """build_kernel("sha256.c", cflags=("-O2",)) -> path of an executable, linked with the
    libraries its workload declares; skips (skip_unless_buildable) what cannot be built here."""
    out = tmp_path_factory.mktemp("artifacts")
    built: dict[tuple, Path] = {}

    def build(kernel: str, cflags=("-O2",), compiler="gcc") -> Path:
        key = (kernel, tuple(cflags), compiler)
        if key not in built:
            skip_unless_buildable(compiler, cflags, kernel)
            w = workload_of(kernel)
            exe = out / f"{Path(kernel).stem}-{len(built)}"
            subprocess.run(
                [compiler, *cflags, "-I", str(NATIVE_DIR), str(NATIVE_DIR / "harness.c"),
                 str(KERNEL_DIR / kernel), "-o", str(exe), *(w.libs if w else ()), "-lm"],
                check=True, capture_output=True, text=True)
            built[key] = exe
        return built[key]

    return build


def run_artifact(exe: Path, *args: str, timeout: float = 120) -> dict:
    """Run an artifact and parse its single JSON line."""
    p = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=timeout)
    return json.loads(p.stdout)


TEST_KERNELS = Path(__file__).resolve().parent / "kernels"


@pytest.fixture(scope="session", autouse=True)
def isolated_cache(tmp_path_factory):
    """Artifacts and data files of a test session go to a fresh cache directory."""
    import os
    old = os.environ.get("CPULAB_CACHE_DIR")
    os.environ["CPULAB_CACHE_DIR"] = str(tmp_path_factory.mktemp("cache"))
    yield
    if old is None:
        os.environ.pop("CPULAB_CACHE_DIR", None)
    else:
        os.environ["CPULAB_CACHE_DIR"] = old


@pytest.fixture
def misbehave(monkeypatch):
    """Register the test-only 'misbehave' workload (tests/kernels/misbehave.c)."""
    from cpulab import workloads
    w = workloads.Workload(name="misbehave", kernel=str(TEST_KERNELS / "misbehave.c"), unit="iterations",
                           description="fails on purpose", params={"mode": "ok"})
    table = {**workloads.registry(), "misbehave": w}
    monkeypatch.setattr(workloads, "registry", lambda: table)
    return w
