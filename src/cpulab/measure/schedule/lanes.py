"""Two lanes of work at once, one per CPU: the experiments that may share the machine
(plan: share_machine) and the probe tables beside them (runner._measure)."""
from __future__ import annotations

import random
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from cpulab.measure.execute.executor import Executor
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


def in_lanes(work: list[Callable], executors: list[Executor], store_path, rng: random.Random) -> None:
    """Do the work (each item called with an executor, a store, an rng and the stop
    event) in lanes, one lane per executor (each on its own CPU, with a store connection
    of its own: sqlite's are per thread), each lane taking the next item in order when
    it comes free.  Ctrl-C (or SIGTERM) in the main thread stops every lane: the
    processes measuring are killed and their round is not recorded; what was recorded
    stays."""
    queue, lock, stop = list(work), threading.Lock(), threading.Event()

    def lane(executor: Executor, lane_rng: random.Random) -> None:
        store = Store(store_path)
        try:
            while not stop.is_set():
                with lock:
                    if not queue:
                        return
                    item = queue.pop(0)
                item(executor, store, lane_rng, stop)
        finally:
            store.close()

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
