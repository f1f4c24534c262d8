"""From one result's stored samples to its estimate (results.py), from a point's results to
their comparisons (comparisons.py, with carry-over between members: carryover.py): the
numbers the runner's looks, the summary and the machines table share.

A process's estimate is the fastest of its first KEEP used samples (noise only slows a
run down); a result's estimate is the median of its processes with an order-statistic
interval.  compare_results tests every variant against its experiment's baseline at each
point under one policy.DecisionPolicy; geomeans combine a variant's points.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

from cpulab import stats
from cpulab.estimates.carryover import carryover, carryover_ratios, comparison_carryover, hold_for_carryover
from cpulab.estimates.comparisons import (
    against_name, compare_events, compare_results, count_verdicts, geomeans, unobserved, witness_words, _basis,
    _measured_as
)
from cpulab.estimates.results import io_bound, placement_bands, result_summary, _events_summary

__all__ = ["ESTIMATOR", "against_name", "carryover", "carryover_ratios", "compare_events", "compare_results",
           "comparison_carryover", "count_verdicts", "geomeans", "hold_for_carryover", "io_bound",
           "placement_bands", "result_summary", "unobserved", "witness_words", "_basis", "_events_summary", "_measured_as"]

# Which code made a kept estimate (store: estimates): the bytes of this package and of
# stats.py, so that a change to how a result is estimated makes every one afresh (a
# history mixing two estimators could show a step where only cpulab changed).  A
# workload's io_bound flag, which the estimate also reads, is not part of it.
ESTIMATOR = hashlib.sha256(b"".join(p.read_bytes() for p in sorted(Path(__file__).parent.glob("*.py")))
                           + Path(stats.__file__).read_bytes()).hexdigest()[:16]
