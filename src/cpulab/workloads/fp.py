"""Floating point: dot product, Euclidean distance and complex FFT, float and double,
swept over the vector length / FFT size n (the seed's "Why EABI matters" benchmark).

Unit: flop, by the usual conventions: dot 2N, euclid 3N (subtract, multiply, add per
element; the one square root is not counted), complex radix-2 FFT 5 N log2 N (also
for the FFTW peer, whatever FFTW executes).  Each kernel notes n and
working_set_bytes (dot/euclid: the two vectors; fft: the data, the per-stage twiddles
and the bit-reversal swap list; fft-fftw: the data only, FFTW's tables are its own).

Arithmetic intensity (flops per byte of operands, the roofline's x): dot 2 flops per two
elements read, euclid 3; the FFT 5 flops per element per stage, each stage reading and
writing every element's real and imaginary parts (4 values), so 5/4 per value moved
when a stage streams through its level.

The MFLOPS-vs-n curve shows the cache levels: dot and euclid touch 2 N elements, so
double vectors leave a 32 KiB L1d past N = 2048 and a 1 MiB L2 past N = 65536.

Point counts, for planning (each point is one artifact run, ~0.1-0.3 s; the 2^20 FFTs
take up to ~1.5 s of setup and verification, fft-fftw plans for up to 0.5 s):
  quick  9 sizes (2^4, 2^6, ..., 2^20) x 2 precisions = 18 per workload
  full  17 sizes (2^4 .. 2^20)         x 2 precisions = 34 per workload
"""
from __future__ import annotations

from cpulab.workloads import Param, Workload

PRECISIONS = ["float", "double"]
QUICK_N = [str(1 << e) for e in range(4, 21, 2)]
FULL_N = [str(1 << e) for e in range(4, 21)]
PARAMS = {"n": Param("1024", min=1, max=1 << 26),  # FP_MAX_N in fp_common.h
          "precision": Param("double", "choice", choices=("float", "double"))}
GRIDS = dict(quick={"n": QUICK_N, "precision": PRECISIONS}, full={"n": FULL_N, "precision": PRECISIONS})
FFT_HEADERS = ("fp_common.h", "fp_fft.h", "fp_fft_body.h")


def two_arrays(point: dict[str, str]) -> int:
    """Workload.memory: two n-element arrays at least (the vectors; the FFT's real and
    imaginary parts)."""
    return 2 * int(point["n"]) * _value_bytes(point)


def _value_bytes(point: dict[str, str]) -> int:
    return 4 if point["precision"] == "float" else 8


def per_value(flops: float):
    """Workload.flops_per_byte of a kernel doing `flops` per value it moves."""
    return lambda point: flops / _value_bytes(point)

WORKLOADS = [
    Workload(
        name="dot",
        kernel="dot.c",
        extra_sources=("fp_common.h",),
        unit="flop",
        description="dot product of two n-vectors, plain C loop (2n flop); the serial sum "
                    "vectorises only when a variant allows reassociation",
        params=dict(PARAMS),
        sweep_axis="n",
        memory=two_arrays,
        flops_per_byte=per_value(2 / 2),
        **GRIDS,
    ),
    Workload(
        name="euclid",
        kernel="euclid.c",
        extra_sources=("fp_common.h",),
        unit="flop",
        description="Euclidean distance of two n-vectors, plain C loop (3n flop, the sqrt "
                    "not counted)",
        params=dict(PARAMS),
        sweep_axis="n",
        memory=two_arrays,
        flops_per_byte=per_value(3 / 2),
        **GRIDS,
    ),
    Workload(
        name="fft",
        kernel="fft.c",
        extra_sources=FFT_HEADERS,
        unit="flop",
        description="in-place complex radix-2 FFT (iterative Cooley-Tukey, split re/im, "
                    "5 n log2 n flop), n a power of two",
        params=dict(PARAMS),
        sweep_axis="n",
        memory=two_arrays,
        flops_per_byte=per_value(5 / 4),
        **GRIDS,
    ),
    Workload(
        name="fft-fftw",
        kernel="fft_fftw.c",
        extra_sources=FFT_HEADERS,
        unit="flop",
        description="the peer: the same complex FFT through FFTW 3 (FFTW_MEASURE, planning "
                    "capped at 0.5 s; 5 n log2 n flop by convention)",
        params=dict(PARAMS),
        memory=two_arrays,
        libs=("-lfftw3", "-lfftw3f"),
        requires={"fftw3.h": "libfftw3-dev"},
        sweep_axis="n",
        flops_per_byte=per_value(5 / 4),
        **GRIDS,
    ),
]
