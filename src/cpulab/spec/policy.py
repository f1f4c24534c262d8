"""The one decision policy: when a comparison is significant, decided, and what it is called.

A DecisionPolicy is made once from the plan (its budget decides the looks) and used by
the runner's looks, the summary and every legend, so the rule lives in one place
(benchstat's Thresholds is the model).  Verdicts, with ratio = variant rate / baseline
rate and its interval at the look's confidence:

* `inconclusive`: so few rounds that no difference could ever be significant;
* `faster` / `slower`: significant after Holm's correction over the experiment, and the
  interval excludes 1; a comparison whose code was not run in several placements (a
  `[program]`, an older run) must also differ by at least `min_effect`;
* `same`: the interval lies within 1 +- `precision` (a difference, if any, is smaller);
* `unclear`: none of these -- neither significant nor that narrow.  More rounds decide it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields

from cpulab import stats

ALPHA = 0.05
# Budget mode looks at the data after n, 2n, 4n, ... rounds while the experiment's budget
# lasts.  Look k tests at ALPHA / (k (k + 1)): a half, a sixth, a twelfth, ... of it, which
# sum to ALPHA, so by the union bound the chance of any false verdict over all looks,
# whatever the stopping rule, stays below ALPHA (alpha spending, Bonferroni over looks).
# A run stored before this rule (no first look in its record) looked three times at
# ALPHA / 3.
LEGACY_LOOKS = 3
# By round, every experiment's first look is at this many rounds unless its plan says how
# many: where the signed rank cannot reach a look's level (its p is at least 2 / 2^n), a
# comparison is read by the t-test of its mean log ratio instead (tested), so an effect
# far beyond the rounds' spread is decided here however large the Holm family.
FIRST_ROUNDS = stats.MEAN_ROUNDS + 1  # a round lost to preemption, and the t-test still reads the rest
PRECISION = 0.01
# Where placement was not varied (programs built by their own build system, runs stored
# before placements), differences smaller than this are not called faster/slower:
# layout alone moves results by about this much (Mytkowicz et al., ASPLOS 2009).  Kernels
# run in several placements, so their test already includes it and needs no floor; nor
# does `cpulab time`, whose commands are compared as given, their layout part of them
# (spec/record.py).
MIN_EFFECT = 0.01
# How a variant meets its baseline: "turns" (the processes of one round alive together on
# one CPU, taking samples in turns: per-turn ratios, one per round, signed-rank over
# rounds), "paired" (one estimate per process, ratio per round) or "unpaired"
# (Mann-Whitney over processes).  docs/method.md has the figures.
METHODS = ("turns", "paired", "unpaired")
DEFAULT_METHOD = "turns"
# What a run's verdicts are read from: the time (the test above), or the instructions per
# unit counted under valgrind (exact, so no test: a change of at least `precision` is
# faster/slower).  Counts are a proxy for time, for runners too noisy to time on; the
# time is measured and shown beside them either way (estimates.count_verdicts).
METRICS = ("time", "instructions", "memory")
# The settings a policy is made of, as plans and stored records may give them.
LIMITS = {
    "budget": (0.0, 86400.0),   # seconds per experiment for rounds on undecided comparisons (0: a fixed count)
    "precision": (1e-06, 0.5),  # a comparison is decided when its interval is within +-this
}


@dataclass(frozen=True)
class DecisionPolicy:
    alpha: float = ALPHA
    budgeted: bool = False  # looks beyond the first (budget mode), alpha spent over them
    precision: float = PRECISION
    min_effect: float = MIN_EFFECT
    method: str = DEFAULT_METHOD
    metric: str = "time"
    # In turns, each member took its samples in pairs, and a round's ratio reads only the
    # second sample of each pair, which follows its own member's: no carry-over from
    # another build enters it (stats.round_ratio).  False: a run stored before pairs.
    pairs: bool = False

    @classmethod
    def of_settings(cls, budget: float, precision: float, method: str, metric: str = "time",
                    pairs: bool = False) -> "DecisionPolicy":
        """The policy of a plan's settings: budget mode spends alpha over its looks."""
        return cls(budgeted=bool(budget), precision=precision, method=method, metric=metric, pairs=pairs)

    @classmethod
    def from_dict(cls, d: dict) -> "DecisionPolicy":
        """A policy as a document wrote it (a document written before spending over open
        looks said `looks`: more than one was budget mode)."""
        d = dict(d)
        if "looks" in d:
            d["budgeted"] = d.pop("looks") > 1
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})

    @staticmethod
    def look(rounds: int, first: int) -> int:
        """Which look a comparison of `rounds` rounds is at, its experiment's first look at
        `first`: 1 up to first, k up to first x 2^(k-1) (a look cut short by the budget
        counts as the one it was heading for)."""
        return 1 if rounds <= first else math.ceil(math.log2(rounds / first) - 1e-9) + 1

    def level(self, rounds: int, first: int | None) -> float:
        """The level a comparison of `rounds` rounds is tested at, and 1 - it its interval's
        confidence: alpha at a run's one look; in budget mode alpha / (k (k + 1)) at look k
        (first: the experiment's first look; None: a run stored before, alpha / 3)."""
        if not self.budgeted:
            return self.alpha
        if first is None:
            return self.alpha / LEGACY_LOOKS
        k = self.look(rounds, first)
        return self.alpha / (k * (k + 1))

    def tested(self, t: stats.Test, level: float, family: int) -> stats.Test:
        """The test a comparison is read by at a look: the signed rank where it can reach
        the look's strictest Holm level (level / family); below that, the t-test of the
        mean log ratio, where its rounds agree with their robust centre (stats.mean_test).
        Which test is read depends on the rounds, the family and the look, not on the data;
        the agreement only ever falls back to a signed rank that cannot reach the level, so
        the t-test's level holds (bench/look_coverage.py)."""
        if t.p_mean is None or not t.agrees or t.p_floor * family < level:
            return t
        return t.by_mean()

    def verdict(self, t: stats.Test, p_adjusted: float, family: int = 1, floor: float | None = None,
                level: float | None = None) -> str:
        """The verdict of one test of a family of `family` tests, p_adjusted its p after its
        look's share and Holm (decide), tested at `level` (default alpha); floor: the
        smallest effect called (default min_effect; 0 where placement was varied)."""
        lo, hi = t.ci
        floor = self.min_effect if floor is None else floor
        if min(1.0, t.p_floor * family) >= (level or self.alpha):
            return "inconclusive"
        if p_adjusted < self.alpha and not lo <= 1.0 <= hi and abs(t.ratio - 1.0) >= floor:
            return "faster" if t.ratio > 1 else "slower"
        if all(1 - self.precision <= a and b <= 1 + self.precision for a, b in (t.ci, t.mean_ci or t.ci)):
            return "same"
        return "unclear"

    def decide(self, tests: list[stats.Test], floors: list[float] | None = None,
               levels: list[float] | None = None) -> list[tuple[float, str, stats.Test]]:
        """(adjusted p, verdict, the test read) of each test of one family, each at its own
        look's level (default: alpha, one look): Holm over p x alpha /
        level, so that one threshold, alpha, decides every look (weighted Bonferroni: over
        the looks a family still spends at most alpha)."""
        levels = levels or [self.alpha] * len(tests)
        floors = floors or [self.min_effect] * len(tests)
        read = [self.tested(t, lv, len(tests)) for t, lv in zip(tests, levels)]
        adjusted = stats.holm([min(1.0, t.p * self.alpha / lv) for t, lv in zip(read, levels)])
        return [(pa, self.verdict(t, pa, len(tests), f, lv), t)
                for t, pa, f, lv in zip(read, adjusted, floors, levels)]

    def first_look(self, family: int) -> int:
        """The rounds of an experiment's first look with a Holm family of `family`: by round
        (turns, paired) FIRST_ROUNDS, where the t-test can decide; unpaired, the fewest at
        which one comparison can be significant with one process against it at the first
        look's strictest level (twice Mann-Whitney's floor, stats.p_floor)."""
        if self.method != "unpaired":
            return FIRST_ROUNDS
        level = self.level(1, 1) / max(family, 1)
        n = 3
        while 2 * stats.p_floor(n, n) >= level:
            n += 1
        return n

    @staticmethod
    def decided(verdict: str) -> bool:
        """Whether a look may stop adding rounds for a comparison with this verdict."""
        return verdict not in ("unclear", "inconclusive")

    def legend(self, placed: bool = True, unplaced: bool = False, whole_runs: bool = False) -> str:
        """The method in words; placed: some result's rounds ran placements of their own,
        unplaced: some result's did not (qemu-user, a program or command cpulab does not
        link), so the sentence on layouts says what the rounds varied; neither (an
        imported run, which another tool measured): none is said.  whole_runs: beside
        kernels in turns, programs or commands ran, back to back in each round."""
        how = {"turns": "rounds of processes alive together, samples in turns; signed-rank over rounds of the "
                        + ("median ratio of each turn's second samples (each member takes two in a row: the second "
                           "follows its own, so no other build's carry-over enters)" if self.pairs else
                           "median per-turn ratio"),
               "paired": "signed-rank over per-round ratios",
               "unpaired": "Mann-Whitney over processes"}[self.method]
        if whole_runs and self.method == "turns":
            how += (" (programs and commands: one whole run each a round, back to back; signed-rank over per-round "
                    "ratios)")
        if self.method != "unpaired":
            how += (", or where few rounds floor its p the t-test of the mean log ratio, read only where the "
                    "robust centre lies within the mean's interval")
        spent = " each multiplied by k(k+1) at look k (alpha spent over the looks)," if self.budgeted else ""
        by_count = (f"verdicts by instructions per unit counted under valgrind (a proxy for time, shown beside "
                    f"it): faster/slower when the count changes by at least {100 * self.precision:g}%, same within, "
                    f"unclear without a count of both; the time: " if self.metric == "instructions" else
                    "verdicts by each whole process's peak memory (wait4's peak RSS), smaller/larger in place of "
                    "faster/slower, ratios of 1 / peak memory; kernels keep their time: " if self.metric == "memory"
                    else "")
        levels = (f"intervals at 1 - {self.alpha:g} / (k(k+1)) at look k: "
                  + ", ".join(f"{100 * (1 - self.alpha / (k * (k + 1))):.3g}%" for k in (1, 2, 3))
                  + f" at the first three (at least {100 * (1 - self.alpha):g}% wherever the looks stop)"
                  if self.budgeted else f"{100 * (1 - self.alpha):g}% intervals")
        head = by_count + levels + "; "
        layouts = ("each round runs a placement of its own of each build" + (" cpulab relinks" if unplaced else "")
                   + " (the same code with its functions, data and buffers elsewhere), so the test includes where "
                   "code and data sit" if placed else
                   "nothing is relinked: every round runs the same executables as built (the order and offsets of "
                   "their code and data are not varied)" if unplaced else "")  # neither: measured by another tool
        return (head + f"{how}; " + (f"{layouts}; " if layouts else "")
                + f"faster/slower when p < {self.alpha:g},{spent} after Holm over every comparison of the "
                f"experiment and the interval excludes 1 (the chance of any false faster/slower in an experiment "
                f"is at most {self.alpha:g}: that bound covers these two verdicts only); "
                + (f"a build run in one layout only (a program cpulab cannot relink, a link-time-optimised build) must "
                   f"also change by {100 * self.min_effect:g}%; " if self.min_effect else "")
                + ("held back as unclear when the members' carry-over differs significantly by as much as the "
                   "effect; " if self.method == "turns" and not self.pairs else "")  # no turns: none carried over
                + f"same when the interval, and by round that of the mean, "
                f"lies within ±{100 * self.precision:g}%; unclear otherwise; inconclusive when too few rounds to "
                f"ever be significant")
