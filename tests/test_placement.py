"""Placements: each kernel's artifact is the same machine code at several addresses.

For every built-in kernel that builds here: the placements put the timed function at
different offsets within a page, the bytes of every kernel.o function are the object's
own in each (outside the fields the linker fills in), and the harness reports the offset
it really ran at."""
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from cpulab import workloads
from cpulab.compile import artifacts, placement
from cpulab.compile.artifacts import build_executable
from cpulab.plan import toolchain
from cpulab.machine import toolchains

O2 = toolchain.get("O2")
KERNELS = sorted(name for name, w in workloads.registry().items()
                 if not toolchains.libraries_reason(O2, w.requires, w.libs))


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("placements")


def build(name: str, cache: Path) -> artifacts.Artifact:
    w = workloads.get(name)
    return build_executable(w.source, O2, libs=w.libs, cache_dir=cache, placements=4,
                            extra_sources=tuple(workloads.KERNEL_DIR / s for s in w.extra_sources))


@pytest.mark.parametrize("name", KERNELS)
def test_placements_move_the_code_and_keep_its_bytes(name, cache):
    art = build(name, cache)
    got = placement.inspect(art.path, len(art.placements))
    assert got is not None and got.functions > 0
    assert len(set(got.offsets)) > 1, got.offsets  # the timed function sits elsewhere in its page
    assert got.differing == ()  # and is the same code in every placement


def test_the_harness_reports_the_offset_it_ran_at(cache):
    art = build("sha256", cache)
    offsets = placement.inspect(art.path, len(art.placements)).offsets
    for i, want in enumerate(offsets):
        out = subprocess.run([art.placement_path(i), "--samples", "1", "--min-sample-time", "0", "--warmup", "0"],
                             capture_output=True, text=True, timeout=60)
        assert json.loads(out.stdout.splitlines()[-1])["code_offset"] == want


def test_a_changed_instruction_is_found(cache, tmp_path):
    """The check can fail: one byte of k_run changed in one placement is reported."""
    art = build("sha256", cache)
    copy = tmp_path / "art"
    shutil.copytree(Path(art.path).parent, copy)
    exe = copy / f"{Path(art.path).name}.p1"
    with open(exe, "rb") as f:
        elf = ELFFile(f)
        sym = next(s for s in elf.get_section_by_name(".symtab").iter_symbols() if s.name == "k_run")
        seg = next(s for s in elf.iter_segments() if s["p_type"] == "PT_LOAD"
                   and s["p_vaddr"] <= sym["st_value"] < s["p_vaddr"] + s["p_filesz"])
        at = seg["p_offset"] + sym["st_value"] + sym["st_size"] - 1 - seg["p_vaddr"]  # its last byte
    data = bytearray(exe.read_bytes())
    data[at] ^= 0xFF
    exe.write_bytes(bytes(data))
    assert placement.inspect(str(copy / Path(art.path).name), len(art.placements)).differing == ("k_run",)
