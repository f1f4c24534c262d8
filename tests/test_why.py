"""The cause beside each decided comparison (analysis/why.py), read from the results and
each build's hot loop, and the loop facts it is read from (measure/explain/code.py)."""
from __future__ import annotations

import pytest

from cpulab.analysis.why import attach_causes, cause
from cpulab.measure.explain.code import Function, Instruction, carried_chain, float_style, vector_bits
from cpulab.model import Comparison, Result, Status, Verdict
from cpulab.report.views import cause_notes

L1 = {"level": 1, "type": "Data", "size_bytes": 48 << 10}
L2 = {"level": 2, "type": "Unified", "size_bytes": 2 << 20}


def _result(variant: str, cycles: float, instructions: float | None = None, ws: int = 1 << 10) -> Result:
    return Result(id=0, experiment="e", workload="dot", variant=variant, params={"n": "1024"}, unit="flop",
                  rate_unit="MFLOPS", per_clock_unit="cycles/flop", status=Status.OK, median=1e3 / cycles,
                  cycles_per_unit=cycles, instructions_per_unit=instructions, notes={"working_set_bytes": ws})


def _comparison(ratio: float, verdict: str = Verdict.FASTER) -> Comparison:
    return Comparison(experiment="e", workload="dot", params={"n": "1024"}, baseline="O2", variant="O3",
                      verdict=verdict, ratio=ratio)


def _loop(listing: list[str], mca: float | None = None, bits: int = 0, chain=None) -> dict:
    return {"listing": listing, "instructions": len(listing), "vector_bits": bits, "x87": False,
            "chain": chain if chain is not None else [], **({"mca": {"cycles_per_iteration": mca}} if mca else {})}


def test_fewer_instructions_at_the_same_rate_is_the_work():
    why = cause(_comparison(1.25), _result("O2", 1.0, 3.0), _result("O3", 0.8, 2.4), None, None, [L1, L2])
    assert "20% fewer instructions a flop (3 -> 2.4) at about the same 3.00 -> 3.00 instructions a cycle" \
        in why["sentence"]
    assert why["figures"]["instructions_per_unit"] == [3.0, 2.4]


def test_the_same_instructions_at_another_rate_is_the_rate():
    why = cause(_comparison(0.8, Verdict.SLOWER), _result("O2", 1.0, 3.0), _result("O3", 1.25, 3.0), None, None, [])
    assert "3.00 -> 2.40 instructions a cycle, with the same work: the rate moved, not the work" in why["sentence"]


def test_the_hot_loops_side_by_side_with_the_model_read_per_unit():
    """A 4-wide loop of 12 instructions against a scalar one of 6: iterations a unit come
    from the counts, so the model's 16 against 4 cycles an iteration is 1.0 a unit."""
    scalar = _loop(["addsd"] * 6, mca=4.0, chain=["addsd"])
    vector = _loop(["vaddsd"] * 12, mca=16.0, bits=256, chain=["vaddsd"] * 4)
    why = cause(_comparison(1.05), _result("O2", 1.0, 3.0), _result("O3", 0.95, 1.5), scalar, vector, [])
    s = why["sentence"]
    assert "O3's hot loop uses 256-bit vectors against O2's scalar code" in s
    assert "its loop-carried chain: 4 dependent vaddsd an iteration, against 1 dependent addsd" in s
    assert why["figures"]["mca_ratio_per_unit"] == pytest.approx((16 * 1.5 / 12) / (4 * 3.0 / 6))
    assert "the model sees no difference" in s


def test_unlike_loops_without_a_count_are_not_set_side_by_side_as_work():
    """Without instruction counts the iterations of a vector and a scalar loop are unlike
    work: the model's cycles an iteration are quoted, saying they are not per unit, and
    no agreement with the measurement is claimed; with no parameters, no "at" is said."""
    scalar = _loop(["addsd"] * 5, mca=1.0)
    vector = _loop(["vaddpd"] * 15, mca=2.5, bits=128)
    why = cause(_comparison(3.0), _result("O2", 1.2), _result("O3", 0.3), scalar, vector, [])
    s = why["sentence"]
    assert "llvm-mca models 1 -> 2.5 cycles an iteration of 5 -> 15 instructions (their iterations do unlike " \
        "work: with instructions counted, --instructions, the model is read per flop)" in s
    assert "mca_ratio_per_unit" not in why["figures"] and "as measured" not in s and "opposite" not in s
    c = _comparison(3.0)
    c.params, c.why = {}, why
    assert cause_notes([c]) == [f"why O3 is faster than O2: {s}"]


def test_nothing_that_tells_the_builds_apart_is_said_so_with_where_the_data_lives():
    same = _loop(["addsd xmm0,xmm1", "jne"], mca=4.0)
    why = cause(_comparison(1.03), _result("O2", 1.0, ws=1 << 20), _result("O3", 0.97, ws=1 << 20),
                same, same, [L1, L2])
    assert "does not settle it" in why["sentence"] and "working set 1 MiB: in L2 2 MiB" in why["sentence"]


def test_only_decided_comparisons_with_evidence_get_a_cause():
    """A same verdict gets none, nor a decided one where nothing was read (a run stored
    by an earlier version); the terminal gives one line per variant and verdict."""
    results = [_result("O2", 1.0, 3.0), _result("O3", 0.8, 2.4)]
    decided, same, bare = _comparison(1.25), _comparison(1.0, Verdict.SAME), _comparison(1.25)
    attach_causes([decided, same], results, {}, [])
    assert decided.why and same.why is None
    attach_causes([bare], [_result("O2", 1.0), _result("O3", 0.8)], {}, [])
    assert bare.why is None
    (line,) = cause_notes([decided, same])
    # the measured figure first, then what explains it
    assert line.startswith("why O3 is faster than O2: 1 -> 0.8 cycles a flop measured; 20% fewer instructions")


def test_a_same_verdict_gets_a_cause_where_the_code_differs():
    """-march=native no faster than O2: wider vectors, the same chain of adds an element."""
    scalar = _loop(["addsd"] * 6, chain=["addsd"])
    vector = _loop(["vaddsd"] * 12, bits=256, chain=["vaddsd"] * 4)
    results = [_result("O2", 1.0), _result("O3", 1.0)]
    same, alike = _comparison(1.0, Verdict.SAME), _comparison(1.0, Verdict.SAME)
    attach_causes([same], results, {"e/dot/O2": {"hot_loop": scalar}, "e/dot/O3": {"hot_loop": vector}}, [])
    assert same.why["sentence"].startswith("the same time although O3's hot loop uses 256-bit vectors")
    attach_causes([alike], results, {"e/dot/O2": {"hot_loop": scalar}, "e/dot/O3": {"hot_loop": scalar}}, [])
    assert alike.why is None
    assert cause_notes([same])[0].startswith("why O3 is the same as O2: the same time although")


def _listing(*texts: str) -> list[Instruction]:
    return [Instruction(i, t) for i, t in enumerate(texts)]


@pytest.mark.parametrize("texts, chain", [
    (("movsd xmm1,QWORD PTR [rdi+rax*8]", "mulsd xmm1,QWORD PTR [rsi+rax*8]", "addsd xmm0,xmm1", "jne 0"),
     ["addsd"]),  # xmm1 is loaded afresh each trip: only xmm0 carries
    (("vmulpd ymm1,ymm4,YMMWORD PTR [rcx]", "vaddsd xmm0,xmm0,xmm1", "vunpckhpd xmm2,xmm1,xmm1",
      "vaddsd xmm0,xmm0,xmm2", "jne 0"), ["vaddsd", "vaddsd"]),
    (("vfmadd231pd zmm0,zmm1,ZMMWORD PTR [rdi]", "vfmadd231pd zmm2,zmm3,ZMMWORD PTR [rsi]", "jne 0"),
     ["vfmadd231pd"]),  # two independent accumulators: each chain one long
    (("fld QWORD PTR [eax]", "fmul QWORD PTR [edx]", "faddp st(1),st", "jne 0"), None),  # x87: not followed
])
def test_the_loop_carried_chain(texts, chain):
    assert carried_chain(_listing(*texts)) == chain


def test_the_vector_width_is_the_widest_packed_register():
    assert vector_bits(_listing("vmulpd ymm1,ymm4,YMMWORD PTR [rcx]", "vaddsd xmm0,xmm0,xmm1")) == 256
    assert vector_bits(_listing("mulsd xmm1,xmm2", "addsd xmm0,xmm1")) == 0


def test_a_cross_build_read_without_a_profile_says_how_it_does_its_floating_point():
    """armel (soft float: every flop a library call) against armhf (VFP instructions),
    read from the disassembly: the seed 001 contrast in words."""
    soft = Function("k_run", _listing("ldrd r2, r3, [r7, #8]!", "bl 0x14108 <__muldf3>", "bl 0x13d54 <__aeabi_dadd>",
                                      "bne 0x12da8 <k_run+0x10>"))
    vfp = Function("k_run", _listing("vldmia r0!, {d5}", "vmla.f64 d7, d5, d6", "bne 0x12da8 <k_run+0x10>"))
    fs, fv = float_style({"k_run": soft}), float_style({"k_run": vfp})
    assert fs == {"soft_float_calls": {"__muldf3": 1, "__aeabi_dadd": 1}, "fp_instructions": {}}
    assert fv == {"soft_float_calls": {}, "fp_instructions": {"vmla.f64": 1}}
    c = Comparison(experiment="e", workload="dot", params={"n": "1024"}, baseline="armel", variant="armhf",
                   verdict=Verdict.FASTER, ratio=9.0)
    results = [_result("armel", 9.0), _result("armhf", 1.0)]
    attach_causes([c], results, {"e/dot/armel": {"float": fs}, "e/dot/armhf": {"float": fv}}, [])
    assert "armhf does its floating point in instructions (vmla.f64), armel in library calls (__muldf3, " \
           "__aeabi_dadd)" in c.why["sentence"]


def test_each_point_is_explained_by_the_code_its_own_point_runs():
    """DES per clock: the table and the bitslice cores are two codes of one build, read
    apart (workloads.code_key); each point's why names its own core's loops (the bitslice
    point once read the table core's sentence).  Sizes alone share one reading."""
    from cpulab.workloads import code_key
    assert code_key("e", "dot", "O2", {"n": "16"}) == code_key("e", "dot", "O2", {"n": "4096"}) == "e/dot/O2"
    scalar, vector = _loop(["xor"] * 6, chain=["xor"]), _loop(["vpxor"] * 12, bits=256, chain=["vpxor"] * 4)
    codes = {code_key("e", "des", v, {"core": core}): {"hot_loop": loop}
             for v in ("O2", "O3") for core, loop in (("table", scalar), ("bitslice", vector if v == "O3" else scalar))}
    assert len(codes) == 4
    results, comparisons = [], []
    for core in ("table", "bitslice"):
        params = {"core": core, "keys": "16384"}
        results += [Result(id=0, experiment="e", workload="des", variant=v, params=params, unit="key", rate_unit="keys/s",
                           per_clock_unit="cycles/key", status=Status.OK, median=1e3, cycles_per_unit=1.0)
                    for v in ("O2", "O3")]
        comparisons.append(Comparison(experiment="e", workload="des", params=params, baseline="O2", variant="O3",
                                      verdict=Verdict.SAME, ratio=1.0))
    attach_causes(comparisons, results, codes, [])
    table, bitslice = comparisons
    assert table.why is None  # the same loops at the table core
    assert "256-bit vectors" in bitslice.why["sentence"]
