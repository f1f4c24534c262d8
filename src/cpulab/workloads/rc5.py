"""RC5-72: the distributed.net key-search work, RC5-32/12/9 key checks in keys/s."""
from cpulab.workloads import Param, Workload

WORKLOADS = [
    Workload(
        name="rc5-72",
        kernel="rc5_72.c",
        extra_sources=("rc5_body.h",),
        unit="keys",
        description=("distributed.net RC5-72 key check (RC5-32/12/9): blocks of consecutive keys "
                     "against a known plaintext/ciphertext pair; core=portable (C, one key at a "
                     "time) or simd (AVX-512/AVX2/SSE2 chosen at run time)"),
        params={"core": Param("simd", "choice", choices=("portable", "simd"), compiled=True),
                "keys": Param("4096", min=1, max=1 << 32),
                "isa": Param("auto", "choice", choices=("auto", "avx512", "avx2", "sse2"))},
        quick={"core": ["portable", "simd"]},
        full={"core": ["portable", "simd"]},  # isa=avx2|sse2 as an override forces a narrower path
    ),
]
