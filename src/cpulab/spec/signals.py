"""The signals seen around each timed sample, declared once on this side of the C line.

A signal's declaration here is all Python needs: its samples column (store/schema.py adds
one per signal declared since), its field in an exported run file (store/exchange.py) and
in a stored sample (record.StoredSample), and, where it has one, the rule that leaves a
sample out of estimates (contamination, below).  On the C side, native/harness.c's
`struct sample` and its `sample_columns` table print it.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Signal:
    """A per-sample signal: what the harness (native/harness.c's sample_columns) or the
    launcher saw around one sample, stored in a samples column of its name, exported with
    the run and read back as a field of StoredSample, all from this declaration."""
    name: str
    meaning: str
    # Where nonzero, the sample is left out of estimates and its `excluded` says this
    # (formatted with the value); '' if the signal alone never leaves a sample out.
    leaves_out: str = ""
    by: str = "harness"  # or "launcher" (native/launch.c, a whole process's, wait4)


# Append only: each one declared after the first eleven becomes a store migration of its
# own (store/schema.py).  Off-CPU time's rule weighs several of them (contamination).
SIGNALS = (
    Signal("invol_switches", "involuntary context switches of the thread during the sample"),
    Signal("vol_switches", "voluntary context switches of the thread during the sample"),
    Signal("offcpu_ns", "wall time minus the thread's CPU time"),
    Signal("migrated", "1: the CPU differed before and after", leaves_out="migrated between CPUs"),
    Signal("steal_ticks", "/proc/stat steal of the CPU during the sample, USER_HZ ticks",
           leaves_out="steal {:g} ticks"),
    Signal("ratio_before", "core/TSC clock ratio just before"),
    Signal("ratio_after", "core/TSC clock ratio just after"),
    Signal("canary_before", "independent adds per core cycle just before"),
    Signal("canary_after", "independent adds per core cycle just after"),
    Signal("max_rss_kb", "a whole process's peak RSS, KiB (programs and cpulab time)", by="launcher"),
    Signal("page_faults", "a whole process's page faults", by="launcher"),
)


# A sample whose thread was off the CPU for more than this share of it (another thread
# ran: involuntary switch) is contaminated (bench/interference.py; README) -- unless it
# is long enough that subtracting the off-CPU time leaves less than SWITCH_BIAS_LIMIT of
# error, counting SWITCH_COST_NS of cache refill per switch (preempted 2.5 ms samples
# read 2.8% low per on-CPU second here: ~70 us a switch).  One pass over a 100 MB file
# lasts 0.4 s and is always preempted on a loaded machine; it stays usable this way.
OFFCPU_LIMIT = 0.01
SWITCH_COST_NS = 100e3
SWITCH_BIAS_LIMIT = 0.0025


def contamination(sample: dict, io_bound: bool = False) -> str:
    """Why a sample (the harness's per-sample signals) is left out of estimates; '' if it
    is used.  Only signals that predicted slow samples here are rules (README).  An
    IO-bound sample's off-CPU time is mostly its own wait for the device (voluntary
    switches): it counts as time, and only involuntary switches (preemption) leave it out."""
    for signal in SIGNALS:
        if signal.leaves_out and sample.get(signal.name):
            return signal.leaves_out.format(sample[signal.name])
    off = sample.get("offcpu_ns")
    if off is None or off <= OFFCPU_LIMIT * sample["ns"]:
        return ""
    switches = sample.get("invol_switches") or 0
    share = f"{100 * off / sample['ns']:.0f}%"
    if io_bound:
        return f"off-cpu {share} ({switches:g} involuntary switches)" if switches else ""
    if not switches:
        return f"off-cpu {share} without a switch"
    if switches * SWITCH_COST_NS > SWITCH_BIAS_LIMIT * (sample["ns"] - off):
        return f"off-cpu {share} ({switches:g} switches)"
    return ""  # long enough: its on-CPU time is the measure (stats.on_cpu_ns)


def left_out(report: dict, io_bound: bool = False) -> list[str]:
    """Why each sample of a harness report (its per-sample lists) is left out of estimates
    (contamination), '' for each one used."""
    names = [s.name for s in SIGNALS if s.name in report]
    return [contamination({"ns": ns, **{n: report[n][i] for n in names}}, io_bound)
            for i, ns in enumerate(report["ns"])]
