"""The second witness: instructions per unit counted under valgrind, of the timed work
alone, and the words where it and the time disagree."""
from __future__ import annotations

import shutil

import pytest

from conftest import TEST_KERNELS
from cpulab.compile import artifacts
from cpulab.estimates import witness_words
from cpulab.measure import instructions
from cpulab.model import Verdict
from cpulab.plan.toolchain import Variant

needs_valgrind = pytest.mark.skipif(shutil.which("valgrind") is None,
                                    reason="valgrind is not installed (Debian package valgrind)")


@pytest.fixture(scope="module")
def three_per_unit():
    return artifacts.build_executable(TEST_KERNELS / "three_per_unit.c", Variant("t", cflags=("-O2",))).path


@needs_valgrind
def test_the_count_is_the_timed_work_alone(three_per_unit):
    """A loop of exactly three instructions per unit: the count is 3 per unit plus the
    C loop's few per 4096-trip rep, whatever the 100,000-step set-up and the harness
    execute around it; and it repeats to 0.01%."""
    exe = three_per_unit
    first = instructions.count(exe, {}, {"lanes": 1}, tsc_hz=2e9)
    assert 3.0 <= first <= 3.0 + 20 / 4096
    assert instructions.count(exe, {}, tsc_hz=2e9) == pytest.approx(first, rel=1e-4)


@needs_valgrind
def test_another_path_under_valgrind_gives_no_count(three_per_unit):
    exe = three_per_unit
    with pytest.raises(instructions.CountError, match="another path.*lanes 1 where timed 2"):
        instructions.count(exe, {}, {"lanes": 2}, tsc_hz=2e9)


def test_without_valgrind_the_reason_names_the_package(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(instructions.CountError, match="Debian package valgrind"):
        instructions.count("/bin/true", {})


@pytest.mark.parametrize("verdict, instruction_ratio, words", [
    (Verdict.FASTER, 1.0, "the same instructions, yet faster: where the code sits"),
    (Verdict.SLOWER, 1.0004, "the same instructions, yet slower"),
    (Verdict.SAME, 0.80, "20.0% fewer instructions, yet the same time: bound by memory or latency"),
    (Verdict.FASTER, 1.10, "10.0% more instructions, yet faster"),
    (Verdict.SLOWER, 0.95, "5.0% fewer instructions, yet slower"),
    (Verdict.FASTER, 0.80, ""),  # fewer instructions and faster: they agree
    (Verdict.UNCLEAR, 1.0, ""),  # nothing decided, nothing to contrast
])
def test_two_witnesses_in_words(verdict, instruction_ratio, words):
    said = witness_words(verdict, instruction_ratio)
    assert said.startswith(words) if words else said == ""
