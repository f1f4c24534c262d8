"""SHA-256 kernels: sha256 (portable), sha256-shani, sha256-openssl, sha256-file.

Known answers come from FIPS 180-4 (inside each kernel's k_verify) and from Python's
hashlib, which the tests use as the independent reference on pseudo-random data.
"""
from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

import pytest

from conftest import run_artifact
from cpulab.plan import toolchain
from cpulab import workloads
from cpulab.workloads import sha256_file
from cpulab.machine import toolchains

CORRECTNESS = ("--samples", "1", "--min-sample-time", "0.001", "--warmup", "0")
# With a minimum sample time of 0 the harness settles on reps = 1 and calls k_run(ctx, 1)
# three times for two samples; the XOR of three equal checksums is that checksum.
ONE_REP = ("--samples", "2", "--min-sample-time", "0", "--warmup", "0")
MASK = (1 << 64) - 1


def cpu_has_sha_ni() -> bool:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return any(line.startswith("flags") and "sha_ni" in line.split() for line in text.splitlines())


def lcg_buffer(size: int) -> bytes:
    """The deterministic buffer the in-memory kernels hash (their 64-bit LCG)."""
    x, out = 0x0123456789ABCDEF, bytearray(size)
    for i in range(size):
        x = (x * 6364136223846793005 + 1442695040888963407) & MASK
        out[i] = x >> 56
    return bytes(out)


def one_rep_checksum(data: bytes) -> str:
    """What k_run(ctx, 1) returns for a buffer: k_mix(0, first 8 digest bytes, little-endian)."""
    w = int.from_bytes(hashlib.sha256(data).digest()[:8], "little")
    return f"{(w + 0x9E3779B97F4A7C15) & MASK:016x}"


def assert_ok_or_no_shani(d: dict) -> None:
    if d["status"] == "skipped":
        assert not cpu_has_sha_ni(), f"skipped although /proc/cpuinfo has sha_ni: {d['error']}"
        pytest.skip(d["error"])
    assert d["status"] == "ok", d["error"]


# ---- in-memory kernels -----------------------------------------------------------------

@pytest.mark.parametrize("cflags", [("-O0",), ("-O2",), ("-O3", "-march=native"), ("-m32", "-O2")])
def test_portable_fips_vectors(build_kernel, cflags):
    d = run_artifact(build_kernel("sha256.c", cflags=cflags), *CORRECTNESS)
    assert d["status"] == "ok", d["error"]
    assert d["unit"] == "bytes" and d["notes"]["working_set_bytes"] == 16384


@pytest.mark.parametrize("cflags", [("-O0",), ("-O2",), ("-m32", "-O2")])
def test_shani_fips_vectors(build_kernel, cflags):
    """k_verify runs the FIPS vectors through the SHA-NI path and cross-checks it against
    the portable core on every length 0..300 and on the timed buffer."""
    d = run_artifact(build_kernel("sha256_shani.c", cflags=cflags), *CORRECTNESS)
    assert_ok_or_no_shani(d)


@pytest.mark.parametrize("size", [1, 55, 56, 63, 64, 65, 16384, 100003])
def test_in_memory_kernels_match_hashlib(build_kernel, size):
    """The checksum of one repetition is a function of the digest of the kernels' LCG
    buffer: sha256, sha256-shani and sha256-openssl must all give hashlib's."""
    want = one_rep_checksum(lcg_buffer(size))
    kernels = ["sha256.c"]
    if cpu_has_sha_ni():
        kernels.append("sha256_shani.c")
    peer = workloads.get("sha256-openssl")
    if not toolchains.libraries_reason(toolchain.BUILTIN["O2"], peer.requires, peer.libs):
        kernels.append("sha256_openssl.c")
    for kernel in kernels:
        d = run_artifact(build_kernel(kernel), *ONE_REP, "--param", f"size={size}")
        assert d["status"] == "ok", f"{kernel}: {d['error']}"
        assert d["reps"] == 1 and d["work"] == size
        assert d["checksum"] == want, kernel


def test_openssl_peer_verifies(build_kernel):
    d = run_artifact(build_kernel("sha256_openssl.c"), *CORRECTNESS)  # skips without libssl-dev
    assert d["status"] == "ok", d["error"]


def test_bad_size_fails_setup(build_kernel):
    for kernel in ("sha256_shani.c", "sha256.c"):
        d = run_artifact(build_kernel(kernel), *CORRECTNESS, "--param", "size=0")
        assert d["status"] in ("setup-failed", "skipped") and "ns" not in d


# ---- sha256-file ----------------------------------------------------------------------

def run_file(exe: Path, path: Path, expect: str, *params: str) -> dict:
    return run_artifact(exe, *CORRECTNESS, "--param", f"path={path}", "--param", f"expect={expect}", *params)


@pytest.mark.parametrize("size,buffers", [
    (0, (1, 64)), (1, (1, 64)), (63, (1, 13, 64)), (64, (13, 63, 64, 65)),
    (65, (13, 64, 4096)), ((1 << 20) + 7, (4093, 65536, 1 << 20, 1 << 21)),
])
def test_file_digest_matches_hashlib(build_kernel, tmp_path, size, buffers):
    """Random data of awkward sizes, buffers that cut it mid-block: the file kernel's
    k_verify compares its digest with hashlib's and would fail the run otherwise."""
    exe = build_kernel("sha256_file.c")
    data = os.urandom(size)
    path = tmp_path / f"r{size}.bin"
    path.write_bytes(data)
    expect = hashlib.sha256(data).hexdigest()
    for buf in buffers:
        d = run_file(exe, path, expect, "--param", f"buffer={buf}", "--param", f"size={size}")
        assert d["status"] == "ok", f"buffer={buf}: {d['error']}"
        assert d["work"] == size * d["reps"]
        assert d["notes"] == {"working_set_bytes": buf, "file_bytes": size}
        assert len(d["user_s"]) == len(d["sys_s"]) == len(d["ns"]) == 1


def test_file_digest_upper_case_expect_and_cold_cache(build_kernel, tmp_path):
    exe = build_kernel("sha256_file.c")
    data = os.urandom(300_001)
    path = tmp_path / "c.bin"
    path.write_bytes(data)
    d = run_file(exe, path, hashlib.sha256(data).hexdigest().upper(), "--param", "cache=cold")
    assert d["status"] == "ok", d["error"]


def test_file_wrong_expect_is_verify_failed(build_kernel, tmp_path):
    exe = build_kernel("sha256_file.c")
    path = tmp_path / "w.bin"
    path.write_bytes(b"abc")
    wrong = hashlib.sha256(b"abd").hexdigest()
    d = run_file(exe, path, wrong)
    assert d["status"] == "verify-failed" and "ns" not in d
    assert "does not match" in d["error"]
    assert run_file(exe, path, "")["status"] == "verify-failed"


@pytest.mark.parametrize("params,why", [
    (("--param", "size=4"), "parameter size says 4"),
    (("--param", "cache=lukewarm"), "cache must be warm or cold"),
    (("--param", "buffer=0"), "buffer must be"),
])
def test_file_bad_params_fail_setup(build_kernel, tmp_path, params, why):
    path = tmp_path / "p.bin"
    path.write_bytes(b"abc")
    d = run_file(build_kernel("sha256_file.c"), path, hashlib.sha256(b"abc").hexdigest(), *params)
    assert d["status"] == "setup-failed" and why in d["error"]


def test_file_missing_path_fails_setup(build_kernel, tmp_path):
    exe = build_kernel("sha256_file.c")
    assert run_artifact(exe, *CORRECTNESS)["status"] == "setup-failed"
    d = run_file(exe, tmp_path / "nope.bin", "0" * 64)
    assert d["status"] == "setup-failed" and "cannot open" in d["error"]


# ---- the prepare hook ------------------------------------------------------------------

def test_prepare_is_deterministic_and_sidecar_is_right(tmp_path, monkeypatch):
    size = 3 * sha256_file.CHUNK // 2 + 5  # crosses a chunk boundary, not a multiple of 8
    files = []
    for sub in ("a", "b"):
        monkeypatch.setenv("CPULAB_CACHE_DIR", str(tmp_path / sub))
        out = workloads.get("sha256-file").prepare({"size": str(size)})
        path = Path(out["path"])
        assert path == tmp_path / sub / "files" / f"sha256-{size}.bin"
        data = path.read_bytes()
        assert len(data) == size
        assert out["expect"] == hashlib.sha256(data).hexdigest()
        assert out["expect"] in path.with_name(path.name + ".sha256").read_text()
        files.append(data)
    assert files[0] == files[1]
    # A smaller file is a prefix of a larger one (one stream), and not all zeros.
    small = Path(workloads.get("sha256-file").prepare({"size": "1000"})["path"]).read_bytes()
    assert small == files[0][:1000] and len(set(small)) > 200
    assert [p.name for p in path.parent.iterdir() if p.name.endswith(".tmp")] == []


def test_prepare_reuses_file_and_rehashes_stale_sidecar(tmp_path, monkeypatch):
    monkeypatch.setenv("CPULAB_CACHE_DIR", str(tmp_path))
    path, digest = sha256_file.data_file(4096)
    st = path.stat()
    assert sha256_file.data_file(4096) == (path, digest)
    assert path.stat().st_mtime_ns == st.st_mtime_ns  # not rewritten
    # Same size, new content and mtime: the sidecar is stale and the digest is recomputed.
    path.write_bytes(b"x" * 4096)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert sha256_file.data_file(4096) == (path, hashlib.sha256(b"x" * 4096).hexdigest())
    # Wrong size: the file is made again.
    path.write_bytes(b"short")
    assert sha256_file.data_file(4096) == (path, digest)
    assert sha256_file.data_file(0)[1] == hashlib.sha256(b"").hexdigest()


def test_prepare_concurrent_callers_see_whole_files(tmp_path, monkeypatch):
    monkeypatch.setenv("CPULAB_CACHE_DIR", str(tmp_path))
    size = 5_000_003
    results, errors = [], []

    def worker():
        try:
            p, dgst = sha256_file.data_file(size)
            results.append((p.stat().st_size, dgst, hashlib.sha256(p.read_bytes()).hexdigest()))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len({r[1] for r in results}) == 1
    assert all(r == (size, r[1], r[1]) for r in results)


def test_prepare_then_run(build_kernel):
    """The hook's params are exactly what the kernel needs (CPULAB_CACHE_DIR is a
    per-session temporary directory, see conftest)."""
    w = workloads.get("sha256-file")
    point = w.grid("quick", {"size": ["100000"], "buffer": ["1000"]})[0]
    params = {**point, **w.prepare(point)}
    args = [a for k, v in params.items() for a in ("--param", f"{k}={v}")]
    d = run_artifact(build_kernel("sha256_file.c"), *CORRECTNESS, *args)
    assert d["status"] == "ok", d["error"]
    assert d["notes"]["file_bytes"] == 100000


def test_user_path_is_hashed_as_is(tmp_path):
    path = tmp_path / "mine.bin"
    path.write_bytes(b"hello")
    out = workloads.get("sha256-file").prepare({"size": "10000000", "path": str(path), "expect": ""})
    assert out == {"path": str(path), "size": "5", "expect": hashlib.sha256(b"hello").hexdigest()}


def test_workload_declarations():
    reg = workloads.registry()
    f = reg["sha256-file"]
    assert [p["size"] for p in f.grid("quick")] == ["10000000", "100000000"]
    assert [p["size"] for p in f.grid("full")] == ["10000000", "100000000", "1000000000"]
    assert {p["cache"] for p in f.grid("full")} == {"warm"}
    assert [p["cache"] for p in f.grid("quick", {"cache": ["cold"]})] == ["cold", "cold"]
    o = reg["sha256-openssl"]
    assert o.libs == ("-lcrypto",) and o.requires == {"openssl/evp.h": "libssl-dev"}
    for name in ("sha256-shani", "sha256-openssl", "sha256-file"):
        assert reg[name].source.exists() and all(s.exists() for s in reg[name].sources())
