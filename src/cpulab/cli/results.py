"""Reading stored runs: `compare`, `report`, `export`, `import`, `runs`.
"""
from __future__ import annotations

import json
import sqlite3
import sys
import time
from pathlib import Path

import click
from rich.markup import escape
from rich.table import Table

from cpulab import analysis
from cpulab.spec import policy
from cpulab.analysis import between_runs
from cpulab.cli import complete, pipeline
from cpulab.cli.common import (
    db_option, default_report_path, emit_json, fail, json_option, open_store, out, run_id_or_latest, write_output
)
from cpulab.cli.flags import grouped, output_options
from cpulab.model import Machines, RunPair, Verdict
from cpulab.report import exports, html, machine_views
from cpulab.report.tables import to_rich
from cpulab.report.terminal import print_machines, print_summary
from cpulab.store import formats
from cpulab.store.db import StoreError
from cpulab.store.rows import RunListing
from cpulab.cli.kinds import VIEWS


@click.command()
@click.argument("run_ids", type=int, nargs=-1, shell_complete=complete.run_ids)
@grouped("how", "baseline", "by", "against", "method")
@click.option("--baseline", default=None, help="Compare against this variant instead of the plan's baseline.")
@click.option("--by", type=click.Choice(["variant", "machine"]), default="variant", show_default=True,
              help="machine: machines ranked, and machines x workloads (a cluster run, or RUN RUN ...).")
@click.option("--against", default=None, help="With --by machine: the machine the others are compared with (default: the fastest).")
@click.option("--fail-on", default=None, callback=lambda ctx, param, v: _verdict_words(v),
              help="Exit 1 when any comparison's verdict is one of these words (a comma list, e.g. "
                   "slower,unclear), for CI.")
@click.option("--method", type=click.Choice(list(policy.METHODS)), default=None,
              help="Override the run's method: turns (per-turn ratios of processes that took samples in turns), "
                   "paired (signed-rank over per-round ratios) or unpaired (Mann-Whitney over processes).")
@output_options
def compare(run_ids, how, fail_on, output):
    """Compare a run's variants against a baseline (default: the latest run), the same
    workloads in two runs (RUN_A RUN_B), or machines ranked (--by machine: a cluster run's,
    or any number of runs, imported ones too)."""
    store, by, as_json = open_store(output.db, create=False), how.by, output.as_json
    if len(run_ids) > 2 and by != "machine":
        fail("more than two runs: give --by machine to rank their machines")
    if by == "machine":
        doc = machines_document(store, run_ids, how.against)
        verdicts = [r.verdict for r in doc.machine_table]
        if as_json:
            emit_json(doc.to_dict())
        else:
            print_machines(doc, out)
    elif len(run_ids) == 2:
        try:
            doc = between_runs.compare_runs(store, run_id_or_latest(store, run_ids[0]),
                                            run_id_or_latest(store, run_ids[1]))
        except StoreError as e:
            fail(str(e))
        verdicts = [r.verdict for r in doc.comparisons]
        if as_json:
            emit_json(doc.to_dict())
        else:
            print_run_comparison(doc)
    else:
        run_id = run_id_or_latest(store, run_ids[0] if run_ids else None)
        summary = analysis.summarise(store, run_id, how.baseline, how.method)
        if how.baseline and not any(r.variant == how.baseline for r in summary.results):
            fail(f"--baseline {how.baseline}: run {run_id} has no such variant")
        verdicts = [c.verdict for c in summary.comparisons]
        if as_json:
            emit_json(summary.to_dict())
        else:
            print_summary(summary, out, VIEWS)
    if fail_on and any(v in fail_on for v in verdicts):
        sys.exit(1)


def machines_document(store, run_ids: tuple[int, ...], against: str | None = None) -> Machines:
    """One cluster run's machines, or several runs as machines (any, imported ones too)."""
    ids = [run_id_or_latest(store, r) for r in run_ids] or [run_id_or_latest(store, None)]
    if len(ids) == 1:
        if not store.machine_runs(ids[0]):
            fail(f"--by machine: run {ids[0]} did not run on a cluster; give the runs of each machine")
        doc = between_runs.cluster_summary(store, ids[0], against)
    else:
        if cluster := next((r for r in ids if store.machine_runs(r)), None):
            fail(f"run {cluster} is a cluster run: give its machines' runs "
                 f"({', '.join(map(str, store.machine_runs(cluster)))}) or it alone")
        doc = between_runs.machines_summary(store, ids, against)
    if against and not any(m.machine == against for m in doc.machines):
        fail(f"--against {against}: no such machine (machines: {', '.join(m.machine for m in doc.machines)})")
    return doc


def _verdict_words(text: str | None) -> set[str]:
    """--fail-on's comma list, each word a verdict."""
    if not text:
        return set()
    words = {w.strip() for w in text.split(",")}
    known = {v.value for v in Verdict}
    if bad := sorted(words - known):
        raise click.BadParameter(f"{bad[0]!r} is not a verdict (one of: {', '.join(sorted(known))})")
    return words


def print_run_comparison(doc: RunPair) -> None:
    out.print(to_rich(machine_views.run_comparison_table(doc)))


@click.command()
@click.argument("run_ids", type=int, nargs=-1, shell_complete=complete.run_ids)
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="Where to write the HTML file (default: reports/STORE-run-N.html beside the store).")
@db_option
def report(run_ids, output, db):
    """Write a self-contained HTML report of a run (default: the latest); of a cluster run or
    of several runs, their machines side by side, ranked."""
    store = open_store(db, create=False)
    ids = [run_id_or_latest(store, r) for r in run_ids] or [run_id_or_latest(store, None)]
    several = len(ids) > 1 or store.machine_runs(ids[0])
    path = Path(output) if output else default_report_path(store, ids[0]) if len(ids) == 1 else \
        default_report_path(store, ids[0]).with_name(f"{store.path.stem}-runs-{'-'.join(map(str, ids))}.html")
    try:
        path = html.write(machines_document(store, ids) if several else analysis.summarise(store, ids[0]), path, VIEWS)
    except html.ReportError as e:
        fail(str(e))
    click.echo(str(path))


@click.command()
@click.argument("run_id", type=int, required=False, shell_complete=complete.run_ids)
@click.option("--format", "fmt", type=click.Choice(["cpulab", *exports.FORMATS]), default="json",
              help="cpulab: the whole run with every sample, for 'cpulab import' elsewhere; "
                   "github-action-benchmark (customBiggerIsBetter), bencher (BMF) and hyperfine: for dashboards "
                   "and the scripts of those tools.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None, help="File to write (default: stdout).")
@db_option
def export(run_id, fmt, output, db):
    """Export a run's results and comparisons (JSON, CSV, Markdown, a dashboard's format), or the run itself."""
    store = open_store(db, create=False)
    if fmt == "cpulab":
        from cpulab.store import exchange  # its pydantic models: only import and export load them
        text = json.dumps(exchange.export_run(store, run_id_or_latest(store, run_id)))
    else:
        summary = analysis.summarise(store, run_id_or_latest(store, run_id))
        try:
            text = exports.render(summary, fmt)
        except exports.ExportError as e:
            fail(str(e))
    if output:
        write_output(output, text)
    else:
        click.echo(text, nl=False)


@click.command("import")
@click.argument("file", type=click.Path())
@click.option("--format", "fmt", type=click.Choice(["auto", "cpulab", *formats.TOOLS]), default="auto",
              show_default=True, help="What wrote the file: cpulab export, hyperfine --export-json, Google "
                                      "Benchmark's JSON (gbench), pyperf, criterion.rs (its target/criterion "
                                      "folder or a sample.json), go test -bench text (gotest), JMH -rf json "
                                      "(jmh) or BenchmarkDotNet's full JSON (bdn); auto tells them apart.")
@click.option("--variant", default=None,
              help="Every tool but cpulab and hyperfine: the variant their benchmarks are stored under (default: "
                   "the tool's name); two builds imported under two names compare in one 'cpulab compare A B'.")
@db_option
@json_option
def import_(file, fmt, variant, db, as_json):
    """Add a run to the store: one exported by cpulab (once), or another tool's results."""
    from cpulab.store import exchange, harnesses  # the parsers and their pydantic models (formats.py)
    path = Path(file)
    try:
        runs, source = harnesses.read_runs(path, fmt, variant, sys.argv)  # whole and checked before the store opens
    except exchange.RunFileError as e:  # foreign's errors are RunFileErrors too
        fail(str(e))
    store = open_store(db)
    try:
        ids = store.import_runs(runs, source)
    except sqlite3.IntegrityError as e:  # the schema's checks should have refused it; nothing was written
        fail(f"{path}: inconsistent with itself ({e})")
    if source != "cpulab" and ids[0][1]:  # another tool's results become a run like any other: analysed, reported
        pipeline.carry(store, lambda: ids[0][0])
    if as_json:
        emit_json([{"run_id": rid, "added": added} for rid, added in ids])
        return
    for rid, added in ids:
        click.echo(f"run {rid}: " + ("added" if added else "already in the store"))


@click.command("runs")
@click.option("--label", default=None, help="Only runs with this label.")
@click.option("--commit", default=None, help="Only runs of code at this git commit (a prefix will do).")
@click.option("--machine", default=None,
              help="Only runs on this machine: its fingerprint id (a prefix), its worker name or a part of its CPU model.")
@db_option
@json_option
def runs_(label, commit, machine, db, as_json):
    """The runs in the store, with where their code came from."""
    store = open_store(db, create=False)
    rows = store.runs(label=label, commit=commit, machine=machine)
    if as_json:
        emit_json([r.to_dict() for r in rows])
        return
    out.print(runs_table(str(store.path), rows))


def runs_table(title: str, rows: list[RunListing]) -> Table:
    """`cpulab runs`: a line per run, with where its code came from."""
    t = Table(title=title, title_justify="left")
    for c in ("run", "started", "status", "results", "label", "commit", "machine"):
        t.add_column(c)
    for r in rows:
        o = r.origin
        code = (o["commit"][:10] + ("+dirty" if o.get("dirty") else "")) if o.get("commit") else ""
        t.add_row(str(r.id), time.strftime("%Y-%m-%d %H:%M", time.localtime(r.started)),
                  r.status + (" (imported)" if r.imported else ""),
                  str(r.results), escape(r.label), code,
                  r.machine_id + (f" ({r.machine}, of run {r.parent})" if r.parent else ""))
    return t


COMMANDS = [compare, report, export, import_, runs_]
