"""The roofline: where each kernel is placed under the measured roofs, the probe's
working sets, and the views."""
from __future__ import annotations

import pytest

from cpulab.cli.kinds import VIEWS
from cpulab import machine
from cpulab.analysis.roofline import level_of, place, roofline
from cpulab.measure.probes import roofline as roofline_probe
from cpulab.measure.probes.roofline import MEMORY_SPAN, read_points
from cpulab.model import Result
from cpulab.report import plots
from cpulab.report.analysis_views import analysis_tables

KIB, MIB = 1024, 1024 * 1024
ROOFS = {"compute": [{"isa": "SSE2", "flops_per_cycle": 4.0, "cycles_per_body": 6.0, "body": "addpd xmm0, xmm14"},
                     {"isa": "AVX2 FMA", "flops_per_cycle": 16.0, "cycles_per_body": 6.0, "body": "vfmadd231pd"}],
         "memory": [{"level": "L1d", "working_set_bytes": 16 * KIB, "holds_bytes": 32 * KIB, "bytes_per_cycle": 64.0,
                     "gb_per_s": 200.0, "variant": "O3-native"},
                    {"level": "L2", "working_set_bytes": 512 * KIB, "holds_bytes": MIB, "bytes_per_cycle": 32.0,
                     "gb_per_s": 100.0, "variant": "O3-native"},
                    {"level": "memory", "working_set_bytes": 64 * MIB, "holds_bytes": None, "bytes_per_cycle": 4.0,
                     "gb_per_s": 12.0, "variant": "O2"}]}


def result(workload: str, params: dict, cycles_per_unit: float, unit: str = "flop", **kw) -> Result:
    return Result(1, "e", workload, "O2", params, unit, "MFLOPS", "cycles/flop", "ok", median=1.0,
                  cycles_per_unit=cycles_per_unit, **kw)


@pytest.mark.parametrize("working_set, level", [(1, "L1d"), (32 * KIB, "L1d"), (32 * KIB + 1, "L2"),
                                                (MIB, "L2"), (2 * MIB, "memory")])
def test_a_working_set_reads_from_the_smallest_level_holding_it(working_set, level):
    assert level_of(working_set, ROOFS["memory"])["level"] == level


def test_a_low_intensity_kernel_is_bound_by_its_level_and_a_high_one_by_the_peak():
    # dot: 2 flops per 2 doubles read = 1/8 flop per byte; 1024 doubles x 2 = 16 KiB: L1d
    dot = place(result("dot", {"n": "1024", "precision": "double"}, cycles_per_unit=0.5), ROOFS)
    assert dot["intensity"] == pytest.approx(1 / 8) and dot["level"] == "L1d"
    assert dot["roof_flops_per_cycle"] == pytest.approx(64 / 8) and dot["bound"] == "L1d bandwidth"
    assert dot["flops_per_cycle"] == pytest.approx(2.0) and dot["share"] == pytest.approx(2 / 8)
    # float: 1/4 flop per byte, and the peak doubles with the lanes: still under 64 B/cycle x 1/4 = 16 < 32
    single = place(result("dot", {"n": "1024", "precision": "float"}, cycles_per_unit=0.5), ROOFS)
    assert single["roof_flops_per_cycle"] == pytest.approx(16.0) and single["bound"] == "L1d bandwidth"


def test_the_peak_bounds_where_the_bandwidth_would_allow_more():
    roofs = {**ROOFS, "memory": [{**ROOFS["memory"][0], "bytes_per_cycle": 512.0}, *ROOFS["memory"][1:]]}
    fft = place(result("fft", {"n": "256", "precision": "double"}, cycles_per_unit=0.25), roofs)
    assert fft["intensity"] == pytest.approx(5 / 32)  # 5 flops per element per stage, 4 doubles moved
    assert fft["bound"] == "AVX2 FMA peak" and fft["roof_flops_per_cycle"] == pytest.approx(16.0)


def test_a_streaming_kernel_is_placed_by_its_bytes_and_a_copy_is_not():
    read = place(result("bandwidth", {"op": "read", "size": str(64 * MIB)}, cycles_per_unit=0.5, unit="bytes"), ROOFS)
    assert read["flops_per_cycle"] == pytest.approx(2 / 8) and read["level"] == "memory"
    assert read["share"] == pytest.approx(0.25 / (4.0 / 8))
    assert place(result("bandwidth", {"op": "copy", "size": "4096"}, 0.5, unit="bytes"), ROOFS) is None


def test_a_point_above_its_levels_roof_is_placed_under_the_nearer_level_that_holds_it_saying_why():
    """dot over 8 MiB (memory, 4 B/cycle: a roof of 0.5 flop/cycle) at 1 flop a cycle: it
    moved 8 bytes a cycle, which L2's 32 holds; above every roof there is nowhere to go."""
    fast = place(result("dot", {"n": str(512 * KIB), "precision": "double"}, cycles_per_unit=1.0), ROOFS)
    assert fast["level"] == "memory" and fast["bound"] == "L2 bandwidth" and fast["share"] == pytest.approx(1 / 4)
    assert "above the memory roof of its working set (8 bytes a cycle" in fast["why"]
    assert place(result("dot", {"n": str(512 * KIB), "precision": "double"}, cycles_per_unit=1 / 9), ROOFS)["why"] \
        .startswith("above every roof")
    assert "why" not in place(result("dot", {"n": str(512 * KIB), "precision": "double"}, 4.0), ROOFS)


def test_no_flops_no_cycles_or_an_emulator_is_not_placed():
    assert place(result("sha256", {}, 10.0, unit="bytes"), ROOFS) is None
    assert place(result("dot", {"n": "64"}, None), ROOFS) is None
    assert place(result("dot", {"n": "64"}, 1.0, emulated=True), ROOFS) is None
    assert roofline(ROOFS, [result("sha256", {}, 10.0, unit="bytes")]) is None


def test_the_probe_reads_half_of_each_data_cache_and_memory_beyond_the_last():
    caches = [{"level": 1, "name": "L1d 48 KiB", "type": "Data", "size_bytes": 48 * KIB},
              {"level": 1, "name": "L1i 32 KiB", "type": "Instruction", "size_bytes": 32 * KIB},
              {"level": 2, "name": "L2 2 MiB", "type": "Unified", "size_bytes": 2 * MIB},
              {"level": 3, "name": "L3 480 MiB", "type": "Unified", "size_bytes": 480 * MIB}]
    points = read_points(caches)
    assert points[:3] == [("L1d", 24 * KIB, 48 * KIB), ("L2", MIB, 2 * MIB), ("L3", 240 * MIB, 480 * MIB)]
    assert points[3] == ("memory", MEMORY_SPAN[2], None)  # 4 x 480 MiB is capped
    assert read_points([])[-1] == ("memory", MEMORY_SPAN[1], None)


def test_the_views_draw_the_roofs_and_the_kernels():
    placed = roofline(ROOFS, [result("dot", {"n": "1024", "precision": "double"}, 0.5)])
    roofs, = [t for t in analysis_tables("roofline-roofs", ROOFS, VIEWS) if "bandwidth" in t.title]
    assert [str(r[0]) for r in roofs.rows] == ["L1d", "L2", "memory"]
    t, = analysis_tables("roofline", placed, VIEWS)
    assert [str(c) for c in t.rows[0]][-3:] == ["L1d bandwidth", "8.000", "25%"]
    assert plots.roofline(placed).startswith("<svg")


@pytest.mark.timing
def test_twelve_independent_scalar_chains_retire_at_least_one_flop_a_cycle(monkeypatch):
    """Every x86-64 core of the last 15 years has an add and a multiply pipe: a scalar
    add/mul mix of 12 independent chains retires 1 to 4 flops a cycle.  The upper bound
    is twice that (a wrong clock or estimate, not a fast core, lies beyond it): a Zen 4
    guest, whose two add and two multiply pipes retire 4.0 (3.97-4.23 in ten runs, alone
    and beside a busy loop), read 6.26 once in a suite: 1.92 cycles a body where the
    pipes need 3, most likely the call's fixed cost taken off from N runs a co-tenant
    slowed (the loop probe's docstring)."""
    monkeypatch.setattr(roofline_probe, "PEAK_LOOPS", {"scalar SSE2": roofline_probe.PEAK_LOOPS["scalar SSE2"]})
    if "sse2" not in machine.cpu_flags():
        pytest.skip("not an x86-64 CPU")
    row, = roofline_probe.peak_flops()
    assert row["flops_per_body"] == 12 and 0.9 <= row["flops_per_cycle"] <= 8, row
