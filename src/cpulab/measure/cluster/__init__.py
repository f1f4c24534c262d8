"""One plan on many machines: a dask.distributed cluster, results home to one store
(`servers.py`: the scheduler, a worker and what runs on it; `client.py`: the client and
its MachineSite).

A cpulab worker is one dask worker process with one thread and the resources `bench=1`
and `machine-NAME=1`.  Every task cpulab sends asks for `machine-NAME`, so a machine
runs one thing at a time (a build, a data file, one measured process) and never two
measurements at once, while machines run in parallel.

The client drives each machine from its own thread through runner.run_plan with a
MachineSite: the plan's rounds are exactly a local run's, but the fingerprint, the
builds (from the worker's own copy of the sources, with its own compilers, through its
own artifact cache), the data files, the measured processes and the probe tables all
happen on that worker.  Each result comes home as soon as it is measured and is stored
in the client's store under a per-machine run tied to that machine's fingerprint.

Faults: a worker that dies in the middle of a task is restarted by its nanny and the
task is retried once (the scheduler's allowed-failures is 1); a second death, or the
machine gone for longer than its grace period, records the job `lost`.  The scheduler
gone stops the run (session.Stopped).  A worker runs whatever plan it is sent: never let
anyone untrusted reach the scheduler.
"""
from cpulab.measure.cluster.client import (  # noqa: F401  what the CLI and the tests use
    MachineGone, MachineSite, cluster_machines, connect, run_on_cluster
)
from cpulab.measure.cluster.servers import (  # noqa: F401
    ClusterError, default_name, security, serve_scheduler, serve_worker
)
