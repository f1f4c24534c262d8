"""des: DES key check, table and bitslice cores.

The kernel's own k_verify checks FIPS 46 / FIPS 81 / NBS SP 500-20 vectors and a planted
key for every core.  Here: the generated S-box circuits are compiled on their own and
must reproduce the FIPS 46-3 tables on all 64 inputs; the committed header must be what
the generator writes; every core passes its known answers under several builds; a
corrupted expected vector is never timed; and a model of the key numbering (where the
planted key lies) predicts the k_run checksum every core must return.
"""
from __future__ import annotations

import platform
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import run_artifact
from cpulab.workloads import KERNEL_DIR, get

ROOT = Path(__file__).resolve().parent.parent  # the repository (tools/ is not installed)
GENERATOR = ROOT / "tools" / "gen_des_sboxes.py"
HEADER = KERNEL_DIR / "des_sboxes_bitslice.h"
CORRECTNESS = ("--samples", "1", "--min-sample-time", "0.001", "--warmup", "0")
# min-sample-time 0: reps = 1 and k_run(ctx, 1) is called three times (calibration + two
# samples), so the checksum is the XOR of the results for blocks 0, 1 and 2.
ONE_REP = ("--samples", "2", "--min-sample-time", "0", "--warmup", "0")
MASK64 = (1 << 64) - 1
RUN_START = 0x00C0FFEE000000  # des.c: first key number of the run
RUN_SECRET = RUN_START + 1234  # des.c: the key the run's ciphertext was made with


def is_x86() -> bool:
    return platform.machine() in ("x86_64", "i386", "i686", "AMD64")


def sbox_tables() -> list[list[int]]:
    """des_sbox[8][64] from des_tables.h (FIPS 46-3 layout: 16 * row + column)."""
    text = (KERNEL_DIR / "des_tables.h").read_text()
    body = re.search(r"des_sbox\[8\]\[64\]\s*=\s*\{(.*?)\};", text, re.S).group(1)
    nums = [int(v) for v in re.findall(r"\d+", body)]
    assert len(nums) == 512
    return [nums[64 * s:64 * s + 64] for s in range(8)]


def test_sbox_tables_are_permutation_rows():
    # FIPS 46-3: each row of each S-box is a permutation of 0..15; spot values from the standard.
    boxes = sbox_tables()
    for box in boxes:
        for row in range(4):
            assert sorted(box[16 * row:16 * row + 16]) == list(range(16))
    assert boxes[0][:4] == [14, 4, 13, 1] and boxes[7][-4:] == [3, 5, 6, 11]


CHECKER = r"""
#include <stdint.h>
#include <stdio.h>
#define DES_V uint64_t
#define DES_INLINE static inline
#define DES_SB(name) name
#define DES_AND(a, b) ((a) & (b))
#define DES_OR(a, b) ((a) | (b))
#define DES_XOR(a, b) ((a) ^ (b))
#define DES_ANDN(a, b) ((a) & ~(b))
#define DES_NOT(a) (~(a))
/* vpternlog semantics, one minterm at a time */
__attribute__((unused)) static uint64_t tern(uint64_t a, uint64_t b, uint64_t c, unsigned imm)
{
    uint64_t r = 0;
    for (unsigned k = 0; k < 8; k++)
        if ((imm >> k) & 1)
            r |= ((k & 4) ? a : ~a) & ((k & 2) ? b : ~b) & ((k & 1) ? c : ~c);
    return r;
}
#define DES_TERN(a, b, c, imm) tern((a), (b), (c), (imm))
#include "des_sboxes_bitslice.h"
typedef void (*sbox_fn)(uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t,
                        uint64_t *, uint64_t *, uint64_t *, uint64_t *);
int main(void)
{
    /* lane x of every word is S-box input x: a1 (the most significant bit) .. a6 */
    uint64_t a[6] = {0};
    for (int x = 0; x < 64; x++)
        for (int i = 0; i < 6; i++)
            if ((x >> (5 - i)) & 1)
                a[i] |= 1ull << x;
    sbox_fn f[8] = {s1, s2, s3, s4, s5, s6, s7, s8};
    for (int s = 0; s < 8; s++) {
        uint64_t o[4] = {0, 0, 0, 0};
        f[s](a[0], a[1], a[2], a[3], a[4], a[5], &o[0], &o[1], &o[2], &o[3]);
        printf("%016llx %016llx %016llx %016llx\n", (unsigned long long)o[0],
               (unsigned long long)o[1], (unsigned long long)o[2], (unsigned long long)o[3]);
    }
    return 0;
}
"""


@pytest.mark.parametrize("form", ["binary", "ternary"])
def test_generated_sboxes_reproduce_tables(tmp_path, form):
    """Every generated S-box function gives its table's 4 output bits on all 64 inputs."""
    src = tmp_path / "check.c"
    src.write_text(CHECKER)
    exe = tmp_path / "check"
    flags = ["-DDES_SB_TERNARY=1"] if form == "ternary" else []
    subprocess.run(["gcc", "-O1", "-Wall", "-Wextra", "-Werror", *flags, "-I", str(KERNEL_DIR),
                    str(src), "-o", str(exe)], check=True, capture_output=True, text=True)
    lines = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split("\n")
    for s, box in enumerate(sbox_tables()):
        got = [int(w, 16) for w in lines[s].split()]
        for x in range(64):
            row, col = ((x >> 4) & 2) | (x & 1), (x >> 1) & 15
            want = box[16 * row + col]
            bits = sum(((got[o] >> x) & 1) << (3 - o) for o in range(4))
            assert bits == want, f"S{s + 1} ({form}) input {x:06b}: {bits} != {want}"


def test_committed_header_is_generated():
    """The header says it is generated: regenerating must give the same text."""
    out = subprocess.run([sys.executable, str(GENERATOR)], check=True, capture_output=True,
                         text=True, timeout=120).stdout
    assert out == HEADER.read_text()
    assert "python3 tools/gen_des_sboxes.py -o src/cpulab/kernels/des_sboxes_bitslice.h" in out


# ---- builds and known answers -------------------------------------------------------------

def assert_ok(d: dict) -> None:
    assert d["status"] == "ok", d["error"]
    assert d["unit"] == "keys"
    assert d["notes"]["working_set_bytes"] > 0


@pytest.mark.parametrize("cflags", [("-O0",), ("-O2",), ("-m32", "-O2")])
@pytest.mark.parametrize("core", ["table", "bitslice"])
def test_known_answers_pass(build_kernel, cflags, core):
    """k_verify (published vectors + planted key, every core) passes, so the kernel is timed."""
    d = run_artifact(build_kernel("des.c", cflags=cflags), "--param", f"core={core}",
                     "--param", "keys=1024", *CORRECTNESS)
    assert_ok(d)
    lanes = d["notes"]["lanes"]
    assert lanes == 1 if core == "table" else lanes in ((64, 256, 512) if is_x86() else (64,))
    assert d["work"] == 1024 * d["reps"]


def expected_checksum(keys: int, blocks: int = 3) -> str:
    """XOR of k_run(ctx, 1) over blocks 0..blocks-1: each folds the block's first key
    number, its number of matches and the matching key numbers (only RUN_SECRET)."""
    def k_mix(h: int, v: int) -> int:
        return h ^ ((v + 0x9E3779B97F4A7C15 + (h << 6) + (h >> 2)) & MASK64)

    total = 0
    for b in range(blocks):
        first = RUN_START + b * keys
        found = [RUN_SECRET] if first <= RUN_SECRET < first + keys else []
        h = k_mix(k_mix(0, first), len(found))
        for n in found:
            h = k_mix(h, n)
        total ^= h
    return f"{total:016x}"


@pytest.mark.parametrize("core,isa", [("table", "auto"), ("bitslice", "portable"),
                                      ("bitslice", "avx2"), ("bitslice", "avx512")])
def test_run_finds_the_planted_key_in_every_core(build_kernel, core, isa):
    """keys=1024: the secret (1234 keys in) lies in block 1; blocks 0 and 2 hold nothing."""
    d = run_artifact(build_kernel("des.c"), "--param", f"core={core}", "--param", f"isa={isa}",
                     "--param", "keys=1024", *ONE_REP)
    if d["status"] == "skipped":
        pytest.skip(d["error"])
    assert_ok(d)
    assert d["reps"] == 1
    assert d["checksum"] == expected_checksum(1024)


@pytest.mark.parametrize("params", [("core=fast",), ("keys=0",), ("core=bitslice", "isa=portable", "keys=100"),
                                    ("isa=neon9",)])
def test_bad_parameters_fail_setup(build_kernel, params):
    args = [a for p in params for a in ("--param", p)]
    d = run_artifact(build_kernel("des.c"), *args, *CORRECTNESS)
    assert d["status"] == "setup-failed"


def test_workload_declaration():
    w = get("des")
    assert w.unit == "keys" and w.source.exists()
    assert w.quick["core"] == ["table", "bitslice"]
    assert all((KERNEL_DIR / s).exists() for s in w.extra_sources)
    assert {p["core"] for p in w.grid("quick")} == {"table", "bitslice"}
