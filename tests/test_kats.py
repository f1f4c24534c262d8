"""Every known-answer check can fail.

Each kernel is built with -DCPULAB_BREAK_KAT, which perturbs one constant of the code it
times (native/cpulab.h: a round constant, an input bit, a coefficient, a loop bound,
never the expected answer), and must then come out verify-failed with no samples, the
error naming the check that caught it; the same kernel and parameters built normally
verify.  Kernels with several cores verify the timed core first, so each core's own
check is shown to fail.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import pytest

from conftest import run_artifact
from cpulab.workloads import KERNEL_DIR

CORRECTNESS = ("--samples", "1", "--min-sample-time", "0.001", "--warmup", "0")
BROKEN = ("-O1", "-DCPULAB_BREAK_KAT")  # -O1: rc5_72.c and des.c compile in 2/3 of -O2's time

# The bitslice DES and SIMD RC5 cores by their lane counts (notes "lanes", "simd_lanes").
DES_CORES = {1: "table", 64: "portable", 256: "avx2", 512: "avx512"}
RC5_CORES = {1: "portable", 4: "sse2", 8: "avx2", 16: "avx512"}


@dataclass(frozen=True)
class Case:
    kernel: str
    params: dict[str, str] = field(default_factory=dict)
    error: str = ""  # in the error of the broken build ("{core}": the timed core's name)

    @property
    def id(self) -> str:
        return " ".join([self.kernel.removesuffix(".c"), *self.params.values()])


CASES = [
    Case("sha256.c", error="known-answer test failed"),
    Case("sha256_shani.c", error="SHA-NI digest of FIPS 180-4 vector 0 is wrong"),
    Case("sha256_openssl.c", error="EVP digest of FIPS 180-4 vector 0 is wrong"),
    Case("sha256_file.c", error="portable core fails the FIPS 180-4 vectors"),
    Case("rc5_72.c", {"core": "portable", "keys": "256"}, "portable core: Rivest vector 1"),
    Case("rc5_72.c", {"core": "simd", "keys": "256"}, "{core} core: Rivest vector 1"),
    Case("des.c", {"core": "table", "keys": "1024"}, "table core: published vector"),
    Case("des.c", {"core": "bitslice", "keys": "1024"}, "{core} core: published vector"),
    *(Case(f"{k}.c", {"precision": p}, e) for k, e in (("dot", "dot of i and 1-i"), ("euclid", "euclid of a 1-element"))
      for p in ("float", "double")),
    *(Case("fft.c", {"precision": p}, "FFT of size 2 differs from the direct DFT") for p in ("float", "double")),
    # n = 2: the inverse and the forward DFT agree, so FFTW's sign flip shows at n = 4.
    *(Case("fft_fftw.c", {"precision": p}, "FFT of size 4 differs from the direct DFT") for p in ("float", "double")),
    # the page cycle's last line points at itself (random mode), and Fisher-Yates over
    # the pages makes several cycles (pagestride)
    Case("memlat.c", {"mode": "random"}, "the chain is not one cycle"),
    Case("memlat.c", {"mode": "pagestride"}, "the chain is not one cycle"),
    Case("bandwidth.c", error="read: sum of 0..199"),
    Case("align.c", {"level": "l1"}, "on the ring cut to 3 nodes the timed chase stopped"),
    Case("align.c", {"level": "l2", "width": "4"}, "on the ring cut to 3 nodes the timed chase stopped"),
]


def test_every_kernel_has_a_case():
    assert {c.kernel for c in CASES} == {p.name for p in KERNEL_DIR.glob("*.c")}


def run(exe, case: Case, tmp_path) -> dict:
    params = dict(case.params)
    if case.kernel == "sha256_file.c":  # a small file and hashlib's digest of it
        data = bytes(range(256)) * 400
        (tmp_path / "f.bin").write_bytes(data)
        params.update(path=str(tmp_path / "f.bin"), expect=hashlib.sha256(data).hexdigest())
    return run_artifact(exe, *CORRECTNESS, *(a for k, v in params.items() for a in ("--param", f"{k}={v}")))


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_broken_computation_is_verify_failed_and_never_timed(build_kernel, tmp_path, case):
    good = run(build_kernel(case.kernel), case, tmp_path)
    if good["status"] == "skipped":  # e.g. no SHA extensions on this CPU
        pytest.skip(good["error"])
    assert good["status"] == "ok", good["error"]
    d = run(build_kernel(case.kernel, cflags=BROKEN), case, tmp_path)
    assert d["status"] == "verify-failed", d
    for key in ("ns", "cycles", "samples", "reps", "work", "checksum"):
        assert key not in d
    lanes = d["notes"].get("lanes", d["notes"].get("simd_lanes"))
    core = (DES_CORES if case.kernel == "des.c" else RC5_CORES).get(lanes, "")
    assert case.error.format(core=core) in d["error"]
