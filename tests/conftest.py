"""Shared test helpers: build one kernel with the harness and run it; skip what this
machine cannot build (optional toolchains and libraries), naming the Debian package."""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import sqlite3
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from cpulab.compile import artifacts
from cpulab.plan import toolchain
from cpulab import workloads
from cpulab.measure.execute.executor import Finished, Outcome, default_executor
from cpulab.model import Status
from cpulab.spec import signals
from cpulab.store.db import Store
from cpulab.plan.toolchain import Variant
from cpulab.workloads import KERNEL_DIR
from cpulab.machine import toolchains
from zygote import Zygote

NATIVE_DIR = KERNEL_DIR.parent / "native"
ABI_FLAGS = ("-m32",)  # flags that apply to the harness and the link too


def workload_of(kernel: str | None) -> workloads.Workload | None:
    """The workload declared with this kernel file, if any (its libraries and headers)."""
    return next((w for w in workloads.registry().values() if w.kernel == kernel), None)


def skip_unless_buildable(compiler: str = "gcc", flags=(), kernel: str | None = None) -> None:
    """Skip the calling test, in one line naming the Debian package, when this machine
    cannot build with `compiler` and the ABI flags among `flags` (-m32), or lacks a library
    that `kernel` (a file in cpulab/kernels) needs: the checks `cpulab run` makes
    (toolchains.unavailable_reason, libraries_reason), so tests and runs skip alike."""
    abi = tuple(f for f in flags if f in ABI_FLAGS)
    package = next((v.package for v in toolchain.BUILTIN.values() if (v.compiler, v.abi_flags) == (compiler, abi)), "")
    v = toolchains.resolved(toolchain.Variant("test", compiler, abi_flags=abi, package=package))
    why = toolchains.unavailable_reason(v)
    if not why and (w := workload_of(kernel)):
        why = toolchains.libraries_reason(v, w.requires, w.libs)
    if why:
        pytest.skip(why)


def compile_command(compiler: str, flags) -> list[str]:
    """`compiler flags` as this machine builds them: -m32 may become the static i686 cross
    compiler (toolchains.resolved); for tests that call the compiler themselves."""
    abi = tuple(f for f in flags if f in ABI_FLAGS)
    v = toolchains.resolved(Variant("test", compiler, tuple(f for f in flags if f not in ABI_FLAGS), abi_flags=abi))
    return [v.compiler, *v.abi_flags, *v.cflags, *v.ldflags]


@pytest.fixture(scope="session")
def build_kernel(tmp_path_factory):
    """build_kernel("sha256.c", cflags=("-O2",)) -> path of an executable, built as a run
    builds its workload's (placeable: the same objects as the runs' builds in the session's
    cache, compiled once); skips (skip_unless_buildable) what cannot be built here.  The
    workers share the builds (a concurrent build of one artifact wins or loses whole)."""
    out = session_root(tmp_path_factory) / "cache" / "artifacts"

    def build_one(kernel: str, cflags=("-O2",), compiler="gcc") -> Path:
        skip_unless_buildable(compiler, cflags, kernel)
        v = toolchains.resolved(Variant("test", compiler, tuple(f for f in cflags if f not in ABI_FLAGS),
                                       abi_flags=tuple(f for f in cflags if f in ABI_FLAGS)))
        if w := workload_of(kernel):
            return Path(artifacts.build_artifact(w, v, cache_dir=out).path)
        return Path(artifacts.build_executable(KERNEL_DIR / kernel, v, cache_dir=out, placeable=True).path)

    return build_one


@dataclass
class ArgvJob:
    """The tests' job: an artifact with raw harness arguments -> the JSON it printed,
    whatever its status."""
    command: list[str]
    timeout: float = 120
    env: dict[str, str] = field(default_factory=dict)

    def argv(self) -> list[str]:
        return self.command

    def outcome(self, done: Finished) -> Outcome:
        return Outcome(Status.OK, data=json.loads(done.stdout))


def run_artifact(exe: Path, *args: str, timeout: float = 120) -> dict:
    """Run an artifact through the executor (pinned, layout pad) and parse its JSON line."""
    return default_executor().execute(ArgvJob([str(exe), *args], timeout)).data


def kept_samples(r: dict) -> list[int]:
    """The samples of a harness report that estimates keep (spec/signals.contamination):
    none migrated, saw steal or was off the CPU beyond the rule's share.  A host that takes
    the CPU from a whole process (seen: an L1 chase at 10.8 cycles a load, its fastest of
    five) leaves none."""
    return [i for i, why in enumerate(signals.left_out(r)) if not why]


def fastest_kept(run, tries: int = 3) -> dict:
    """run() (one harness process: its report) until some of its samples are kept, at most
    `tries` times: the report with only its kept samples' `ns` and `cycles`; skips, saying
    why, where every sample of every try was left out (nothing to bound a speed with)."""
    for _ in range(tries):
        r = run()
        assert r["status"] == "ok", r["error"]
        if kept := kept_samples(r):
            return {**r, "ns": [r["ns"][i] for i in kept], "cycles": [r["cycles"][i] for i in kept]}
    pytest.skip(f"the host took the CPU from every sample of {tries} processes (steal or preemption)")


TEST_KERNELS = Path(__file__).resolve().parent / "kernels"


def session_root(tmp_path_factory) -> Path:
    """The test session's own directory: shared by pytest-xdist's workers (-n 2)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session", autouse=True)
def isolated_cache(tmp_path_factory):
    """Artifacts and data files of a test session go to a fresh cache directory, one for
    every worker (a concurrent build of one artifact wins or loses whole: artifacts.py)."""
    old = os.environ.get("CPULAB_CACHE_DIR")
    cache = session_root(tmp_path_factory) / "cache"
    cache.mkdir(exist_ok=True)
    os.environ["CPULAB_CACHE_DIR"] = str(cache)
    yield
    if old is None:
        os.environ.pop("CPULAB_CACHE_DIR", None)
    else:
        os.environ["CPULAB_CACHE_DIR"] = old


@pytest.fixture(scope="session", autouse=True)
def compiled_once(tmp_path_factory):
    """The Python processes the tests start themselves (a run to interrupt, a cluster's
    scheduler and workers) and those cpulab starts read the source tree's modules compiled
    once, into the session's own directory (nothing written beside the source), even where
    PYTHONDONTWRITEBYTECODE is set: each would otherwise compile them all anew (0.1 s a
    process).  The commands run through cpulab() are forked from the zygote instead."""
    with pytest.MonkeyPatch.context() as env:
        env.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
        env.setenv("PYTHONPYCACHEPREFIX", str(session_root(tmp_path_factory) / "pycache"))
        yield


@contextlib.contextmanager
def machine_share(root: Path, alone: bool):
    """Under pytest-xdist (-n 2) two tests run at once, one a CPU.  A test that needs the
    machine to itself (`alone`: marked timing or machine: a measured speed, experiments
    in two lanes, a chase through the last cache) takes it whole: the other worker
    finishes its test and waits.  The rest share it (a reader-writer lock; the turnstile
    lets no new test start while one waits to be alone).  The waiting worker's executor
    still claims its CPU (cpulock.py), so the test alone takes the CPUs under locks of its
    own.  The locks are files in `root`, the workers' shared directory."""
    with open(root / "turnstile.lock", "a") as turnstile, open(root / "machine.lock", "a") as machine:
        fcntl.flock(turnstile, fcntl.LOCK_EX)  # behind a test waiting to be alone
        if alone:
            fcntl.flock(machine, fcntl.LOCK_EX)  # the turnstile held: no test starts meanwhile
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        else:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
            fcntl.flock(machine, fcntl.LOCK_SH)
        with pytest.MonkeyPatch.context() as env:
            if alone:
                env.setenv("CPULAB_LOCK_DIR", str(root / "alone"))
            yield
        fcntl.flock(machine, fcntl.LOCK_UN)


def needs_the_machine(item) -> bool:
    return any(item.get_closest_marker(m) for m in ("timing", "machine"))


def pytest_collection_modifyitems(config, items):
    """The tests marked one_worker run first: under -n 2 they are then within the first
    worker's first share of the tests (xdist's load sends each worker a quarter of its
    half at the start), so their module fixture is set up once.  The tests that take the
    machine alone run after the others (in their own order): scattered among them, each
    first waited for the other worker's test to end (up to 14 s), one CPU idle meanwhile."""
    items.sort(key=lambda item: (needs_the_machine(item), not item.get_closest_marker("one_worker")))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Each test under pytest-xdist shares the machine or has it alone (machine_share)
    from the set-up of its fixtures, module-wide ones too (a module's measured run), to
    their tear-down."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        yield
        return
    root = session_root(item.config._tmp_path_factory)  # the tmp_path_factory fixture's, before any fixture
    with machine_share(root, needs_the_machine(item)):
        yield


@pytest.fixture
def misbehave(monkeypatch):
    """Register the test-only 'misbehave' workload (tests/kernels/misbehave.c)."""
    from cpulab import workloads
    w = workloads.Workload(name="misbehave", kernel=str(TEST_KERNELS / "misbehave.c"), unit="iterations",
                           description="fails on purpose", params={"mode": workloads.Param("ok", "text")})
    table = {**workloads.registry(), "misbehave": w}
    monkeypatch.setattr(workloads, "registry", lambda: table)
    return w


SRC = Path(artifacts.__file__).resolve().parents[2]


def program_source(folder: Path, files: dict[str, str]) -> Path:
    """A program's source tree of these files (one a Makefile) in folder/src; the calling
    test skips where make is missing."""
    if not shutil.which("make"):
        pytest.skip("install make (the test programs build with a Makefile)")
    src = folder / "src"
    src.mkdir()
    for name, text in files.items():
        (src / name).write_text(text)
    return src


ZYGOTE = Zygote({**os.environ, "PYTHONPATH": str(SRC)})


def cpulab(*args: str, db: Path | None = None, timeout: float = 600, env: dict | None = None) -> subprocess.CompletedProcess:
    """The command line as a user meets it: `python -m cpulab.cli ARGS` in its own process
    (forked from one that imported it: zygote.py), with the store at `db` (CPULAB_DB)."""
    env = {**os.environ, "PYTHONPATH": str(SRC), **(env or {}), **({"CPULAB_DB": str(db)} if db else {})}
    with tempfile.TemporaryDirectory(prefix="cpulab-test-") as folder:
        return ZYGOTE.run(list(args), env, timeout, Path(folder))


@pytest.fixture(autouse=True)
def cpu_claim_released():
    """A test that measures in this process claims a CPU for the process's life
    (executor.claimed_cpu), as a cpulab command would for its own: released after the
    test, or the later tests' commands would claim the other CPU, the one a busy loop may
    hold (memlat --colour then kept no sample in five rows of eight)."""
    yield
    from cpulab.measure.execute import executor
    if executor._claim is not None:
        executor._claim.close()
    executor._claimed = executor._claim = executor._default = None


@pytest.fixture(scope="session", autouse=True)
def zygote_ends():
    yield
    ZYGOTE.close()


@pytest.fixture
def cli(tmp_path):
    """cpulab(...) with a store of its own in the test's directory (cli.db)."""
    def run(*args: str, **kw) -> subprocess.CompletedProcess:
        return cpulab(*args, db=run.db, **kw)
    run.db = tmp_path / "cli.sqlite"
    return run


@pytest.fixture
def store(tmp_path) -> Store:
    """An empty store in the test's directory."""
    return Store(tmp_path / "store.sqlite")


class FakeExecutor:
    """An executor that runs nothing: each whole-process job (a program's or a command's
    run under the launcher) 'takes' the seconds `wall(job)` says.  For the round and look
    logic, tested without spawning a process and whatever the machine's load."""
    cpu, waited_s = 0, 0.0

    def __init__(self, wall):
        self.wall, self.jobs = wall, []

    def execute(self, job) -> Outcome:
        self.jobs.append(job)
        wall = self.wall(job)
        report = {"wall_s": wall, "user_s": wall, "sys_s": 0.0, "exit": 0, "signal": 0, "max_rss_kb": 1024,
                  "voluntary_switches": 0, "involuntary_switches": 0}
        return Outcome(Status.OK, data=report, process=Finished(0, "", "", wall, wall, 0.0, 1024, 0, 0))

    def execute_group(self, jobs, orders) -> list[Outcome]:
        """Harness jobs in turns: in each cycle every member in the order given 'takes'
        one sample of wall(job) seconds (a million units of work), as the harness reports it."""
        self.jobs += jobs
        ns, start, clock = [[] for _ in jobs], [[] for _ in jobs], 0.0
        for order in orders:
            for i in order:
                took = self.wall(jobs[i]) * 1e9
                ns[i].append(took)
                start[i].append(clock)
                clock += took
        outs = []
        for job, n, t in zip(jobs, ns, start):
            data = {"status": "ok", "timer": "clock", "work": 1e6, "reps": job.reps or 100, "ns": n, "t_ns": t,
                    "cycles": [None] * len(n), "instructions": [None] * len(n), "user_s": [x / 1e9 for x in n],
                    "sys_s": [0.0] * len(n), "notes": {}}
            outs.append(Outcome(Status.OK, data=data, process=Finished(0, json.dumps(data), "", clock / 1e9,
                                                                       sum(n) / 1e9, 0.0, 1024, 0, 0)))
        return outs


class FakeSite:
    """A site that builds and calibrates nothing: each (workload, variant) 'builds' to an
    artifact named after it with placements (named after it too: nothing is linked), and
    its processes run on `executor`."""

    def __init__(self, executor):
        self.executor = executor

    def identity(self, timer):
        return {"fingerprint": {}, "machine_id": "fake", "conditions": {}, "timing": {"tsc_hz": 2e9}}

    def compiler_version(self, v):
        return "fake"

    def build(self, w, v):
        from cpulab.compile.artifacts import Artifact, Built
        name = f"/fake/{w.name}-{v.name}"
        return Built(Status.PENDING, "", Artifact(name, name, name, 1, "fake", (), placeable=True))

    def place(self, art, i):
        return art.placement_path(i)

    def remove_placements(self):
        pass

    def prepare(self, w, params):
        return dict(params)

    def spare_executor(self):
        return None


def read_back(store: Store, run_id: int, report: Path | None = None) -> None:
    """Every reader of a stored run, in this process: its line in `cpulab runs`, the summary
    with its tables and exports, the run file again and (given a path) the HTML report."""
    import io
    from rich.console import Console
    from cpulab import analysis
    from cpulab.cli.kinds import VIEWS
    from cpulab.cli.results import runs_table
    from cpulab.report import exports, html
    from cpulab.report.terminal import print_summary
    from cpulab.store import exchange
    console = Console(file=io.StringIO(), width=140)
    console.print(runs_table("runs", [r for r in store.runs() if r.id == run_id]))
    summary = analysis.summarise(store, run_id)
    print_summary(summary, console, VIEWS)
    for fmt in ("json", "csv", "markdown"):
        exports.render(summary, fmt)
    json.dumps(summary.to_dict(), allow_nan=False)
    exchange.DocumentRecord.model_validate(json.loads(json.dumps(exchange.export_run(store, run_id))))
    if report:
        html.write(summary, report, VIEWS)


def run_file(**run) -> dict:
    """A cpulab run file (version 2) of one result with one sample, with `run`'s fields over
    the defaults: the smallest file `cpulab import` takes."""
    sample = {"process": 0, "idx": 0, "ns": 1e6, "cycles": 2e6, "instructions": None, "work": 4096.0, "reps": 1,
              "user_s": 0.001, "sys_s": 0.0, "timer": "tsc", "tsc_hz": 2e9, "core_per_tsc": 1.0, "layout_pad": 0}
    result = {"experiment": "e", "workload": "sha256", "variant": "O2", "params": {"size": "4096"}, "unit": "bytes",
              "status": "ok", "error": "", "artifact_hash": None, "same_as": "", "notes": {}, "samples": [sample]}
    doc = {"parent": None, "machine": "", "machine_id": "ab12", "fingerprint": {}, "started": 1.0e9,
           "finished": None, "status": "done", "plan": {"experiments": []}, "conditions": {}, "timing": {},
           "argv": [], "variants": [{"name": "O2"}], "artifacts": [], "results": [result], "analyses": []}
    return {"format": "cpulab-run", "version": 2, "exported": 1.0e9, "runs": [{**doc, **run}]}


# Every table a run writes rows into.
STORE_TABLES = ("runs", "machines", "variants", "artifacts", "results", "samples", "analyses")


def row_counts(db: Path) -> dict[str, int]:
    """Rows in each of a store's tables ({} where there is no store): what a refused import
    or command must leave as it was."""
    if not Path(db).exists():
        return {}
    with contextlib.closing(sqlite3.connect(db)) as con:
        return {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in STORE_TABLES}
