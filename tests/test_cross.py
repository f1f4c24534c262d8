"""Cross variants (seed 001 on ARM): ELF ISA detection, the emulator prefix, the FP
kernels verifying under qemu-user, and no verdict mixing emulated with native results."""
from __future__ import annotations

import shutil

import pytest

from cpulab.compile import artifacts
from cpulab.compile import emulation
from cpulab.plan import toolchain
from cpulab import workloads
from cpulab.analysis.summary import compare_results
from cpulab.spec.policy import DecisionPolicy
from cpulab.model import Result, Status, Verdict
from cpulab.measure.execute.executor import HarnessJob, default_executor
from cpulab.machine import toolchains

CROSS = ["armel", "armel-softfp", "armhf", "aarch64"]


def elf_header(machine: int, little: bool = True) -> bytes:
    order = "little" if little else "big"
    return b"\x7fELF" + bytes([1, 1 if little else 2]) + bytes(12) + machine.to_bytes(2, order)


@pytest.mark.parametrize("machine,isa", [(40, "arm"), (183, "aarch64"), (62, "x86_64"), (3, "i386"), (8, "")])
def test_elf_isa_reads_e_machine(machine, isa):
    assert emulation.elf_isa(elf_header(machine)) == isa
    assert emulation.elf_isa(elf_header(machine, little=False)) == isa


def test_not_elf_is_no_isa():
    assert emulation.elf_isa(b"#!/bin/sh\n" + bytes(20)) == ""


def test_emulator_only_for_a_foreign_isa(tmp_path):
    arm = tmp_path / "arm"
    arm.write_bytes(elf_header(40))
    assert emulation.emulator_for(str(arm), host="aarch64") == ()
    i386 = tmp_path / "i386"
    i386.write_bytes(elf_header(3))
    assert emulation.emulator_for(str(i386), host="x86_64") == ()
    if shutil.which("qemu-arm") or shutil.which("qemu-arm-static"):
        assert "qemu-arm" in emulation.emulator_for(str(arm), host="x86_64")[0]
    else:
        with pytest.raises(emulation.CannotRun, match="qemu-user"):
            emulation.emulator_for(str(arm), host="x86_64")


def test_cross_variants_name_their_package():
    for name in CROSS:
        v = toolchain.BUILTIN[name]
        assert v.package.startswith("gcc-") and v.isa and "-static" in v.ldflags


@pytest.mark.parametrize("variant", CROSS)
@pytest.mark.parametrize("kernel", ["dot", "euclid", "fft"])
def test_fp_kernels_verify_on_arm(variant, kernel):
    v = toolchain.BUILTIN[variant]
    if why := toolchains.unavailable_reason(v):
        pytest.skip(f"{variant}: {why}")
    art = artifacts.build_artifact(workloads.get(kernel), v)  # the session's cache: one harness.o a compiler
    try:
        em = emulation.emulator_for(art.path)
    except emulation.CannotRun as e:
        pytest.skip(str(e))
    out = default_executor().execute(HarnessJob(art.path, {"n": "256"}, samples=1, min_sample_time=0.001,
                                                warmup=0.0, emulator=em, timeout=120))
    assert out.status == "ok", out.error
    assert out.data["timer"] in ("clock", "perf")  # no TSC off x86
    assert bool(out.data["notes"].get("emulated")) == bool(em)


def _result(variant, emulated, rates):
    return Result(0, "e", "dot", variant, {"n": "1"}, "flop", "MFLOPS", "cycles/flop", Status.OK,
                  emulated=emulated, observations=dict(enumerate(rates)))


def test_emulated_and_native_never_share_a_verdict():
    rows = compare_results([_result("O2", False, [1.0, 1.1, 0.9, 1.0, 1.05]),
                            _result("armel", True, [0.1, 0.11, 0.09, 0.1, 0.1])], {"e": "O2"}, DecisionPolicy())
    assert rows[0].verdict == Verdict.NOT_COMPARABLE and rows[0].ratio is None
    rows = compare_results([_result("armhf", True, [1.0, 1.1, 0.9, 1.0, 1.05]),
                            _result("armel", True, [0.1, 0.11, 0.09, 0.1, 0.1])], {"e": "armhf"},
                           DecisionPolicy(method="unpaired"))
    assert rows[0].verdict == Verdict.SLOWER
