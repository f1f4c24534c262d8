"""Running one measured process, the one way cpulab runs anything it times: what a job is
(`jobs.py`), the executor that pins, pads, times out and reaps it (`executor.py`), the
host-wide lock on its CPU (`cpulock.py`), and whole commands under the launcher
(`processes.py`: programs and `cpulab time`)."""
