"""Every run setting, declared once: its type, default, limits, help text, plan key and
command-line flags.

The plan file's model (plan/model.py), the flags of `run`, `ci`, `bisect`, `memlat`,
`bandwidth` and `time` (cli/settings_flags.py), the stored run (Plan.record) and the table
of plan keys in docs/plan.md (`cpulab schema --keys`) are all made from the fields below.
To add a setting, add a field here: it is then a plan key, a flag where `flags` names one,
stored with every run, and listed in the docs (a test checks the table is current).
"""
from __future__ import annotations

import functools
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from cpulab.spec.policy import METHODS, METRICS, DecisionPolicy

# The counts' and seconds' ranges, shared by a plan's settings and an experiment's own counts.
Processes = Annotated[int, Field(ge=1, le=10000)]  # per result, one per round
Samples = Annotated[int, Field(ge=1, le=10000)]  # per process (the harness holds at most 10000)
Budget = Annotated[float, Field(ge=0.0, le=86400.0)]  # seconds per experiment beyond its first look


def setting(default, help: str, *, flags: tuple[str, ...] = (), plan: bool = True, old: str = "",
            words: str = "", **limits):
    """One setting's declaration: `flags` its command-line spellings (the first is its name
    there; none: a plan key only), `plan` whether a plan file may give it, `old` the plan key
    it had before, `words` what a value is, for errors ("a number of seconds")."""
    return Field(default, description=help, json_schema_extra={"flags": list(flags), "plan": plan, "old": old,
                                                               "words": words}, **limits)


class Settings(BaseModel):
    """How a run measures and decides, as a plan and the command line give it."""
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True, allow_inf_nan=False)

    processes: Processes | None = setting(
        None, "Processes per result, one per round (the first look in budget mode). Default: 5, where the t-test "
              "of the mean decides what the signed rank's few rounds cannot (Mann-Whitney, unpaired: the fewest that "
              "can be significant after Holm) (-r as in hyperfine; --runs: its old name).", flags=("--processes", "-r", "--runs"), old="runs", words="a whole number")
    samples: Samples = setting(50, "Samples per process.", flags=("--samples",), words="a whole number")
    min_sample_time: float = setting(0.0025, "Seconds one sample lasts at least.", flags=("--min-sample-time",),
                                     ge=0.0001, le=60.0, words="a number of seconds")
    budget: float = setting(60.0, "Seconds per experiment, of its measured processes' own time, to spend adding "
                                  "rounds to undecided comparisons (0: a fixed count of --processes rounds); linking "
                                  "each round's placements and starting its processes come on top.",
                            flags=("--budget",), ge=0.0, le=86400.0, words="a number of seconds")
    precision: float = setting(0.01, "A comparison is decided when significant or when its interval is within "
                                     "+-this fraction.", flags=("--precision",), ge=1e-06, le=0.5, words="a fraction")
    warmup: float = setting(0.020, "Seconds of untimed repetitions in each process before its samples, at most one "
                                    "sample's (--min-sample-time).",
                            ge=0.0, le=60.0, words="a number of seconds")
    timeout: float = setting(300.0, "Seconds one process may take.", flags=("--timeout",), ge=0.1, le=86400.0,
                             words="a number of seconds")
    grid: Literal["quick", "full"] = setting("quick", "The parameter grids: quick or full (--profile: its old name).",
                                             flags=("--grid", "--profile"), old="profile")
    timer: Literal["auto", "perf", "tsc", "clock"] = setting("auto", "The clock samples are read with.",
                                                             flags=("--timer",))
    measure_identical: bool = setting(False, "Measure variants even when their code is byte-identical "
                                             "(an A/A test of the method).")
    cold: bool = setting(False, "Programs: evict their input files from the page cache before each run.",
                         flags=("--cold",))
    method: Literal[METHODS] = setting(
        "turns", "How variants meet their baseline: turns (a point's processes alive together, samples in turns), "
                 "paired (a ratio per round) or unpaired.", flags=("--method",))
    instructions: bool = setting(False, "Also count each result's instructions per unit, stepped on the core where "
                                        "that is cheap or valgrind cannot run it, else under valgrind (exact, "
                                        "beside the time).",
                                 flags=("--instructions",))
    metric: Literal[METRICS] = setting(
        "time", "What the verdicts are read from: time; instructions (counted exactly, a change of at least "
                "--precision is faster/slower); memory (each process's peak RSS).", flags=("--metric",))
    events: list[str] = setting(
        [], "Counters read around each sample (a kernel's timed call) and each whole process, as perf names them: "
            "task-clock, page-faults, context-switches (every Linux), cycles, instructions, branch-misses, "
            "L1-dcache-load-misses, a PMU's own (cpu/topdown-retiring/, rNNNN), or topdown; a comma list on the "
            "command line. Each result shows them per unit, each comparison their ratio with its interval.",
        flags=("--events",))
    against: int | None = setting(None, "Measure this stored run's executables (built on this machine) beside the "
                                        "new builds, in the same rounds: each variant against its own build from it.",
                                  flags=("--against",), plan=False, ge=1, words="a run id")
    seed: int | None = setting(None, "The run's seed: every random draw (which placement each round runs, the round "
                                     "order, the stack and heap pads) comes from it, and it is stored with the run; "
                                     "the same seed repeats a run's draws. Default: a new one each run (--seed: its old name).",
                               flags=("--random-seed", "--seed"), ge=0, lt=2**63, words="a whole number")

    @functools.cached_property
    def policy(self) -> DecisionPolicy:
        """The run's one decision policy: budget mode spends alpha over the looks; samples are
        taken in pairs (stats.round_ratio)."""
        return DecisionPolicy.of_settings(self.budget, self.precision, self.method, self.metric, pairs=True)

    def given(self, **values) -> "Settings":
        """These settings with some replaced, validated as a plan's are."""
        return type(self).model_validate({**self.model_dump(), **values})


def declared(name: str) -> dict:
    """A setting's declaration: flags, plan, old and words (see `setting`)."""
    return Settings.model_fields[name].json_schema_extra


DEFAULTS = Settings()
