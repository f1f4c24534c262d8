"""DES key check: the DES-II work of distributed.net's clients, in keys/s."""
from . import Workload

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
        params={"core": "bitslice", "keys": "16384", "isa": "auto"},
        quick={"core": ["table", "bitslice"]},
        full={"core": ["table", "bitslice"]},  # isa=avx2|portable as an override forces a narrower path
    ),
]
