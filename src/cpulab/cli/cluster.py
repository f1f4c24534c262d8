"""A cluster of machines: `scheduler` and `worker` (dask.distributed, an optional extra).
"""
from __future__ import annotations

import os
import sys

import click

from cpulab.cli.common import cluster_security, fail, require_dask, tls_options


@click.command()
@click.option("--host", default="", help="Address to listen on (default: every interface).")
@click.option("--port", type=click.IntRange(0, 65535), default=8786, show_default=True)
@tls_options
def scheduler(host, port, tls_ca, tls_cert, tls_key):
    """A dask scheduler for 'cpulab worker' and 'cpulab run --cluster'.  Anyone who can
    reach it can make every worker run anything: keep it on a trusted network, or use TLS."""
    require_dask()
    from cpulab.measure import cluster as distributed
    sec = cluster_security(tls_ca, tls_cert, tls_key)
    try:
        distributed.serve_scheduler(host or None, port, sec, on_ready=lambda a: click.echo(f"scheduler at {a}"))
    except KeyboardInterrupt:
        sys.exit(130)
    except OSError as e:
        fail(f"scheduler: cannot listen on port {port}: {e.strerror or e}")


@click.command()
@click.argument("address")
@click.option("--name", default=None, help="This machine's name in the cluster (default: the hostname).")
@click.option("--cpu", type=click.IntRange(0), default=None, help="Run measured processes on this CPU (default: the last one).")
@tls_options
def worker(address, name, cpu, tls_ca, tls_cert, tls_key):
    """Join a cluster as one machine: one process, one thread, one measurement at a time.
    It builds and runs whatever plan the scheduler sends it."""
    require_dask()
    from cpulab.measure import cluster as distributed
    sec = cluster_security(tls_ca, tls_cert, tls_key)
    if cpu is not None and cpu not in os.sched_getaffinity(0):
        fail(f"--cpu {cpu}: not one of this process's CPUs {sorted(os.sched_getaffinity(0))}")

    def ready(n, ident):
        fp = ident["fingerprint"]
        click.echo(f"worker {n}: {fp['cpu_model']} ({fp['cpus']} CPUs), fingerprint {ident['machine_id']}, "
                   f"joining {address}")
    try:
        distributed.serve_worker(address, name or distributed.default_name(), cpu, sec, on_ready=ready)
    except KeyboardInterrupt:
        sys.exit(130)


COMMANDS = [scheduler, worker]
