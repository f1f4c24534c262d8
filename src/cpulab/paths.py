"""Where cpulab keeps things: XDG data and cache directories, overridable by env."""
from __future__ import annotations

import os
import stat
from pathlib import Path


def data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "cpulab"


def cache_dir() -> Path:
    if os.environ.get("CPULAB_CACHE_DIR"):
        return Path(os.environ["CPULAB_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "cpulab"


def default_db() -> Path:
    return Path(os.environ.get("CPULAB_DB") or data_dir() / "cpulab.sqlite")


def artifact_dir() -> Path:
    return cache_dir() / "artifacts"


def input_dir() -> Path:
    return cache_dir() / "inputs"


def random_file_path(size: int) -> Path:
    return input_dir() / f"random-{size}.bin"


class TooLarge(OSError):
    """A file to read whole is over its limit, or is no regular file (a device, a pipe:
    its size is not known before reading)."""


def read_limited(path: Path, limit: int) -> bytes:
    """A regular file's bytes, at most `limit` of them: a plan or an imported file is read
    whole, so /dev/zero or a huge file must be refused, not read into memory."""
    with open(path, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise TooLarge(f"{path}: not a regular file")
        data = f.read(limit + 1)
    if len(data) > limit:
        raise TooLarge(f"{path}: larger than {limit >> 20} MB")
    return data
