"""One seed per run, and the independent random streams drawn from it.

A run's seed (`--seed N`, else drawn from the operating system) is stored with its record,
so that `--resume` goes on with it and `--seed N` repeats a run's draws exactly.  Every use
draws from a stream of its own, named: its numbers come from SHA-256 of "SEED:NAME", so no
two streams repeat each other's sequence (two random.Random(seed) once made the executor's
pads and the round order the same draws).  The names: "rounds" (the order of variants in
each round), "executor" (stack pad and heap line of each process) and, for each point and
round, "placement:POINT:ROUND" (which placement of a build that round runs: a rerun and
every point of a sweep get layouts of their own).
"""
from __future__ import annotations

import hashlib
import random
import secrets


def new_seed() -> int:
    """A seed for a run that was given none."""
    return secrets.randbits(63)


def derived(seed: int, name: str) -> int:
    """The 63-bit number that the stream `name` of `seed` starts from."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{name}".encode()).digest()[:8], "little") >> 1


def stream(seed: int, name: str) -> random.Random:
    return random.Random(derived(seed, name))


def placement(seed: int, point: str, round_: int) -> int:
    """Which placement of a build the `round_`th process of a point runs (a link is drawn
    from its build's hash and this number: compile/artifacts.layout_script)."""
    return derived(seed, f"placement:{point}:{round_}") & 0x7FFFFFFF
