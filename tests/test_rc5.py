"""rc5-72: distributed.net RC5-72 key check (RC5-32/12/9), portable and SIMD cores.

The kernel's own k_verify checks Rivest's published RC5-32/12/16 vectors and a planted
9-byte key for both cores.  Here, independently, a small Python RC5 (checked against the
same published vectors) models k_run: which keys a block holds (key numbering, byte order,
the secret key's place) and the checksum the kernel must return for them.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from conftest import fastest_kept, run_artifact
from cpulab import workloads

CORRECTNESS = ("--samples", "1", "--min-sample-time", "0.001", "--warmup", "0")
# With a minimum sample time of 0 the harness settles on reps = 1 and calls k_run(ctx, 1)
# three times (calibration + two samples): the checksum is the XOR of blocks 0, 1 and 2.
ONE_REP = ("--samples", "2", "--min-sample-time", "0", "--warmup", "0")
MASK64 = (1 << 64) - 1
MASK32 = (1 << 32) - 1
P32, Q32 = 0xB7E15163, 0x9E3779B9
CHAINS = 4  # vectors in flight in every SIMD core (AVX-512, AVX2, SSE2)

# R. L. Rivest, "The RC5 Encryption Algorithm" (revised 1997), test vectors, RC5-32/12/16.
RIVEST = [
    ("00000000000000000000000000000000", "0000000000000000", "21A5DBEE154B8F6D"),
    ("915F4619BE41B2516355A50110A9CE91", "21A5DBEE154B8F6D", "F7C013AC5B2B8952"),
    ("783348E75AEB0F2FD7B169BB8DC16787", "F7C013AC5B2B8952", "2F42B3B70369FC92"),
    ("DC49DB1375A5584F6485B413B5F12BAF", "2F42B3B70369FC92", "65C178B284D197CC"),
    ("5269F149D41BA0152497574D7F153125", "65C178B284D197CC", "EB44E415DA319824"),
]


def rotl(x: int, n: int) -> int:
    x &= MASK32
    n &= 31
    return ((x << n) | (x >> (32 - n))) & MASK32


def rc5_encrypt(key: bytes, pt: bytes) -> bytes:
    """RC5-32/12/b, straight from the paper's pseudo-code."""
    c = max(1, (len(key) + 3) // 4)
    L = [int.from_bytes(key[4 * i:4 * i + 4].ljust(4, b"\0"), "little") for i in range(c)]
    S = [(P32 + i * Q32) & MASK32 for i in range(26)]
    A = B = i = j = 0
    for _ in range(3 * max(26, c)):
        A = S[i] = rotl(S[i] + A + B, 3)
        B = L[j] = rotl(L[j] + A + B, A + B)
        i, j = (i + 1) % 26, (j + 1) % c
    A = (int.from_bytes(pt[:4], "little") + S[0]) & MASK32
    B = (int.from_bytes(pt[4:], "little") + S[1]) & MASK32
    for r in range(1, 13):
        A = (rotl(A ^ B, B) + S[2 * r]) & MASK32
        B = (rotl(B ^ A, A) + S[2 * r + 1]) & MASK32
    return A.to_bytes(4, "little") + B.to_bytes(4, "little")


def k_mix(h: int, v: int) -> int:
    return h ^ ((v + 0x9E3779B97F4A7C15 + (h << 6) + (h >> 2)) & MASK64)


# The kernel's timed key space (rc5_72.c): key numbers are 72-bit, the key's bytes read
# big-endian (K8, distributed.net's key.hi, changes fastest); the secret key is 1234 in.
RUN_START = (0xE5 << 64) | 0x0123456789ABCD00
RUN_SECRET = RUN_START + 1234
PLAINTEXT = b"The unkn"


def key_bytes(n: int) -> bytes:
    return (n % (1 << 72)).to_bytes(9, "big")


def expected_checksum(keys: int, blocks: int, found: list | None = None) -> str:
    """XOR of k_run(ctx, 1) over the first `blocks` blocks of `keys` keys; the key
    numbers that match are appended to `found`."""
    target = rc5_encrypt(key_bytes(RUN_SECRET), PLAINTEXT)
    total = 0
    for b in range(blocks):
        first = RUN_START + b * keys
        digest, matches = 0, []
        for n in range(first, first + keys):
            ct = rc5_encrypt(key_bytes(n), PLAINTEXT)
            digest ^= int.from_bytes(ct[:4], "little")
            if ct == target:
                matches.append(n)
        if found is not None:
            found.extend(matches)
        h = k_mix(k_mix(0, digest), len(matches))
        if matches:
            h = k_mix(h, matches[0] & MASK64)
        total ^= h
    return f"{total:016x}"


def is_x86() -> bool:
    import platform
    return platform.machine() in ("x86_64", "i386", "i686", "AMD64")


def assert_ok(d: dict) -> None:
    assert d["status"] == "ok", d["error"]
    assert d["unit"] == "keys"
    assert d["notes"]["working_set_bytes"] > 0


# ---- the Python model itself --------------------------------------------------------------

def test_python_model_matches_rivest_vectors():
    for key, pt, ct in RIVEST:
        assert rc5_encrypt(bytes.fromhex(key), bytes.fromhex(pt)) == bytes.fromhex(ct)


# ---- builds and known answers ----------------------------------------------------------------

@pytest.mark.parametrize("cflags", [("-O0",), ("-O2",), ("-m32", "-O2")])
@pytest.mark.parametrize("core", ["portable", "simd"])
def test_known_answers_pass(build_kernel, cflags, core):
    """k_verify (Rivest vectors + planted key, both cores) passes, so the kernel is timed."""
    d = run_artifact(build_kernel("rc5_72.c", cflags=cflags), "--param", f"core={core}",
                     "--param", "keys=256", *CORRECTNESS)
    assert_ok(d)
    lanes = d["notes"]["simd_lanes"]
    if core == "portable":
        assert lanes == 1
    else:
        assert lanes in ((4, 8, 16) if is_x86() else (1,))
        assert d["notes"]["keys_per_batch"] == lanes * CHAINS
    assert d["work"] == 256 * d["reps"]


@pytest.mark.parametrize("isa,lanes", [("avx512", 16), ("avx2", 8), ("sse2", 4)])
def test_forced_simd_paths(build_kernel, isa, lanes):
    if not is_x86():
        pytest.skip("x86 SIMD paths")
    d = run_artifact(build_kernel("rc5_72.c"), "--param", f"isa={isa}", "--param", "keys=256", *CORRECTNESS)
    if d["status"] == "skipped":
        pytest.skip(d["error"])
    assert_ok(d)
    assert d["notes"]["simd_lanes"] == lanes
    assert d["notes"]["keys_per_batch"] == lanes * CHAINS


def test_a_build_for_the_portable_core_alone_holds_no_vector_core(build_kernel):
    """Built for points that run the portable core alone (Workload.held gives
    -DCPULAB_CORE_PORTABLE), the kernel leaves the vector cores out: it passes its known
    answers on the portable core and refuses the simd one, saying why."""
    import subprocess
    portable = build_kernel("rc5_72.c", cflags=("-O2", "-DCPULAB_CORE_PORTABLE"))
    assert_ok(run_artifact(portable, "--param", "core=portable", "--param", "keys=256", *CORRECTNESS))
    d = run_artifact(portable, "--param", "core=simd", "--param", "keys=256", *CORRECTNESS)
    assert d["status"] == "setup-failed" and "portable core alone" in d["error"]
    if is_x86():
        def cores(exe):
            return {n for n in subprocess.run(["nm", str(exe)], capture_output=True, text=True).stdout.split()
                    if n.startswith(("sse2_", "avx2_", "avx512_"))}
        assert cores(build_kernel("rc5_72.c")) >= {"sse2_c4", "avx2_c4", "avx512_c4"} and cores(portable) == set()
    w = workloads.get("rc5-72")
    assert w.held([{"core": "portable"}]) == ("-DCPULAB_CORE_PORTABLE",)
    assert w.held([{"core": "simd"}]) == ("-DCPULAB_CORE_SIMD",)
    assert w.held([{"core": "portable"}, {"core": "simd"}]) == () == w.held([{"keys": "16"}, {"core": "portable"}])


@pytest.mark.parametrize("param,value", [("core", "fast"), ("keys", "0"), ("isa", "neon9")])
def test_bad_parameters_fail_setup(build_kernel, param, value):
    d = run_artifact(build_kernel("rc5_72.c"), "--param", f"{param}={value}", *CORRECTNESS)
    assert d["status"] in ("setup-failed", "skipped")
    if param != "isa" or is_x86():
        assert d["status"] == "setup-failed"


# ---- the timed work, modelled independently -----------------------------------------------

def test_checksum_matches_python_model(build_kernel):
    """Three one-block calls of 512 keys cover the secret key (key 1234, in the third block):
    every core must return the checksum the Python model gives for those 1536 keys."""
    exe = build_kernel("rc5_72.c")
    found: list[int] = []
    want = expected_checksum(512, 3, found)
    assert found == [RUN_SECRET]
    runs = [("core=portable",), ("core=simd",)]
    if is_x86():
        runs += [("isa=avx2",), ("isa=sse2",)]
    for params in runs:
        d = run_artifact(exe, *(a for p in params for a in ("--param", p)), "--param", "keys=512", *ONE_REP)
        if d["status"] == "skipped":
            continue
        assert_ok(d)
        assert d["reps"] == 1
        assert d["checksum"] == want, params


def test_checksum_depends_on_the_keys_checked(build_kernel):
    """A block of a different size checks other keys: another checksum (odd sizes end
    mid-vector, so this also exercises partial batches)."""
    exe = build_kernel("rc5_72.c")
    sums = set()
    for keys in (97, 100):
        port = run_artifact(exe, "--param", "core=portable", "--param", f"keys={keys}", *ONE_REP)
        simd = run_artifact(exe, "--param", "core=simd", "--param", f"keys={keys}", *ONE_REP)
        assert port["checksum"] == simd["checksum"] == expected_checksum(keys, 3)
        sums.add(port["checksum"])
    assert len(sums) == 2


@pytest.mark.timing
def test_simd_core_is_faster_per_key(build_kernel):
    """A very wide physical margin: with at least 4 keys a vector the SIMD core does not
    take more cycles per key than the one-key-at-a-time portable core."""
    exe = build_kernel("rc5_72.c", cflags=("-O2",))
    per_key = {}
    for core in ("portable", "simd"):
        d = fastest_kept(lambda: run_artifact(exe, "--param", f"core={core}", "--samples", "3",
                                              "--min-sample-time", "0.005", "--warmup", "0"))
        assert_ok(d)
        per_key[core] = (min(d["ns"]) / d["work"], d["notes"]["simd_lanes"])
    if per_key["simd"][1] >= 4:
        assert per_key["simd"][0] < per_key["portable"][0]


# ---- the workload declaration ------------------------------------------------------------------

def test_workload_declaration():
    w = workloads.get("rc5-72")
    assert w.unit == "keys" and w.kernel == "rc5_72.c"
    assert w.defaults()["core"] == "simd" and int(w.defaults()["keys"]) > 0
    assert [p["core"] for p in w.grid("quick")] == ["portable", "simd"]
    assert all(Path(s).exists() for s in w.sources())
