"""SHA-256 of whole files as sha256deep hashes them (read() into a buffer, portable core),
and the deterministic data files it hashes.

The file workload's ``prepare`` hook makes its data file once per size, in
``<cache>/files/sha256-<size>.bin`` (cache = $CPULAB_CACHE_DIR, else
${XDG_CACHE_HOME:-~/.cache}/cpulab), and remembers the digest Python's hashlib computed
of it in a ``.sha256`` sidecar beside it.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import tempfile
from pathlib import Path

import numpy as np

from cpulab import paths
from cpulab.workloads import Param, Workload

# The content stream: PCG64's raw 64-bit outputs, little-endian.  numpy promises a
# BitGenerator's raw stream is stable across versions (unlike Generator methods), so
# the same size gives the same file everywhere, and a smaller file is a prefix of a
# larger one.  About 2 GB/s to make: a 1 GB file takes seconds, not minutes.
FILE_SEED = 0x5A256
CHUNK = 1 << 24  # 16 MiB per write


def file_dir() -> Path:
    return paths.cache_dir() / "files"


def content_chunks(size: int):
    """The deterministic bytes of a `size`-byte file, in chunks of at most CHUNK."""
    bits = np.random.PCG64(FILE_SEED)
    left = size
    while left > 0:
        n = min(left, CHUNK)
        words = bits.random_raw((n + 7) // 8).astype("<u8", copy=False)
        yield words.tobytes()[:n]
        left -= n


def _file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _write_atomic(path: Path, chunks) -> str:
    """Write chunks to a temporary name in path's directory, then rename it into place
    (another process sees no file or the whole file, never half of one).  Returns the
    hashlib digest of what was written."""
    h = hashlib.sha256()
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            for chunk in chunks:
                h.update(chunk)
                f.write(chunk)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return h.hexdigest()


def _sidecar_ok(sidecar: Path, st: os.stat_result) -> str | None:
    """The cached digest if the sidecar still describes this file (size and mtime)."""
    try:
        d = json.loads(sidecar.read_text())
    except (OSError, ValueError):
        return None
    if d.get("size") == st.st_size and d.get("mtime_ns") == st.st_mtime_ns and len(d.get("sha256", "")) == 64:
        return d["sha256"]
    return None


def _write_sidecar(sidecar: Path, st: os.stat_result, digest: str) -> None:
    text = json.dumps({"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": digest}) + "\n"
    _write_atomic(sidecar, [text.encode()])


def data_path(size: int) -> Path:
    return file_dir() / f"sha256-{size}.bin"


def data_file(size: int) -> tuple[Path, str]:
    """The path of the deterministic `size`-byte file and its SHA-256 (hex), making
    either if missing or stale.  Concurrent callers serialise on a lock file."""
    if size < 0:
        raise ValueError(f"file size must be >= 0 bytes, got {size}")
    d = file_dir()
    d.mkdir(parents=True, exist_ok=True)
    path = data_path(size)
    sidecar = path.with_name(path.name + ".sha256")
    with open(d / f".sha256-{size}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            st = path.stat()
        except FileNotFoundError:
            st = None
        if st is None or st.st_size != size:
            digest = _write_atomic(path, content_chunks(size))
            _write_sidecar(sidecar, path.stat(), digest)
            return path, digest
        digest = _sidecar_ok(sidecar, st)
        if digest is None:  # sidecar missing or stale (file touched): hash it again
            digest = _file_digest(path)
            _write_sidecar(sidecar, st, digest)
        return path, digest


def prepare_file(params: dict[str, str]) -> dict[str, str]:
    """Workload.prepare for sha256-file: make (or find) the file, give path and expect.
    A path given by the user is hashed as it is; its size then comes from the file."""
    if params.get("path"):
        path = Path(params["path"])
        out = {"path": str(path), "size": str(path.stat().st_size)}
        if not params.get("expect"):
            out["expect"] = _file_digest(path)
        return out
    path, digest = data_file(int(params["size"]))
    return {"path": str(path), "expect": digest}


def files_to_write(params: dict[str, str]) -> dict[Path, int]:
    """Workload.files for sha256-file: the data file prepare_file would make, unless a
    path is given or the file is already there at its size."""
    if params.get("path"):
        return {}
    size = int(params["size"])
    path = data_path(size)
    try:
        if path.stat().st_size == size:
            return {}
    except OSError:  # not there (or unreadable): it will be written
        pass
    return {path: size}


WORKLOADS = [
    Workload(
        name="sha256-file",
        kernel="sha256_file.c",
        io_bound=True,  # a cold pass blocks in read(): the device's time is part of the rate
        extra_sources=("sha256_core.h",),
        unit="bytes",
        description="SHA-256 of a whole file as sha256deep does it: read() into a buffer, portable core",
        params={"size": Param("10000000", "size", min=1), "buffer": Param("1048576", "size", min=1, max=1 << 30),
                "cache": Param("warm", "choice", choices=("warm", "cold")), "path": Param("", "text"),
                "expect": Param("", "text")},
        quick={"size": ["10000000", "100000000"], "cache": ["warm"]},
        full={"size": ["10000000", "100000000", "1000000000"], "cache": ["warm"]},
        prepare=prepare_file,
        hidden_params=("path", "expect"),
        sweep_axis="size",
        times=True,
        memory=lambda point: int(point["buffer"]),
        files=files_to_write,
    ),
]
