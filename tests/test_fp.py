"""Floating-point workloads: dot, euclid, fft and the fft-fftw peer.

Known answers live in the kernels' k_verify (exact integer dots, perfect-square
distances, a long-double reference within Higham's error bounds, a direct long-double
DFT, a pure tone, Parseval and the inverse).  These tests add an independent reference:
numpy, on the same deterministic inputs (the kernels' 64-bit LCG, rebuilt here).
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from conftest import run_artifact
from cpulab import workloads

CORRECTNESS = ("--samples", "1", "--min-sample-time", "0.001", "--warmup", "0")
MASK = (1 << 64) - 1
FFTW_LIBS = ("-lfftw3", "-lfftw3f")
KERNELS = {"dot": ("dot.c", ()), "euclid": ("euclid.c", ()), "fft": ("fft.c", ()),
           "fft-fftw": ("fft_fftw.c", FFTW_LIBS)}
EPS = {"float": np.finfo(np.float32).eps, "double": np.finfo(np.float64).eps}


def lcg(seed: int, count: int) -> np.ndarray:
    """fp_lcg (fp_common.h): count values in [-1, 1), multiples of 2^-23."""
    out = np.empty(count)
    s = seed
    for i in range(count):
        s = (s * 6364136223846793005 + 1442695040888963407) & MASK
        out[i] = ((s >> 40) - 8388608) / 8388608
    return out


def run(build_kernel, name, cflags=("-O2",), *params, args=CORRECTNESS):
    exe = build_kernel(KERNELS[name][0], cflags=cflags)  # skips fft-fftw without libfftw3-dev
    return run_artifact(exe, *args, *(a for p in params for a in ("--param", p)))


# ---- every kernel verifies under the usual builds ---------------------------------------

@pytest.mark.parametrize("cflags", [("-O0",), ("-O2",), ("-O3", "-march=native")], ids=" ".join)
@pytest.mark.parametrize("precision", ["float", "double"])
@pytest.mark.parametrize("name", list(KERNELS))
def test_verifies(build_kernel, name, precision, cflags):
    for n in (16, 1024, 65536):
        d = run(build_kernel, name, cflags, f"n={n}", f"precision={precision}")
        assert d["status"] == "ok", f"{name} n={n} {precision}: {d['error']}"
        assert d["unit"] == "flop"
        assert d["notes"]["n"] == n
        elem = 4 if precision == "float" else 8
        assert d["notes"]["working_set_bytes"] >= 2 * n * elem  # at least the data


@pytest.mark.parametrize("name", ["dot", "euclid", "fft"])
def test_verifies_i386(build_kernel, name):
    """i386 (x87 arithmetic, 80-bit intermediates): the bounds still hold."""
    for precision in ("float", "double"):
        d = run(build_kernel, name, ("-m32", "-O2"), "n=4096", f"precision={precision}")
        assert d["status"] == "ok", f"{name} {precision}: {d['error']}"


def test_defaults(build_kernel):
    for name in KERNELS:
        d = run(build_kernel, name)
        assert d["status"] == "ok", d["error"]
        assert d["notes"]["n"] == 1024
        assert d["notes"]["working_set_bytes"] >= 2 * 1024 * 8  # double by default


# ---- parameters ---------------------------------------------------------------------

@pytest.mark.parametrize("name", ["fft", "fft-fftw"])
@pytest.mark.parametrize("n", ["1000", "3", "1", "0", "-8"])
def test_fft_rejects_size_that_is_not_a_power_of_two(build_kernel, name, n):
    d = run(build_kernel, name, ("-O2",), f"n={n}")
    assert d["status"] == "setup-failed"
    assert "power of two" in d["error"] or "between 1 and" in d["error"], d["error"]
    assert "ns" not in d


@pytest.mark.parametrize("name", list(KERNELS))
def test_rejects_unknown_precision(build_kernel, name):
    d = run(build_kernel, name, ("-O2",), "precision=half")
    assert d["status"] == "setup-failed" and "precision" in d["error"]


def test_dot_euclid_accept_any_length(build_kernel):
    for name in ("dot", "euclid"):
        for n in (1, 3, 1000, 4099):
            d = run(build_kernel, name, ("-O2",), f"n={n}")
            assert d["status"] == "ok", f"{name} n={n}: {d['error']}"


# ---- work accounting ------------------------------------------------------------------

@pytest.mark.parametrize("name,flop", [
    ("dot", lambda n: 2 * n),
    ("euclid", lambda n: 3 * n),
    ("fft", lambda n: 5 * n * int(math.log2(n))),
    ("fft-fftw", lambda n: 5 * n * int(math.log2(n))),
])
def test_work_is_the_flop_convention_times_reps(build_kernel, name, flop):
    for n in (16, 256, 4096):
        d = run(build_kernel, name, ("-O2",), f"n={n}", "precision=float",
                args=("--samples", "2", "--min-sample-time", "0.002", "--warmup", "0"))
        assert d["status"] == "ok", d["error"]
        assert d["reps"] >= 1
        assert d["work"] == flop(n) * d["reps"]


# ---- independent reference: numpy on the same inputs --------------------------------------

@pytest.mark.parametrize("precision", ["float", "double"])
@pytest.mark.parametrize("n", [1, 7, 1024, 4099])
def test_dot_and_euclid_match_numpy(build_kernel, n, precision):
    # dot.c draws a[i], b[i] alternately from seed 0x2545F4914F6CDD1D; euclid.c from
    # 0x9E3779B97F4A7C15.  The inputs are exact in float, so float64 products are exact
    # and numpy's float64 sum is far more accurate than the float kernel.
    u = EPS[precision] / 2
    ab = lcg(0x2545F4914F6CDD1D, 2 * n)
    a, b = ab[0::2], ab[1::2]
    want = float(np.dot(a, b))
    got = run(build_kernel, "dot", ("-O2",), f"n={n}", f"precision={precision}")["notes"]["result"]
    bound = (n * u / (1 - n * u) + 2 * n * EPS["double"]) * float(np.abs(a * b).sum())
    assert abs(got - want) <= bound

    ab = lcg(0x9E3779B97F4A7C15, 2 * n)
    a, b = ab[0::2], ab[1::2]
    want = float(np.sqrt(np.sum((a - b) ** 2)))
    got = run(build_kernel, "euclid", ("-O2",), f"n={n}", f"precision={precision}")["notes"]["result"]
    k = n + 3
    assert abs(got - want) <= (k * u / (1 - k * u) + 2 * k * EPS["double"]) * want


@pytest.mark.parametrize("precision", ["float", "double"])
@pytest.mark.parametrize("name", ["fft", "fft-fftw"])
def test_fft_bin_matches_numpy(build_kernel, name, precision):
    """Bin 1 of the transform of the timed input (fft_fill, seed 0x5EED: re, im
    alternately) against numpy.fft, within Higham's bound on the whole error norm."""
    for n in (2, 64, 1024, 16384):
        x = lcg(0x5EED, 2 * n)
        z = x[0::2] + 1j * x[1::2]
        X = np.fft.fft(z)
        d = run(build_kernel, name, ("-O2",), f"n={n}", f"precision={precision}")
        assert d["status"] == "ok", d["error"]
        got = complex(d["notes"]["bin1_re"], d["notes"]["bin1_im"])
        u = EPS[precision] / 2
        tol = 8 * u * math.log2(n) * float(np.linalg.norm(X)) + 1e-12 * abs(X[1])
        assert abs(got - X[1]) <= tol, (n, got, X[1])


# ---- declarations --------------------------------------------------------------------

def test_workload_declarations():
    for name, (src, libs) in KERNELS.items():
        w = workloads.get(name)
        assert w.kernel == src and w.unit == "flop" and tuple(w.libs) == libs
        assert w.defaults() == {"n": "1024", "precision": "double"}
        assert all(s.exists() for s in w.sources())
        for profile, lo_hi_step in (("quick", 2), ("full", 1)):
            grid = w.grid(profile)
            ns = sorted({int(p["n"]) for p in grid})
            assert ns == [1 << e for e in range(4, 21, lo_hi_step)]
            assert {p["precision"] for p in grid} == {"float", "double"}
            assert len(grid) == 2 * len(ns)
    assert workloads.get("fft-fftw").requires == {"fftw3.h": "libfftw3-dev"}
