"""A plan across a cluster: a scheduler and two workers (alpha, beta) on 127.0.0.1,
started here as `cpulab scheduler` / `cpulab worker` processes and always torn down;
a worker killed in the middle of a job; the scheduler gone; a run exported and imported
(tests/test_exchange.py: hand-made and hostile run files)."""
from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

pytest.importorskip("distributed", reason="needs dask.distributed: pip install 'cpulab[distributed]'")

from conftest import SRC, cpulab  # noqa: E402
from cpulab.measure import cluster as fleet  # noqa: E402
from cpulab.store import exchange
from cpulab.analysis import between_runs as machines  # noqa: E402
from cpulab.measure.execute.executor import Finished, Outcome  # noqa: E402
from cpulab.model import Status, Verdict  # noqa: E402
from cpulab.store.db import Store  # noqa: E402

TESTS = Path(__file__).resolve().parent
START_TIMEOUT_S = 60

# The module's tests share one cluster (a module fixture, 4 s to start), in one worker
# (conftest), beside the other worker's tests: a machine may have every sample left out,
# and the tests allow for it.
pytestmark = pytest.mark.one_worker


def start(args: list[str], log: Path, env: dict | None = None) -> subprocess.Popen:
    # Workers import this module to run its jobs: tests/ is on their path.
    env = {**os.environ, **(env or {}), "PYTHONPATH": f"{SRC}:{TESTS}"}
    with open(log, "w") as f:
        return subprocess.Popen([sys.executable, "-m", "cpulab.cli", *args], stdout=f, stderr=subprocess.STDOUT,
                                env=env, start_new_session=True)


def stop(proc: subprocess.Popen) -> None:
    """The process and its group (a nanny and its worker) ended: asked first, so that
    multiprocessing unlinks its semaphores (each SIGKILLed cluster left 12 in /dev/shm)."""
    for sig, grace in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            proc.wait(grace)
            break
        except subprocess.TimeoutExpired:
            continue
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # what is left of its group
    except ProcessLookupError:
        pass


@dataclass
class Cluster:
    address: str
    client: object
    scheduler: subprocess.Popen
    workers: list = field(default_factory=list)
    root: Path = Path()  # its logs, and each worker's own cache: ROOT/workers/NAME


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """The module's cluster: a scheduler and workers alpha and beta, pinned apart, each with
    a cache and data folder of its own (as on two machines: what they build and make stays
    theirs).  One for the module: each start took 4 s."""
    logs = tmp_path_factory.mktemp("cluster")
    semaphores = set(Path("/dev/shm").glob("sem.mp-*"))
    procs = [start(["scheduler", "--host", "127.0.0.1", "--port", "0"], logs / "scheduler.log")]
    client = None
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not (address := _scheduler_address(logs / "scheduler.log")):
            assert time.monotonic() < deadline and procs[0].poll() is None, (logs / "scheduler.log").read_text()
            time.sleep(0.2)
        last = max(os.sched_getaffinity(0))
        for name, cpu in (("alpha", min(os.sched_getaffinity(0))), ("beta", last)):
            own = {"CPULAB_CACHE_DIR": str(logs / "workers" / name), "XDG_DATA_HOME": str(logs / name)}
            procs.append(start(["worker", address, "--name", name, "--cpu", str(cpu)], logs / f"{name}.log", own))
        client = fleet.connect(address, None)
        client.wait_for_workers(2, timeout=START_TIMEOUT_S)
        yield Cluster(address, client, procs[0], procs[1:], logs)
    finally:
        if client is not None:
            client.close(timeout=5)
        for p in procs:
            stop(p)
        # what the workers killed on purpose could not unlink; not those a process beside
        # the module (another test's) has open
        in_use = _mapped_inodes()
        for leaked in set(Path("/dev/shm").glob("sem.mp-*")) - semaphores:
            with contextlib.suppress(FileNotFoundError):  # its owner's, unlinked meanwhile
                if leaked.stat().st_ino not in in_use:
                    leaked.unlink()


def _mapped_inodes() -> set[int]:
    """The inodes of the /dev/shm files some live process has mapped: sem_open maps its
    semaphore's file (under the name it was made by, since deleted: the inode is the same)."""
    inodes = set()
    for maps in Path("/proc").glob("[0-9]*/maps"):
        try:
            inodes.update(int(line.split()[4]) for line in maps.read_text().splitlines() if " /dev/shm/" in line)
        except OSError:
            continue  # a process gone meanwhile
    return inodes


def _scheduler_address(log: Path) -> str | None:
    for line in log.read_text().splitlines():
        if line.startswith("scheduler at "):
            return line.split()[-1]
    return None


@pytest.fixture(scope="module")
def cluster_run(cluster, tmp_path_factory):
    """A tiny plan run across both machines, through the command line: six samples a
    process, as with two (the other pytest worker's tests beside it) one run had every
    sample of both machines left out, and no machine's share to check."""
    db = tmp_path_factory.mktemp("store") / "cluster.sqlite"
    p = cpulab("run", "-w", "sha256", "-v", "O2", "-p", "size=4096", "--runs", "2", "--samples", "6",
               "--min-sample-time", "0.002", "--cluster", cluster.address, "--json", db=db)
    assert p.returncode == 0, p.stderr
    return db, json.loads(p.stdout)


def test_plan_runs_on_every_machine_and_comes_home_tagged(cluster_run):
    db, doc = cluster_run
    assert doc["status"] == "done"
    assert sorted(m["machine"] for m in doc["machines"]) == ["alpha", "beta"]
    assert {r["machine"] for r in doc["results"]} == {"alpha", "beta"}
    ids = {m["machine"]: m["machine_id"] for m in doc["machines"]}
    for r in doc["results"]:
        assert r["machine_id"] == ids[r["machine"]]
        # processes measured: with a clean sample, or all of whose samples were left out as disturbed
        assert r["status"] == "ok" and r["processes"] + r["excluded_processes"] == 2 and len(r["samples"]) == 12
    table = doc["machine_table"]
    assert sorted(r["machine"] for r in table) == ["alpha", "beta"]
    # a machine whose every process was left out as disturbed has no estimate, so no share
    shares = [r["pct_of_best"] for r in table if r["median"] is not None]
    assert shares and max(shares) == pytest.approx(100) and all(0 < x <= 100 for x in shares)
    assert all(r["pct_of_best"] is None for r in table if r["median"] is None)
    # one store: each machine's run is a child of the cluster run, tied to its fingerprint
    store = Store(db)
    assert store.latest_run() == doc["run_id"]
    assert [store.run(c).machine for c in store.machine_runs(doc["run_id"])] == [m["machine"] for m in doc["machines"]]


def test_a_connected_client_silences_every_distributed_logger(cluster):
    """A lost scheduler is one line (run.Stopped), never a dask traceback from any of its loggers."""
    names = ["distributed", *(n for n in logging.root.manager.loggerDict if n.startswith("distributed."))]
    assert "distributed.batched" in names
    assert all(logging.getLogger(n).getEffectiveLevel() >= logging.CRITICAL for n in names)


def test_compare_by_machine_and_two_runs(cluster_run):
    db, doc = cluster_run
    p = cpulab("compare", "--by", "machine", "--against", "beta", "--json", db=db)
    assert p.returncode == 0, p.stderr
    rows = json.loads(p.stdout)["machine_table"]
    assert {r["reference"] for r in rows} == {"beta"}
    beta = next(r for r in rows if r["machine"] == "beta")
    assert beta["ratio"] == 1.0 if beta["median"] is not None else beta["verdict"] == Verdict.NO_BASELINE
    a, b = (m["run_id"] for m in doc["machines"])
    p = cpulab("compare", str(a), str(b), "--json", "--fail-on", "slower", db=db)
    cmp = json.loads(p.stdout)
    assert len(cmp["comparisons"]) == 1 and cmp["comparisons"][0]["workload"] == "sha256"
    assert p.returncode == (1 if cmp["comparisons"][0]["verdict"] == "slower" else 0)
    with pytest.raises(Exception, match="not a cluster run|cluster run"):
        machines.compare_runs(Store(db), doc["run_id"], a)


def test_unknown_machine_is_one_line_error(cluster, tmp_path):
    p = cpulab("run", "-w", "sha256", "-v", "O2", "--cluster", cluster.address, "--machines", "alpha,gamma",
               db=tmp_path / "s.sqlite")
    assert p.returncode == 2
    assert "gamma" in p.stderr and len(p.stderr.strip().splitlines()) == 1


@dataclass
class HangingJob:
    """Writes its pid to `marker` and sleeps: a job the test can kill its worker under."""
    marker: str
    timeout: float = 60
    env: dict = field(default_factory=dict)

    def argv(self) -> list[str]:
        return ["/bin/sh", "-c", f"echo $$ > {self.marker}; exec sleep 30"]

    def outcome(self, done: Finished) -> Outcome:
        return Outcome(Status.OK)


def _wait_for(path: Path, timeout: float = START_TIMEOUT_S) -> int:
    deadline = time.monotonic() + timeout
    while not (path.exists() and path.read_text().strip()):
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.1)
    pid = int(path.read_text())
    path.unlink()
    return pid


def _kill_worker(client, name: str) -> None:
    # A restarted worker can run its job before the scheduler lists it under its name (seen
    # once in a suite: the retry's pid written, "alpha" not yet among the machines)
    deadline = time.monotonic() + START_TIMEOUT_S
    while (addr := fleet.cluster_machines(client).get(name)) is None:
        assert time.monotonic() < deadline, f"{name} never listed"
        time.sleep(0.1)
    pid = client.run(os.getpid, workers=[addr])[addr]
    os.kill(pid, signal.SIGKILL)


def test_worker_killed_mid_job_is_retried_once_then_lost(cluster, tmp_path):
    import threading
    site = fleet.MachineSite(cluster.client, "alpha", parent=0, grace_s=START_TIMEOUT_S)
    other = fleet.MachineSite(cluster.client, "beta", parent=0)
    marker = tmp_path / "pid"
    got: list[Outcome] = []
    t = threading.Thread(target=lambda: got.append(site.execute(HangingJob(str(marker)))))
    t.start()
    orphans = []
    try:
        for _ in range(2):  # the first run and its one retry, each killed under its worker
            orphans.append(_wait_for(marker))
            _kill_worker(cluster.client, "alpha")
        t.join(START_TIMEOUT_S)
        assert not t.is_alive()
        assert got[0].status == Status.LOST and "alpha" in got[0].error
        assert not marker.exists()  # not run a third time
        # the other machine went on meanwhile, and alpha is back for later jobs
        assert other.identity("auto")["machine"] == "beta"
        cluster.client.wait_for_workers(2, timeout=START_TIMEOUT_S)
    finally:
        for pid in orphans:  # the killed workers' sleeps, which their worker could not reap
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_export_import_round_trip(cluster_run, tmp_path):
    db, doc = cluster_run
    f = tmp_path / "run.cpulab.json"
    assert cpulab("export", str(doc["run_id"]), "--format", "cpulab", "-o", str(f), db=db).returncode == 0
    other = tmp_path / "other.sqlite"
    first = cpulab("import", str(f), "--json", db=other)
    assert first.returncode == 0, first.stderr
    assert all(r["added"] for r in json.loads(first.stdout))
    store = Store(other)
    again = exchange.import_document(store, exchange.read_document(f))
    assert not any(added for _, added in again)  # idempotent
    assert len(store.runs()) == 3
    moved = machines.cluster_summary(store, again[0][0])
    key = lambda r: (r["machine"], r["variant"])  # noqa: E731
    assert sorted(map(key, moved.results)) == sorted(map(key, doc["results"]))
    for a, b in zip(sorted(doc["results"], key=key), sorted(moved.results, key=key)):
        assert a["samples"] == b["samples"] and a["machine_id"] == b["machine_id"]
    exported = json.loads(f.read_text())
    assert all(a["commands"] for r in exported["runs"] for a in r["artifacts"])


ECHO_C = r"""
#include <stdio.h>
int main(int argc, char **argv) {
    FILE *f = fopen(argv[1], "rb");
    if (!f) return 3;
    printf("%s\n%s\n", argv[0], argv[1]);
    return fclose(f);
}
"""


def test_programs_are_built_and_run_on_each_worker_with_its_own_paths(cluster, tmp_path):
    """Seed 002 on a cluster: each worker is sent the source, builds it with its own
    compilers into its own cache, makes its own input file and runs it there.  The check
    run's stdout is the program's own path and its input's: both must be the worker's."""
    if not shutil.which("make"):
        pytest.skip("install make")
    src = tmp_path / "src"
    src.mkdir()
    (src / "echo.c").write_text(ECHO_C)
    (src / "Makefile").write_text("echo: echo.c\n\t$(CC) $(CFLAGS) -o echo echo.c\n")
    plan = tmp_path / "plan.toml"
    plan.write_text(f'name = "echo"\nprocesses = 3\nbudget = 0\n[program.echo]\nsource = "{src}"\n'
                    'build = ["make CC={cc} CFLAGS=\'{cflags}\'"]\nrun = "{build}/echo {file}"\n'
                    'check = { exit = 0, stdout_regex = "workers/.*\\n.*workers/" }\n'
                    '[program.echo.inputs]\nfile = { random_file = ["4K"] }\n'
                    '[[experiment]]\nname = "echo"\nworkloads = ["echo"]\nvariants = ["O2", "O1"]\n')
    client_env = {"CPULAB_CACHE_DIR": str(tmp_path / "client-cache")}
    p = cpulab("run", str(plan), "--cluster", cluster.address, "--json", db=tmp_path / "db.sqlite", timeout=300,
               env=client_env)
    assert p.returncode == 0, p.stderr + "".join(f.read_text() for f in cluster.root.glob("*.log"))
    doc = json.loads(p.stdout)
    assert {(r["machine"], r["variant"], r["status"]) for r in doc["results"]} == \
        {(m, v, "ok") for m in ("alpha", "beta") for v in ("O2", "O1")}
    store = Store(tmp_path / "db.sqlite")
    for m in doc["machines"]:  # each machine's own build, in its own cache
        builds = store.analyses(m["run_id"], "program-build")
        assert len(builds) == 2 and all(b.data["tree"].startswith(str(cluster.root / "workers" / m["machine"]))
                                        for b in builds)
    assert not (tmp_path / "client-cache" / "programs").exists()  # nothing was built on the client


def test_scheduler_gone_stops_the_run_interrupted(cluster, tmp_path):
    """Last in the file: it ends the module's cluster."""
    db = tmp_path / "s.sqlite"
    env = {**os.environ, "PYTHONPATH": str(SRC), "CPULAB_DB": str(db)}
    proc = subprocess.Popen([sys.executable, "-m", "cpulab.cli", "run", "-w", "sha256", "-v", "O2", "-p", "size=4096",
                             "--runs", "500", "--samples", "2", "--min-sample-time", "0.002", "--cluster",
                             cluster.address], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _samples_stored(db):
            assert time.monotonic() < deadline and proc.poll() is None, proc.stderr
            time.sleep(0.2)
        stop(cluster.scheduler)
        _, err = proc.communicate(timeout=START_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1, err
    assert "scheduler is gone" in err and "Traceback" not in err
    store = Store(db)
    parent = store.latest_run()
    assert store.run(parent).status == "interrupted"
    kept = [r for c in store.machine_runs(parent) for r in store.results(c)]
    assert kept and all(r.status in ("ok", "pending") for r in kept), [(r.status, r.error) for r in kept]
    assert sum(len(store.samples(r.id)) for r in kept) > 0


def _samples_stored(db: Path) -> bool:
    if not db.exists():
        return False
    import sqlite3
    try:
        with sqlite3.connect(db, timeout=1) as con:
            return con.execute("SELECT count(*) FROM samples").fetchone()[0] > 0
    except sqlite3.OperationalError:  # the tables are not there yet
        return False
