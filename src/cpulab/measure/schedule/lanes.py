"""Two lanes of work at once, one per CPU: the experiments that may share the machine
(plan: share_machine) and the probe tables beside them (runner._measure, kernel_rounds.py)."""
from __future__ import annotations

import contextlib
import heapq
import math
import os
import random
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from cpulab.measure.execute.executor import Executor, on_cpu
from cpulab.measure.schedule.rounds import Progress
from cpulab.store.db import Store


class LaneProgress:
    """A lane's progress: its steps and notes go to the run's bar, whose phase is set once
    for all lanes; each phase of a lane (its rounds, later rounds, counts, explanations)
    adds its steps to that phase's."""

    def __init__(self, progress: Progress):
        self.progress = progress

    def phase(self, name, total):
        self.progress.grow(total)

    def grow(self, more):
        self.progress.grow(more)

    def advance(self, label):
        self.progress.advance(label)

    def note(self, text):
        self.progress.note(text)


class TrailingProgress(LaneProgress):
    """The progress of work that may trail the lanes (TRAILS) into the phase after them:
    each step is announced as it ends, to whichever phase is under way then."""

    def phase(self, name, total):
        pass

    def grow(self, more):
        pass

    def advance(self, label):
        self.progress.grow(1)
        self.progress.advance(label)


# A lane's work: its estimated seconds (the lanes take the longest first; inf: before any
# estimate) and the item, called with an executor, a store, an rng and the stop event; it
# may return more such work, which joins the queue.
Work = tuple[float, Callable]
# The seconds of work that may trail the rest (counts, explanations: they measure
# nothing): taken last, and never by a first lane that hands over (lanes()).
TRAILS = -math.inf


def in_lanes(work: list[Work], executors: list[Executor], store_path, rng: random.Random) -> None:
    """Do the work in lanes, one lane per executor (lanes())."""
    with lanes(work, executors, store_path, rng):
        pass


@contextlib.contextmanager
def lanes(work: list[Work], executors: list[Executor], store_path, rng: random.Random, hand_over: bool = False):
    """Do the work in lanes, one lane per executor (each on its own CPU, with a store
    connection of its own: sqlite's are per thread), each lane taking the queued item of
    the most seconds (of equal ones the first queued) when it comes free, and waiting
    while the other lanes' items may still add some.  The block runs once the first lane
    has left: once all work is done, or, hand_over, once nothing but trailing work
    (TRAILS), which that lane never takes, is queued or under way; the other lanes do the
    trailing work beside the block (the alone rounds, on the first lane's CPU), and more
    that the block hands them (the function it is given: trail(work)) until it ends; then
    the first lane takes its share of what is left of it.  Ctrl-C (or
    SIGTERM) in the main thread stops every lane: the processes measuring are killed and
    their round is not recorded; what was recorded stays."""
    queue: list[tuple[float, int, Callable]] = []  # a heap of (-seconds, when queued, item)
    queued, busy, leading = 0, 0, 0  # leading: items under way that do not trail
    ready, stop, handed_over = threading.Condition(), threading.Event(), threading.Event()
    block_over = threading.Event()

    def add(more: list[Work]) -> None:
        nonlocal queued
        for seconds, item in more:
            heapq.heappush(queue, (-seconds, queued, item))
            queued += 1

    def lane(executor: Executor, lane_rng: random.Random, first: bool) -> None:
        nonlocal busy, leading
        hands_over, yielding = first and hand_over, False

        def takes() -> bool:  # under `ready`: whether the queue's head is this lane's
            return bool(queue) and not (hands_over and queue[0][0] == -TRAILS)

        def waits() -> bool:  # under `ready`: whether an item under way, or the block, may add this lane's
            beside_block = hand_over and not first and not block_over.is_set()
            return ((leading if hands_over else busy) > 0 or beside_block) and not stop.is_set()
        # The lane's thread stays on its CPU: woken on the other one (to hand a group's
        # token over, hundreds of times a second), it could only take that CPU from the
        # other lane's sample.
        with on_cpu(executor.cpu), contextlib.closing(Store(store_path)) as store:
            while not stop.is_set():
                with ready:
                    while not takes() and waits():
                        ready.wait()
                    if not takes() or stop.is_set():
                        if hands_over:
                            handed_over.set()
                        return
                    minus_seconds, _, item = heapq.heappop(queue)
                    leads = minus_seconds != -TRAILS
                    busy, leading = busy + 1, leading + leads
                if handed_over.is_set() and not block_over.is_set() and not yielding:
                    # Beside the block's rounds this lane shares its CPU with their linker
                    # (linking_ahead), which they wait for: at its priority, a valgrind loop
                    # there made the rounds link their own (float-abi's start-up 2.5 -> 7 s)
                    os.setpriority(os.PRIO_PROCESS, 0, min(19, os.getpriority(os.PRIO_PROCESS, 0) + 10))
                    yielding = True  # this thread's, and its children's (Linux: a thread's own)
                more = []
                try:
                    more = item(executor, store, lane_rng, stop) or []
                finally:
                    with ready:
                        busy, leading = busy - 1, leading - leads
                        add(more)
                        ready.notify_all()

    def trail(more: list[Work]) -> None:
        with ready:
            add(more)
            ready.notify_all()

    add(work)
    with ThreadPoolExecutor(len(executors)) as pool:
        futures = [pool.submit(lane, ex, random.Random(rng.random()), i == 0) for i, ex in enumerate(executors)]
        try:
            futures[0].result()
            yield trail
            with ready:
                block_over.set()
                ready.notify_all()
            if hand_over:  # its CPU is free again: the first lane takes its share of what is left
                futures.append(pool.submit(lane, executors[0], random.Random(rng.random()), False))
            for f in futures:
                f.result()
        except BaseException:
            with ready:  # a lane waiting for the block's work wakes to leave
                stop.set()
                ready.notify_all()
            for ex in executors:
                ex.kill_all()
            raise
