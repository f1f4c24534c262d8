"""Input files for programs: random bytes of a given size, made once per size and cached
(paths.random_file_path), the same bytes every time.
"""
from __future__ import annotations

import os
import random
import threading
from pathlib import Path

from cpulab.paths import random_file_path
from cpulab.plan.programs import check_inputs_fit


def input_file(size: int) -> str:
    """The random file of this size on this machine, made after checking its own free disk."""
    check_inputs_fit({size}, "inputs")
    return str(random_file(size))


def random_file(size: int) -> Path:
    """A file of random bytes of this size, made once (same bytes every time: seeded by size)."""
    path = random_file_path(size)
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")  # threads of one process too
    rng, left = random.Random(size), size
    with open(tmp, "wb") as f:
        while left:
            n = min(left, 1 << 22)
            f.write(rng.randbytes(n))
            left -= n
    os.replace(tmp, path)
    return path
