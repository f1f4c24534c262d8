"""DES key check: the DES-II work of distributed.net's clients, in keys/s."""
from cpulab.workloads import Param, Workload

WORKLOADS = [
    Workload(
        name="des",
        kernel="des.c",
        extra_sources=("des_tables.h", "des_bitslice_body.h", "des_sboxes_bitslice.h"),
        unit="keys",
        description=("DES key check: blocks of consecutive 56-bit keys against a known "
                     "plaintext/ciphertext pair; core=table (S/P tables, key schedule per key) "
                     "or bitslice (S-box logic from tools/gen_des_sboxes.py; AVX-512 vpternlog, "
                     "AVX2 or uint64_t chosen at run time)"),
        params={"core": Param("bitslice", "choice", choices=("table", "bitslice")),
                "keys": Param("16384", min=1, max=1 << 32),
                "isa": Param("auto", "choice", choices=("auto", "avx512", "avx2", "portable"))},
        quick={"core": ["table", "bitslice"]},
        full={"core": ["table", "bitslice"]},  # isa=avx2|portable as an override forces a narrower path
    ),
]
