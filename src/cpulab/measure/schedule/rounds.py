"""The one rounds loop: kernels, programs and `cpulab time` alike.

A *point* is one comparison: an experiment's variants at one parameter point.  A round
gives every live target of a point one process (for kernels a group in turns, for
programs A and B back to back, in a fresh random order), the points in random order, so
a drifting machine hits all variants alike.  Every point gets the schedule's first-look
rounds; in budget mode a point with an undecided comparison at a look (n, 2n rounds),
decided over its whole experiment, gets rounds up to the next look (2n, 4n, ...) while its
experiment has budget left.  Each look tests at its share of alpha (policy.level), so
stopping early, or late, cannot inflate false verdicts.
"""
from __future__ import annotations

import random
import threading
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable, Protocol

from cpulab.estimates import compare_results, result_summary
from cpulab.model import params_key
from cpulab.spec.schedule import Schedule
from cpulab.store.db import Store


class Progress(Protocol):
    def phase(self, name: str, total: int) -> None: ...
    def grow(self, more: int) -> None: ...  # more steps in this phase, found while it runs
    def advance(self, label: str) -> None: ...
    def note(self, text: str) -> None: ...


class QuietProgress:
    def phase(self, name, total): pass
    def grow(self, more): pass
    def advance(self, label): pass
    def note(self, text): pass


# One round of one point: run these targets (in this order), record what they gave,
# return the seconds it took.
RunRound = Callable[[tuple, list], float]


@dataclass
class Looks:
    """Where points stand in their looks: each point's rounds to reach and rounds done,
    each experiment's budget spent, and after a look the results of a point that its
    further rounds run (those of its undecided comparisons; absent: all); kept between
    the calls that measure one look each."""
    goal: dict[tuple, int] = field(default_factory=dict)
    done: dict[tuple, int] = field(default_factory=dict)
    spent: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    wanted: dict[tuple, set[int]] = field(default_factory=dict)


def measure_rounds(store: Store, points: dict[tuple, list], schedule: Schedule, run_round: RunRound,
                   progress: Progress, rng: random.Random, stop: threading.Event | None = None,
                   looks: Looks | None = None, name: str = "measure") -> bool:
    """Rounds until every point has its rounds and no look asks for more (or `stop` is
    set).  points: key (experiment, ...) -> its targets.  A resumed target ahead of its
    point's others waits for them.  Given `looks`, it measures one look (the rounds due
    from where `looks` stands) and returns whether another is due, `looks` holding it.
    name: the progress phase of the first look."""
    one_look, looks = looks is not None, looks or Looks()
    goal, done, spent = looks.goal, looks.done, looks.spent
    if not goal:  # the first call: every point to its first look
        goal.update({k: schedule.first[k[0]] for k in points})
        done.update({k: min(t.rounds for t in ts) for k, ts in points.items()})
        progress.phase(name, sum((goal[k] - done[k]) * len(ts) for k, ts in points.items()))
    while True:
        due = [k for k in points if done[k] < goal[k] and any(t.live for t in points[k])]
        if not due:
            due = _next_look(store, points, looks, schedule, progress)
            if not due or one_look:
                return bool(due)
        rng.shuffle(due)
        for k in due:
            if stop is not None and stop.is_set():
                return False
            budget = schedule.budget.get(k[0], 0.0)
            if budget and done[k] >= schedule.first[k[0]] and spent[k[0]] >= budget:
                goal[k] = done[k]  # out of budget: this round is not started
                continue
            order = [t for t in points[k] if t.live and t.rounds <= done[k]
                     and (k not in looks.wanted or t.result_id in looks.wanted[k])]
            for t in order:  # one undecided again rejoins at this round: its process numbered by it, to pair by round
                t.rounds = done[k]
            rng.shuffle(order)
            spent[k[0]] += run_round(k, order)
            done[k] += 1


def _next_look(store: Store, points: dict, looks: Looks, schedule: Schedule, progress: Progress) -> list[tuple]:
    """In budget mode, at a look: the points with an undecided comparison get rounds up
    to the next look, while their experiment has budget left, for the results of those
    comparisons only (a decided one keeps the rounds that decided it: float-abi's points
    ran every variant to 10 and 28 rounds for one of three comparisons undecided); the
    undecided ones are shown.  Comparisons are decided over their whole experiment (its
    Holm family)."""
    policy, goal, done = schedule.policy, looks.goal, looks.done
    at_look = {k for k in points if done[k] == goal[k] and looks.spent[k[0]] < schedule.budget.get(k[0], 0.0)}
    more, labels, wanted = [], [], defaultdict(set)
    for exp in sorted({k[0] for k in at_look}):
        point_of, results = {}, []
        for k, ts in points.items():
            if k[0] == exp:
                for t in ts:
                    r = result_summary(store.result(t.result_id), store.samples(t.result_id))
                    point_of[(r.workload, r.variant, r.point)] = (k, t.result_id)
                    results.append(r)
        for c in compare_results(results, schedule.baselines, policy, schedule.against, schedule.first):
            k, rid = point_of.get((c.workload, c.variant, params_key(c.params)), (None, 0))
            if c.ratio and not policy.decided(c.verdict) and k in at_look:
                if goal[k] == done[k]:
                    goal[k] = 2 * goal[k]
                    more.append(k)
                base = point_of.get((c.workload, c.baseline, params_key(c.params)))
                wanted[k] |= {rid, base[1]} if base and base[0] == k else {t.result_id for t in points[k]}
                labels.append(f"{c.workload} {c.variant}/{c.baseline} {fmt_interval(c.ci)}")
    looks.wanted.update(wanted)
    if more:
        progress.note(f"{len(labels)} undecided: " + "; ".join(labels[:6]) + (" ..." if len(labels) > 6 else ""))
        progress.phase("undecided", sum((goal[k] - done[k]) * len(wanted[k]) for k in more))
    return more


def fmt_interval(ci: list[float]) -> str:
    return f"[{(ci[0] - 1) * 100:+.1f}%, {(ci[1] - 1) * 100:+.1f}%]"


def turns_in_pairs(members: int, samples: int, rng: random.Random) -> list[list[int]]:
    """The order of a group's turns: in each, the members in a fresh random order, each
    taking two samples in a row (its samples 2t and 2t + 1), so that every member's
    second sample follows its own first and no other build's carry-over enters the
    ratio read from them (stats.round_ratio); an odd last sample in a turn of its own."""
    turns = []
    for t in range(0, samples, 2):
        repeat = 2 if t + 1 < samples else 1
        turns.append([m for m in rng.sample(range(members), members) for _ in range(repeat)])
    return turns


def turn_order(cycles: list[list[int]], names: list[str]) -> list[list[tuple[int, str]]]:
    """For each member of a group, each of its samples' (position in its cycle, the name
    of the member whose sample ran just before it: '' for the very first)."""
    out: list[list[tuple[int, str]]] = [[] for _ in names]
    previous = ""
    for cycle in cycles:
        for position, m in enumerate(cycle):
            out[m].append((position, previous))
            previous = names[m]
    return out
