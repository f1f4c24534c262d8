"""Two lanes of work at once, one per CPU: the experiments that may share the machine
(plan: share_machine) and the probe tables beside them (runner._measure, kernel_rounds.py)."""
from __future__ import annotations

import contextlib
import heapq
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


# A lane's work: its estimated seconds (the lanes take the longest first; inf: before any
# estimate) and the item, called with an executor, a store, an rng and the stop event; it
# may return more such work, which joins the queue.
Work = tuple[float, Callable]


def in_lanes(work: list[Work], executors: list[Executor], store_path, rng: random.Random) -> None:
    """Do the work in lanes, one lane per executor (each on its own CPU, with a store
    connection of its own: sqlite's are per thread), each lane taking the queued item of
    the most seconds (of equal ones the first queued) when it comes free, and waiting
    while the other lanes' items may still add some.  Ctrl-C (or SIGTERM) in the main
    thread stops every lane: the processes measuring are killed and their round is not
    recorded; what was recorded stays."""
    queue: list[tuple[float, int, Callable]] = []  # a heap of (-seconds, when queued, item)
    queued, busy = 0, 0
    ready, stop = threading.Condition(), threading.Event()

    def add(more: list[Work]) -> None:
        nonlocal queued
        for seconds, item in more:
            heapq.heappush(queue, (-seconds, queued, item))
            queued += 1

    def lane(executor: Executor, lane_rng: random.Random) -> None:
        nonlocal busy
        # The lane's thread stays on its CPU: woken on the other one (to hand a group's
        # token over, hundreds of times a second), it could only take that CPU from the
        # other lane's sample.
        with on_cpu(executor.cpu), contextlib.closing(Store(store_path)) as store:
            while not stop.is_set():
                with ready:
                    while not queue and busy and not stop.is_set():
                        ready.wait()  # another lane's item may add work
                    if not queue or stop.is_set():
                        return
                    item = heapq.heappop(queue)[2]
                    busy += 1
                more = []
                try:
                    more = item(executor, store, lane_rng, stop) or []
                finally:
                    with ready:
                        busy -= 1
                        add(more)
                        ready.notify_all()

    add(work)
    with ThreadPoolExecutor(len(executors)) as pool:
        futures = [pool.submit(lane, ex, random.Random(rng.random())) for ex in executors]
        try:
            for f in futures:
                f.result()
        except BaseException:
            stop.set()
            for ex in executors:
                ex.kill_all()
            raise
