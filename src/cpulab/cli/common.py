"""What every command shares: the consoles, one-line errors, the store, JSON output, the
progress bar, and the options several commands take.
"""
from __future__ import annotations

import json
import math
import sys
import threading
from contextlib import contextmanager
from pathlib import Path

import click
from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                           TimeRemainingColumn)

from cpulab import params, paths
from cpulab.store.db import Store, StoreError

console = Console(stderr=True)


out = Console(width=None if sys.stdout.isatty() else 140)


def fail(msg: str) -> None:
    """One line naming the problem, exit status 2."""
    click.echo(f"cpulab: error: {msg}", err=True)
    sys.exit(2)


def open_store(db: str | None, create: bool = True) -> Store:
    """The store (default: paths.default_db); create=False for commands that only read:
    they make no store, and no directory, where there is none."""
    try:
        return Store(db or paths.default_db(), create=create)
    except StoreError as e:
        fail(str(e))


def write_output(path: str, text: str) -> None:
    """Write a file the user named (-o, --export-json), or one line naming it and why not."""
    try:
        Path(path).write_text(text)
    except OSError as e:
        fail(f"{path}: cannot write: {e.strerror or e}")


def emit_json(doc) -> None:
    click.echo(json.dumps(doc, indent=1, default=str))


@contextmanager
def progress_bar(label_width: int = 8):
    """The one progress bar of long commands, on stderr, gone when the work ends.  Drawn 4
    times a second, not rich's 10: each drawing holds the GIL the measuring threads hand
    their turns with (at 10, 7 s of CPU over the seeds' run)."""
    with Progress(TextColumn(f"{{task.description:{label_width}}}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), TextColumn("left"), TimeRemainingColumn(),
                  TextColumn("{task.fields[status]}", markup=False), console=console, transient=True,
                  refresh_per_second=4) as bar:
        yield bar


class RichProgress:
    """Adapter from measure.rounds.Progress to a rich progress bar; `name` prefixes its
    phases (a cluster run's machine)."""

    def __init__(self, progress: Progress, name: str = ""):
        self.p, self.task, self.name = progress, None, name
        self.total, self.lock = 0, threading.Lock()  # lanes grow one phase from two threads

    def phase(self, name, total):
        if self.task is not None:
            self.p.update(self.task, visible=False)
        self.total = total
        self.task = self.p.add_task(f"{self.name} {name}" if self.name else name, total=total, status="")

    def grow(self, more):
        with self.lock:
            self.total += more
            self.p.update(self.task, total=self.total)

    def advance(self, label):
        self.p.update(self.task, advance=1, status=label)

    def note(self, text):
        self.p.console.print(text)


class FiniteRange(click.FloatRange):
    """A number within a range; NaN, which compares false with
    every bound and so passes click's FloatRange, is refused too."""

    def convert(self, value, param, ctx):
        v = super().convert(value, param, ctx)
        if math.isnan(v):
            self.fail(f"{value!r} is not a number", param, ctx)
        return v


# Any path is taken here and judged by Store (a directory is one line, exit 2), so that completion
# sees the --db given, not the default store's runs (a value click refused reads as none given).
db_option = click.option("--db", type=click.Path(), default=None,
                         help="SQLite store (default: $XDG_DATA_HOME/cpulab/cpulab.sqlite, or $CPULAB_DB).")


json_option = click.option("--json", "as_json", is_flag=True, help="Print one JSON document instead of tables.")


def tls_options(f):
    """--tls-ca/--tls-cert/--tls-key: all three turn on TLS for every cluster connection."""
    for name, what in (("--tls-key", "this end's private key"), ("--tls-cert", "this end's certificate"),
                       ("--tls-ca", "the CA that signed every end's certificate")):
        f = click.option(name, type=click.Path(dir_okay=False), default=None, help=f"TLS: {what} (PEM).")(f)
    return f


def cluster_security(tls_ca, tls_cert, tls_key):
    require_dask()
    from cpulab.measure import cluster as distributed
    try:
        return distributed.security(tls_ca, tls_cert, tls_key)
    except distributed.ClusterError as e:
        fail(str(e))


def require_dask():
    try:
        import distributed  # noqa: F401
    except ImportError:
        fail("clusters need dask.distributed: pip install 'cpulab[distributed]'")


def run_id_or_latest(store: Store, run_id: int | None) -> int:
    run_id = run_id or store.latest_run()
    if run_id is None:
        fail(f"no runs in {store.path}; start with 'cpulab run'")
    try:
        store.run(run_id)
    except StoreError as e:
        fail(str(e))
    return run_id


def default_report_path(store: Store, run_id: int) -> Path:
    """Beside the store, named after it: two stores never overwrite each other's reports."""
    return store.path.parent / "reports" / f"{store.path.stem}-run-{run_id}.html"


def size_option(option: str, text: str) -> int:
    try:
        return params.parse_size(text)
    except params.ParamError as e:
        fail(f"{option}: {e}")
