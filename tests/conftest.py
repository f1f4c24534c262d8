"""Shared test helpers: build one kernel with the harness and run it."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from cpulab.workloads import KERNEL_DIR

NATIVE_DIR = KERNEL_DIR.parent / "native"


@pytest.fixture(scope="session")
def build_kernel(tmp_path_factory):
    """build_kernel("sha256.c", cflags=("-O2",), libs=()) -> path of an executable."""
    out = tmp_path_factory.mktemp("artifacts")
    built: dict[tuple, Path] = {}

    def build(kernel: str, cflags=("-O2",), libs=(), compiler="gcc") -> Path:
        key = (kernel, tuple(cflags), tuple(libs), compiler)
        if key not in built:
            exe = out / f"{Path(kernel).stem}-{len(built)}"
            subprocess.run(
                [compiler, *cflags, "-I", str(NATIVE_DIR), str(NATIVE_DIR / "harness.c"),
                 str(KERNEL_DIR / kernel), "-o", str(exe), *libs, "-lm"],
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
                           description="fails on purpose", params={"mode": workloads.Param("ok", "text")})
    table = {**workloads.registry(), "misbehave": w}
    monkeypatch.setattr(workloads, "registry", lambda: table)
    return w
