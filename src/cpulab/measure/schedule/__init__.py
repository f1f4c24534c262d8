"""Which process runs when: a plan's targets (`targets.py`), the one rounds loop with its
looks and budget (`rounds.py`), experiments two at a time (`lanes.py`), where it runs
(`site.py`), a run's lifecycle (`session.py`), and the runs of each kind: a plan's kernels
(`runner.py`), its programs (`programs.py`) and `cpulab time` (`timed_commands.py`)."""
