"""The loop probe: generated kernels, the difference method, rules and the seed-004 loops.

Timing checks are physical facts with wide margins: a dependent 64-bit ADD is 1 cycle,
a dependent 64-bit IMUL 3 cycles, an L1-hit pointer chase 4-5 cycles on every x86-64
core of the last 15 years.
"""
from __future__ import annotations

import shutil
import statistics
import subprocess

import pytest

from conftest import compile_command, skip_unless_buildable
from cpulab.measure import probes
from cpulab.compile.artifacts import NATIVE_DIR
from cpulab.measure.probes.loop import TEMPLATE, without_fixed_cost

FAST = dict(samples=10, repeats=4, min_sample_time=0.002)


def test_the_calls_fixed_cost_comes_off_every_run():
    """Runs of n and 2n executions a call read c + f/n and c + f/2n: each loses its share
    of f, a - b, so a minority of runs a co-tenant slowed (an N run at half speed) or that
    read low (a 2N run) moves neither it nor the median."""
    c, f_n = 3.0, 0.06
    a = [c + f_n] * 4 + [2 * c + f_n]
    b = [c + f_n / 2] * 4 + [0.9 * c]
    runs = without_fixed_cost(a, b)
    assert len(runs) == 10 and sorted(runs)[4] == pytest.approx(c) and sorted(runs)[5] == pytest.approx(c)
    assert without_fixed_cost([c, None, -1.0], [c, c, c]) == [c, c, c, c]  # no fixed cost; bad runs dropped
    assert without_fixed_cost([c], [c + 0.1]) == [c, c + 0.1]  # a 2N run slower than the N one: nothing off


def test_a_majority_of_slowed_n_runs_does_not_take_the_fixed_cost_off_twice():
    """Two of three N runs 40% slow: a - b between the medians is 0.4c, and taking it off
    would put the headline at 0.6c; the fastest runs' a - b is the true f/2n."""
    c, f_n = 3.0, 0.06
    a = [c + f_n, 1.4 * (c + f_n), 1.4 * (c + f_n)]
    b = [c + f_n / 2] * 3
    assert statistics.median(without_fixed_cost(a, b)) == pytest.approx(c)


def test_dependent_add_is_one_cycle():
    r = probes.measure_loop("add rax, rbx", **FAST)
    assert 0.7 <= r["cycles_per_iteration"] <= 1.5, r
    assert r["instructions"] == 1 and r["timer"] in ("perf", "tsc")
    # every run of both lengths is kept; the headline is their median (the fastest of
    # many ticks x ratio products is biased low)
    assert r["cycles_min"] <= r["cycles_median"] <= r["cycles_max"] and len(r["cycles_runs"]) == 2 * 4
    assert r["cycles_per_iteration"] == pytest.approx(r["cycles_median"])
    assert r["ipc"] == pytest.approx(1 / r["cycles_per_iteration"])
    assert r["ns_per_iteration"] > 0 and r["core_per_tsc"] > 0 and r["tsc_hz"] > 0


@pytest.mark.timing
def test_dependent_imul_is_three_cycles():
    r = probes.measure_loop("imul rax, rbx", **FAST)
    assert 2.2 <= r["cycles_per_iteration"] <= 4.5, r


@pytest.mark.timing
def test_l1_pointer_chase_through_the_self_pointing_scratch_qword():
    # rax is preloaded with rsi, whose first qword holds its own address.
    r = probes.measure_loop("mov rax, [rax]", **FAST)
    assert 3 <= r["cycles_per_iteration"] <= 7, r


def test_att_syntax():
    r = probes.measure_loop("addq %rbx, %rax", syntax="att", **FAST)
    assert r["disassembly"] == ["add rax,rbx"]
    assert 0.7 <= r["cycles_per_iteration"] <= 1.5, r


def test_bad_assembly_raises_with_the_assemblers_message():
    with pytest.raises(probes.ProbeError, match=r"body\.s:2: Error: no such instruction: `frobnicate rax'"):
        probes.measure_loop("add rax, rbx; frobnicate rax")
    with pytest.raises(probes.ProbeError, match="Error"):
        probes.measure_loop("mov rax, [rsi+]")
    with pytest.raises(probes.ProbeError, match="Error"):
        probes.measure_loop("movq %rax, %rbx, %rcx", syntax="att")


@pytest.mark.parametrize("body, kw, why", [
    ("add rsp, 8", {}, "may not name rsp"),
    ("mov rbp, rax", {}, "may not name rbp"),
    ("add r15, 1", {}, "r15 is the probe's loop counter"),
    ("dec rax; jnz somewhere", {"as_loop": True, "counter": "rax"}, "must branch back"),
    ("dec rax; jnz LOOP", {"as_loop": True, "counter": "rbx"}, "never touches its counter"),
    ("", {}, "empty body"),
])
def test_rules_are_enforced_before_building(body, kw, why):
    with pytest.raises(probes.ProbeError, match=why):
        probes.measure_loop(body, **kw)


def test_unbalanced_push_fails_verification_and_balanced_push_pop_runs():
    with pytest.raises(probes.ProbeError, match="moved rsp"):
        probes.measure_loop("push rax", samples=1, repeats=1, min_sample_time=0.001)
    r = probes.measure_loop("push rbx; pop rbx", samples=1, repeats=1, min_sample_time=0.001)
    assert r["instructions"] == 2


def test_instructions_are_counted_from_the_disassembly():
    insns = probes.assemble(probes.split_body("add rax, rbx; imul rcx, rcx\nvpaddd xmm1, xmm2, xmm3"))
    assert len(insns) == 3 and insns[1].startswith("imul")


def test_seed004_sequences_match_the_published_instruction_counts():
    # Instructions per iteration = cycles x IPC in the seed's Pentium Pro row.
    published = probes.SEED004_PUBLISHED["Pentium Pro"]
    assert len(probes.SEED004_SEQUENCES) == 7
    for (_, body), (cycles, ipc) in zip(probes.SEED004_SEQUENCES, published):
        stmts = [probes.expand_loop(s) for s in probes.split_body(body)]
        assert len(probes.assemble(stmts, as_loop=True)) == round(cycles * ipc)


def test_as_loop_counts_the_users_own_loop():
    # No core takes more than two taken branches per cycle; nor is DEC/JNZ 10 cycles.
    r = probes.measure_loop("dec rax; jnz LOOP", as_loop=True, counter="rax", iterations=1000, **FAST)
    assert r["instructions"] == 2 and r["counter"] == "rax"
    assert 0.45 <= r["cycles_per_iteration"] <= 10, r


@pytest.mark.parametrize("cc, flags", [("gcc", ["-O0"]), ("gcc", ["-O2"]), ("gcc", ["-O3", "-march=native"]),
                                       ("clang", ["-O2"]), ("gcc", ["-m32", "-O2"])])
def test_generated_kernel_builds_without_warnings(tmp_path, cc, flags):
    skip_unless_buildable(cc, flags)
    strict = [*compile_command(cc, flags), "-Wall", "-Wextra", "-Werror", "-I", str(NATIVE_DIR), "-I", str(TEMPLATE.parent)]
    harness = tmp_path / "harness.o"  # compiled once under the same flags: most of a build's time
    p = subprocess.run([*strict, "-c", str(NATIVE_DIR / "harness.c"), "-o", str(harness)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    for stmts, syntax, as_loop, counter in [(["add rax, rbx", "vpaddd xmm1, xmm2, xmm3"], "intel", False, "rcx"),
                                            (["addq %rbx, %rax"], "att", False, "rcx"),
                                            (["rol ebx, 3", "dec ecx", "jnz 1b"], "intel", True, "ecx")]:
        src = tmp_path / "k.c"
        src.write_text(probes.kernel_source(stmts, syntax, 4, as_loop, counter, 16))
        p = subprocess.run([*strict, str(harness), str(src), "-o", str(tmp_path / "k"), "-lm"], capture_output=True, text=True)
        assert p.returncode == 0, p.stderr


@pytest.mark.skipif(not shutil.which("llvm-mca"), reason="llvm-mca missing (install llvm)")
def test_mca_models_a_dependent_add_as_one_cycle():
    p = probes.mca_predict("add rax, rbx")
    assert 0.9 <= p["cycles_per_iteration"] <= 1.1
    p = probes.mca_predict("dec rax; jnz LOOP", as_loop=True)
    assert p["instructions"] == 2


@pytest.mark.skipif(not shutil.which("llvm-mca"), reason="llvm-mca missing (install llvm)")
def test_mca_models_an_input_once(monkeypatch):
    """A loop asked for again (an explanation and its builds' code show it twice) is
    modelled once, and each caller gets its own copy of the answer."""
    import subprocess
    from cpulab.measure.probes import mca
    mca.mca_cpu()  # asks llc once, through the same subprocess.run
    runs = []
    real = subprocess.run
    monkeypatch.setattr(mca.subprocess, "run", lambda *a, **k: runs.append(a) or real(*a, **k))
    body = "imul rax, rbx; add rcx, rax; dec rdx; jnz LOOP"  # an input no other test models
    first = probes.mca_predict(body, as_loop=True)
    first["cycles_per_iteration"] = None
    again = probes.mca_predict(body, as_loop=True)
    assert len(runs) == 1 and again["instructions"] == 4 and again["cycles_per_iteration"] >= 1
    probes.mca_predict(body, as_loop=True, iterations=200)  # another input: modelled
    assert len(runs) == 2
