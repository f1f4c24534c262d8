"""The measure stage: every measured process is a Job run by an Executor (`execute.py`),
pinned to a CPU it holds a host-wide lock on (`cpulock.py`); one rounds loop with the
policy's looks serves kernels, programs and `cpulab time` (`rounds.py`); a run's lifecycle
and signals (`session.py`), the runner of a plan's kernels at a site (`runner.py`, the
machine it meets in `site.py`, its targets in `targets.py`, two CPUs' lanes in
`lanes.py`) and programs (`programs.py`, `processes.py`), whole commands
(`timed_commands.py`), dask workers (`cluster/`), the probes (`probes/`), the code behind
the largest differences (`explain/`) and instruction counts (`instructions.py`)."""
