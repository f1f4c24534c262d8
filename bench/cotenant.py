"""A co-tenant for the benches: a busy loop pinned to one CPU, on and off at random.

On the Zen 3 host whole processes ran 15-45% slow while something shared the physical
core.  A 2-vCPU guest cannot put a loop on the measured core's SMT sibling, so this
emulates the nearest thing it can: a busy loop on a chosen CPU (the other vCPU: shared
caches, memory bandwidth, the host's frequency; or the measured CPU itself: preemption),
switched on and off at random intervals.  It does not reproduce a sibling taking ALU
slots from inside the core.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import random
import time
from contextlib import contextmanager


def _spin(cpu: int, seed: int, lo: float, hi: float, stop) -> None:
    os.sched_setaffinity(0, {cpu})
    rng = random.Random(seed)
    on = False
    while not stop.is_set():
        until = time.monotonic() + rng.uniform(lo, hi)
        if on:
            while time.monotonic() < until and not stop.is_set():
                pass  # busy: about one add per cycle plus the loop's compare
        else:
            stop.wait(until - time.monotonic())
        on = not on


@contextmanager
def cotenant(cpu: int | None, seed: int = 0, lo: float = 0.05, hi: float = 5.0, always: bool = False):
    """While the block runs, a busy loop on `cpu` (None: nothing), on and off for random
    spans of lo..hi seconds (always: on the whole time)."""
    if cpu is None:
        yield
        return
    stop = mp.Event()
    target, args = (_busy, (cpu, stop)) if always else (_spin, (cpu, seed, lo, hi, stop))
    p = mp.Process(target=target, args=args, daemon=True)
    p.start()
    try:
        yield
    finally:
        stop.set()
        p.join(5)
        if p.is_alive():
            p.kill()


def _busy(cpu: int, stop) -> None:
    os.sched_setaffinity(0, {cpu})
    while not stop.is_set():
        for _ in range(100000):
            pass
