"""The measure stage, in the folders where its jobs part: `execute/` runs one measured
process (a Job run by an Executor, pinned to a CPU it holds a host-wide lock on, whole
commands under the launcher); `schedule/` decides which process runs when (a plan's
targets, the one rounds loop with the policy's looks for kernels, programs and `cpulab
time`, two CPUs' lanes, a run's lifecycle and signals, the site it runs at); beside them
the probes (`probes/`), the code behind the largest differences (`explain/`), instruction
counts (`instructions.py`) and dask workers (`cluster/`)."""
