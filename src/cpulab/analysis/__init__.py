"""The analyse stage: from a stored run to findings every view shows.

stage.py         analyse(store, run_id): compute and store a run's analyses, return its Summary
summary.py       stored samples -> the typed Summary (model.py): estimates, comparisons
cache_levels.py  cache levels from a latency-vs-working-set curve (memlat), labels for
                 bandwidth points, the operating system's view of the caches
sweeps.py        the memlat curves with their levels, bandwidth rows by cache level
"""
from cpulab.analysis.stage import analyse  # noqa: F401
from cpulab.analysis.summary import summarise  # noqa: F401
