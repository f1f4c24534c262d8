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

from dataclasses import dataclass

from cpulab import stats

ALPHA = 0.05
# Budget mode looks at the data after n, 2n and 4n rounds at most; each look tests at
# ALPHA / LOOKS, so by the union bound the chance of any false verdict over all looks,
# whatever the stopping rule, stays below ALPHA (alpha spending, Bonferroni).
LOOKS = 3
PRECISION = 0.01
# Where placement was not varied (programs built by their own build system, runs stored
# before placements), differences smaller than this are not called faster/slower:
# layout alone moves results by about this much (Mytkowicz et al., ASPLOS 2009).  Kernels
# run in several placements, so their test already includes it and needs no floor.
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
    looks: int = 1
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
        """The policy of a plan's settings: budget mode spends alpha over LOOKS looks."""
        return cls(looks=LOOKS if budget else 1, precision=precision, method=method, metric=metric, pairs=pairs)

    @property
    def look_alpha(self) -> float:
        """The level each look tests at."""
        return self.alpha / self.looks

    @property
    def confidence(self) -> float:
        """The level of every comparison interval: 1 - look_alpha (95%, or 98.3% over 3 looks).
        The interval shown is that of the look where its comparison stopped; the union bound
        guarantees 1 - alpha there whatever the stopping, and the looks simulated
        (bench/look_coverage.py, tests/test_stats.py) cover 98.1-98.6% pooled by stopping look,
        96.0-98.9% in each of 24 cases of noise, effect and family."""
        return 1 - self.look_alpha

    def verdict(self, t: stats.Test, p_adjusted: float, family: int = 1, floor: float | None = None) -> str:
        """The verdict of one test of a family of `family` tests (Holm-adjusted p); floor:
        the smallest effect called (default min_effect; 0 where placement was varied)."""
        lo, hi = t.ci
        floor = self.min_effect if floor is None else floor
        if min(1.0, t.p_floor * family) >= self.look_alpha:
            return "inconclusive"
        if p_adjusted < self.look_alpha and not lo <= 1.0 <= hi and abs(t.ratio - 1.0) >= floor:
            return "faster" if t.ratio > 1 else "slower"
        if all(1 - self.precision <= a and b <= 1 + self.precision for a, b in (t.ci, t.mean_ci or t.ci)):
            return "same"
        return "unclear"

    def decide(self, tests: list[stats.Test], floors: list[float] | None = None) -> list[tuple[float, str]]:
        """(Holm-adjusted p, verdict) of each test of one family (with each test's floor)."""
        adjusted = stats.holm([t.p for t in tests])
        floors = floors or [self.min_effect] * len(tests)
        return [(pa, self.verdict(t, pa, len(tests), f)) for t, pa, f in zip(tests, adjusted, floors)]

    def first_look(self, family: int) -> int:
        """The fewest rounds at which one comparison of a Holm family of `family` can be
        significant with one round against it (its Holm level at worst: look_alpha /
        family).  By round (turns, paired) that p is 4 / 2^n, twice the signed-rank floor;
        unpaired it is twice Mann-Whitney's floor (stats.p_floor)."""
        def one_against(n: int) -> float:
            return 2 * (stats.p_floor(n, n) if self.method == "unpaired" else 2 * 0.5 ** n)
        n = 3
        while one_against(n) >= self.look_alpha / max(family, 1):
            n += 1
        return n

    @staticmethod
    def decided(verdict: str) -> bool:
        """Whether a look may stop adding rounds for a comparison with this verdict."""
        return verdict not in ("unclear", "inconclusive")

    def legend(self) -> str:
        how = {"turns": "rounds of processes alive together, samples in turns; signed-rank over rounds of the "
                        + ("median ratio of each turn's second samples (each member takes two in a row: the second "
                           "follows its own, so no other build's carry-over enters)" if self.pairs else
                           "median per-turn ratio"),
               "paired": "signed-rank over per-round ratios",
               "unpaired": "Mann-Whitney over processes"}[self.method]
        spent = f" ({self.alpha:g} spent over {self.looks} looks)" if self.looks > 1 else ""
        by_count = (f"verdicts by instructions per unit counted under valgrind (a proxy for time, shown beside "
                    f"it): faster/slower when the count changes by at least {100 * self.precision:g}%, same within, "
                    f"unclear without a count of both; the time: " if self.metric == "instructions" else
                    "verdicts by each whole process's peak memory (wait4's peak RSS), smaller/larger in place of "
                    "faster/slower, ratios of 1 / peak memory; kernels keep their time: " if self.metric == "memory"
                    else "")
        stopping = f" (at least {100 * (1 - self.alpha):g}% wherever the looks stop)" if self.looks > 1 else ""
        head = by_count + f"{100 * self.confidence:.3g}% intervals{stopping}; "
        return (head + f"{how}; each round runs a placement of its "
                f"own of each build (the same code with its functions, data and buffers elsewhere), so the test "
                f"includes where code and data sit; faster/slower when p < {self.look_alpha:.3g}{spent} after Holm "
                f"over every comparison of the experiment and the interval excludes 1 (the chance of any false "
                f"faster/slower in an experiment is at most {self.alpha:g}: that bound covers these two verdicts "
                f"only); a build run in one layout only (a program cpulab cannot relink, a link-time-optimised build) must also "
                f"change by "
                f"{100 * self.min_effect:g}%; "
                + ("" if self.pairs else "held back as unclear when the members' carry-over differs "
                                         "significantly by as much as the effect; ")
                + f"same when the interval, and by round that of the mean, "
                f"lies within ±{100 * self.precision:g}%; unclear otherwise; inconclusive when too few rounds to "
                f"ever be significant")
