"""The analyse stage: from a stored run to findings every view shows.

run_analyses.py  analyse(store, run_id): compute and store a run's analyses, return its Summary
summary.py       stored samples -> the typed Summary (model.py), with estimates/' numbers
cache_levels.py  cache levels from a latency-vs-working-set curve (memlat), labels for
                 bandwidth points, the operating system's view of the caches
steps.py         what explains each step of a latency curve (caches, TLB reach, memory)
memory.py        the memlat curves with their levels, page colour rows, bandwidth rows by cache level
findings.py      the findings in words: knees at cache boundaries, the widest gap
between_runs.py  a cluster run's machines side by side, one run against another
history.py       one result over runs, with its change points; gate.py: `cpulab ci`'s verdict
"""
from cpulab.analysis.run_analyses import analyse  # noqa: F401
from cpulab.analysis.summary import summarise  # noqa: F401
