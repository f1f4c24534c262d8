"""The native harness: timers, calibration, the known-answer gate, the JSON protocol."""
import json
import math
import subprocess
import time
from pathlib import Path

import pytest

from conftest import TEST_KERNELS, run_artifact


@pytest.mark.timing
def test_tsc_timer_reports_core_cycles(build_kernel):
    exe = build_kernel("sha256.c")
    r = run_artifact(exe, "--timer", "tsc", "--samples", "3", "--min-sample-time", "0.002")
    assert r["status"] == "ok" and r["timer"] == "tsc"
    # Physical sanity: a core clock between 0.3 and 8 GHz, TSC between 0.3 and 8 GHz.
    assert 0.3e9 < r["tsc_hz"] < 8e9
    core_hz = r["tsc_hz"] * r["core_per_tsc"]
    assert 0.3e9 < core_hz < 8e9
    # cycles = ticks x ratio, and ticks ~ ns x tsc_hz: cycles/ns is the core clock.
    for ns, cyc in zip(r["ns"], r["cycles"]):
        assert 0.5 * core_hz < cyc / ns * 1e9 < 1.5 * core_hz
    assert all(v is None for v in r["instructions"])


def test_clock_timer_has_no_cycles(build_kernel):
    r = run_artifact(build_kernel("sha256.c"), "--timer", "clock", "--samples", "2", "--min-sample-time", "0.001")
    assert r["status"] == "ok" and r["timer"] == "clock"
    assert all(c is None for c in r["cycles"])


def test_perf_timer_works_or_says_why(build_kernel):
    exe = build_kernel("sha256.c")
    p = subprocess.run([str(exe), "--timer", "perf", "--samples", "1", "--min-sample-time", "0.001"],
                       capture_output=True, text=True)
    r = json.loads(p.stdout)
    if r["status"] == "ok":  # a machine with counters: cycles and instructions both counted
        assert r["timer"] == "perf" and all(c > 0 for c in r["cycles"]) and all(i > 0 for i in r["instructions"])
    else:  # no counters: a forced perf timer is an error naming the cause
        assert p.returncode == 2 and r["status"] == "error" and "perf" in r["error"]
        auto = run_artifact(exe, "--samples", "1", "--min-sample-time", "0.001")
        assert auto["timer"] in ("tsc", "clock") and auto["perf_error"]


def test_sample_lasts_at_least_min_sample_time(build_kernel):
    r = run_artifact(build_kernel("sha256.c"), "--samples", "4", "--min-sample-time", "0.02")
    assert r["reps"] >= 1
    assert min(r["ns"]) > 0.5 * 0.02e9  # wide margin: the clock may speed up after calibration
    assert r["work"] == r["reps"] * 16384


def test_failed_known_answer_is_never_timed(build_kernel):
    exe = build_kernel(str(TEST_KERNELS / "misbehave.c"))
    p = subprocess.run([str(exe), "--param", "mode=wrong"], capture_output=True, text=True)
    r = json.loads(p.stdout)
    assert p.returncode == 3 and r["status"] == "verify-failed" and "42" in r["error"]
    assert "ns" not in r


def test_skip_and_setup_failure_statuses(build_kernel):
    exe = build_kernel(str(TEST_KERNELS / "misbehave.c"))
    assert run_artifact(exe, "--param", "mode=skip")["status"] == "skipped"
    assert run_artifact(exe, "--param", "mode=nosetup")["status"] == "setup-failed"


def test_bad_usage_is_exit_2(build_kernel):
    exe = build_kernel("sha256.c")
    p = subprocess.run([str(exe), "--samples", "0"], capture_output=True, text=True)
    assert p.returncode == 2 and '"usage"' in p.stdout
    p = subprocess.run([str(exe), "--timer", "sundial"], capture_output=True, text=True)
    assert p.returncode == 2


def test_add_chain_calibration_is_stable(build_kernel):
    """Two calibrations agree: the add chain is a clock, not noise."""
    exe = build_kernel("sha256.c")
    a = [run_artifact(exe, "--calibrate-only")["core_per_tsc"] for _ in range(3)]
    assert all(math.isfinite(x) for x in a)
    assert max(a) / min(a) < 1.3


FAST = ("--samples", "1", "--min-sample-time", "0.0001", "--warmup", "0")


@pytest.mark.parametrize("value, got", [("16", 16), ("0", 0), ("-42", -42), ("9007199254740992", 2**53)])
def test_decimal_integer_parameters_are_read_whole(build_kernel, value, got):
    r = run_artifact(build_kernel(str(TEST_KERNELS / "param_echo.c")), "--param", f"i={value}", *FAST)
    assert r["status"] == "ok" and r["notes"]["i"] == got


@pytest.mark.parametrize("value", ["16K", "1e6", "010", "0x10", "1.5", " 16", "16 ", "", "-", "+5",
                                   "99999999999999999999"])
def test_unreadable_integer_parameter_is_setup_failed_naming_it(build_kernel, value):
    """What strtoll would have misread (16K as 16, 1e6 as 1, 010 as 8) fails the point."""
    exe = build_kernel(str(TEST_KERNELS / "param_echo.c"))
    p = subprocess.run([str(exe), "--param", f"i={value}", *FAST], capture_output=True, text=True)
    r = json.loads(p.stdout)
    assert p.returncode == 3 and r["status"] == "setup-failed", r
    assert f"parameter i={value} " in r["error"] and "ns" not in r


@pytest.mark.parametrize("value, got", [("1.5", 1.5), ("-2", -2.0), ("1e-3", 1e-3), ("0.25E2", 25.0)])
def test_decimal_number_parameters_are_read_whole(build_kernel, value, got):
    r = run_artifact(build_kernel(str(TEST_KERNELS / "param_echo.c")), "--param", f"x={value}", *FAST)
    assert r["status"] == "ok" and r["notes"]["x"] == got


@pytest.mark.parametrize("value", ["1.5s", "0x1p3", "inf", "nan", "1e999", "", "1,5"])
def test_unreadable_number_parameter_is_setup_failed_naming_it(build_kernel, value):
    r = run_artifact(build_kernel(str(TEST_KERNELS / "param_echo.c")), "--param", f"x={value}", *FAST)
    assert r["status"] == "setup-failed" and f"parameter x={value} " in r["error"]


def test_a_real_kernel_given_16K_fails_instead_of_hashing_16_bytes(build_kernel):
    exe = build_kernel("sha256.c")
    bad = run_artifact(exe, "--param", "size=16K", *FAST)
    assert bad["status"] == "setup-failed" and "size=16K" in bad["error"]
    good = run_artifact(exe, "--param", "size=16384", *FAST)
    assert good["status"] == "ok" and good["work"] == good["reps"] * 16384


@pytest.mark.parametrize("args", [("--samples", "5x"), ("--samples", "010"), ("--warmup", "abc"),
                                  ("--warmup", "-1"), ("--min-sample-time", "-1"), ("--min-sample-time", "nan"),
                                  ("--profile-code", "1s"), ("--tsc-hz", "fast"), ("--tsc-hz", "0")])
def test_unreadable_harness_option_is_usage_error(build_kernel, args):
    p = subprocess.run([str(build_kernel("sha256.c")), *args], capture_output=True, text=True)
    assert p.returncode == 2 and json.loads(p.stdout)["status"] == "usage"


def test_a_given_tsc_rate_is_used_and_the_ratio_still_measured(build_kernel):
    """--tsc-hz (the run's own calibration) skips the 30 ms spin that measures the rate;
    the core/TSC ratio and every sample's own ratios are still measured."""
    exe = build_kernel("sha256.c")
    cal = run_artifact(exe, "--calibrate-only")
    r = run_artifact(exe, "--timer", "tsc", "--tsc-hz", repr(cal["tsc_hz"]), "--samples", "3",
                     "--min-sample-time", "0.002")
    assert r["status"] == "ok" and r["tsc_hz"] == cal["tsc_hz"]
    assert 0.2 < r["core_per_tsc"] < 5  # measured: a core clock within a sane multiple of the TSC
    assert all(x > 0 for x in r["ratio_before"] + r["ratio_after"])


def test_a_job_without_a_rate_is_given_the_one_measured_here_before(build_kernel, monkeypatch):
    """A native job that names no TSC rate is given the one the first native process on
    this machine measured (its 30 ms spin skipped); an emulated job and a calibration are
    left to measure their own."""
    from cpulab.measure.execute import executor
    from cpulab.measure.execute.jobs import HarnessJob
    monkeypatch.setattr(executor, "_tsc_hz", None)
    exe = build_kernel("sha256.c")
    job = HarnessJob(exe, samples=2, min_sample_time=0.001, warmup=0)
    assert executor.with_known_tsc(job) is job
    first = executor.LocalExecutor().execute(job)
    assert first.status == "ok" and executor._tsc_hz == first.data["tsc_hz"] > 0
    given = executor.with_known_tsc(job)
    assert given.tsc_hz == first.data["tsc_hz"] and "--tsc-hz" in given.argv()
    for own in (HarnessJob(exe, emulator=("/usr/bin/qemu-x86_64",)), HarnessJob(exe, calibrate_only=True),
                HarnessJob(exe, tsc_hz=1e9)):
        assert executor.with_known_tsc(own) is own
    assert executor.LocalExecutor().execute(job).data["tsc_hz"] == first.data["tsc_hz"]


def test_signals_around_each_sample_are_physical(build_kernel):
    r = run_artifact(build_kernel("sha256.c"), "--timer", "tsc", "--samples", "6", "--min-sample-time", "0.002")
    for key in ("invol_switches", "vol_switches", "offcpu_ns", "migrated", "steal_ticks", "ratio_before",
                "ratio_after", "canary_before", "canary_after"):
        assert len(r[key]) == 6, key
    assert all(m == 0 for m in r["migrated"])  # the executor pins the process
    assert all(x >= 0 for x in r["invol_switches"] + r["vol_switches"])
    assert all(-1e6 < o <= ns for o, ns in zip(r["offcpu_ns"], r["ns"]))  # off-CPU is part of the wall time
    for rb, ra in zip(r["ratio_before"], r["ratio_after"]):
        assert 0.3e9 < rb * r["tsc_hz"] < 8e9 and 0.3e9 < ra * r["tsc_hz"] < 8e9  # a core clock
    # Independent adds: more than one per cycle on any superscalar x86, at most 8 ALUs.
    assert all(0.5 < c < 8 for c in r["canary_before"] + r["canary_after"])


def test_threads_building_one_tool_at_once_never_collide(tmp_path):
    """Two threads of one process (a cluster client's, say) build the same tool together:
    each writes its own temporary file, so neither renames the other's away."""
    from concurrent.futures import ThreadPoolExecutor

    from cpulab.compile import artifacts
    src = tmp_path / "tool.c"
    src.write_text("int main(void) { return 0; }\n")
    with ThreadPoolExecutor(8) as pool:
        paths = list(pool.map(lambda _: artifacts.build_tool(src), range(16)))
    assert len(set(paths)) == 1 and Path(paths[0]).is_file()


def test_given_reps_are_used_and_verified_skips_only_the_known_answer_test(build_kernel):
    """--reps N: every sample does N repetitions, no calibration; --verified: the
    known-answer test is skipped (the runner passes it once a process of the same
    executable has passed it), so a build whose test fails runs only with it."""
    r = run_artifact(build_kernel("sha256.c"), "--reps", "7", "--samples", "3", "--min-sample-time", "0.002")
    assert r["status"] == "ok" and r["reps"] == 7
    broken = build_kernel("sha256.c", cflags=("-O2", "-DCPULAB_BREAK_KAT"))
    p = subprocess.run([str(broken), "--samples", "1", "--min-sample-time", "0.001"], capture_output=True, text=True)
    assert json.loads(p.stdout)["status"] == "verify-failed"
    assert run_artifact(broken, "--verified", "--samples", "1", "--min-sample-time", "0.001")["status"] == "ok"


def test_phases_outside_the_samples_fit_in_the_process(build_kernel):
    """The harness's own account of its time (the run's time split): every phase is
    non-negative and, with the samples, fits within the process's wall time."""
    t0 = time.perf_counter()
    r = run_artifact(build_kernel("sha256.c"), "--samples", "4", "--min-sample-time", "0.002")
    wall_ns = (time.perf_counter() - t0) * 1e9
    phases = [r["setup_ns"], r["calibrate_ns"], r["around_ns"]]
    assert all(x >= 0 for x in phases)
    assert sum(phases) + sum(r["ns"]) < wall_ns
    assert r["calibrate_ns"] > 0.002e9 * 0.9  # it holds the warm-up: one sample's time, the --warmup (20 ms) capped
