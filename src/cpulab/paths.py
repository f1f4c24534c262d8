"""Where cpulab keeps things: XDG data and cache directories, overridable by env."""
from __future__ import annotations

import os
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
