"""The runner: failures are kept per variant, identical code is found, Ctrl-C, SIGTERM and
SIGHUP keep data, a killed run reads as interrupted and --resume completes it."""
import dataclasses
import json
import math
import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import cpulab
from cpulab.cli.kinds import VIEWS
from cpulab import analysis
from cpulab.plan import plan as plans
from cpulab.spec.policy import DecisionPolicy
from cpulab.spec.settings import Settings
from cpulab.measure.schedule import runner
from cpulab.measure.schedule import targets
from cpulab.measure.execute.executor import LocalExecutor
from cpulab.measure.schedule.rounds import QuietProgress
from cpulab.measure.schedule.kernel_rounds import steady_reps
from cpulab.store.db import Store
from cpulab.machine import toolchains

FAST = dict(processes=2, samples=2, min_sample_time=0.001, warmup=0.0, budget=0.0)  # budget 0: a fixed count


def make_plan(workloads, variants, params=None, custom=None, **kw):
    exp = plans.Experiment("t", workloads, variants, variants[0], params=params or {})
    p = plans.Plan("test", [exp], Settings(**{**FAST, **kw}), custom_variants=custom or {})
    return plans.validate(p)


def test_every_failure_is_recorded_and_the_rest_goes_on(tmp_path, misbehave):
    modes = ["ok", "crash", "hang", "wrong", "nosetup", "skip", "garbage"]
    p = make_plan(["misbehave"], ["O2"], {"misbehave": {"mode": modes}}, timeout=2.0)
    store = Store(tmp_path / "db.sqlite")
    run_id = runner.run_plan(p.given(seed=1), store)
    status = {r.params["mode"]: (r.status, r.error) for r in store.results(run_id)}
    assert status["ok"][0] == "ok"
    assert status["crash"] == ("crash", "killed by SIGSEGV")
    assert status["hang"][0] == "timeout"
    assert status["wrong"][0] == "verify-failed" and "42" in status["wrong"][1]
    assert status["nosetup"][0] == "setup-failed"
    assert status["skip"][0] == "skipped"
    assert status["garbage"][0] == "error"
    ok_id = next(r.id for r in store.results(run_id) if r.params["mode"] == "ok")
    assert len(store.samples(ok_id)) == FAST["processes"] * FAST["samples"]
    assert store.run(run_id).status == "done"


def test_build_failure_and_missing_toolchain_are_per_variant(tmp_path):
    from cpulab.plan.toolchain import Variant
    custom = {"broken": Variant("broken", cflags=("-O2", "-fno-such-option")),
              "nocc": Variant("nocc", compiler="no-such-cc", package="no-such-package")}
    p = make_plan(["sha256"], ["O2", "broken", "nocc"], {"sha256": {"size": ["256"]}}, custom)
    store = Store(tmp_path / "db.sqlite")
    run_id = runner.run_plan(p.given(seed=2), store)
    res = {r.variant: r for r in store.results(run_id)}
    assert res["O2"].status == "ok"
    assert res["broken"].status == "build-failed" and "no-such-option" in res["broken"].error
    assert res["nocc"].status == "skipped" and "install no-such-package" in res["nocc"].error


def test_identical_code_is_reported_not_measured(tmp_path):
    from cpulab.plan.toolchain import Variant
    custom = {"O2-twin": Variant("O2-twin", cflags=("-O2", "-DUNUSED_MACRO=1"))}
    p = make_plan(["sha256"], ["O2", "O2-twin", "O0"], {"sha256": {"size": ["256"]}}, custom)
    store = Store(tmp_path / "db.sqlite")
    run_id = runner.run_plan(p.given(seed=3), store)
    res = {r.variant: r for r in store.results(run_id)}
    assert res["O2-twin"].status == "identical" and res["O2-twin"].same_as == "O2"
    assert store.samples(res["O2-twin"].id) == []
    summary = analysis.summarise(store, run_id)
    verdicts = {c.variant: c.verdict for c in summary.comparisons}
    assert verdicts["O2-twin"] == "identical code"
    assert verdicts["O0"] != "identical code"  # O0 emits other code


def test_artifacts_are_cached_by_content(tmp_path):
    from cpulab.compile import artifacts
    from cpulab.plan import toolchain
    from cpulab import workloads
    w = workloads.get("sha256")
    a = artifacts.build_artifact(w, toolchain.BUILTIN["O2"], cache_dir=tmp_path)
    mtime = os.path.getmtime(a.path)
    b = artifacts.build_artifact(w, toolchain.BUILTIN["O2"], cache_dir=tmp_path)
    assert a == b and os.path.getmtime(b.path) == mtime
    c = artifacts.build_artifact(w, toolchain.BUILTIN["O1"], cache_dir=tmp_path)
    assert c.hash != a.hash and c.path != a.path
    assert any("-O1" in cmd for cmd in c.commands) and "gcc" in c.compiler_version.lower()


def test_builds_share_the_objects_they_compile_alike(tmp_path, monkeypatch):
    """A link variant reuses the kernel.o of a build compiled alike, and every build of one
    compiler reuses its harness.o: O2 and static built at once compile two objects (each
    waits for the other's), O1 adds only its kernel.o, a kernel in another folder only its
    own, and a cached object has the bytes its compile writes."""
    from concurrent.futures import ThreadPoolExecutor
    from cpulab.compile import artifacts
    from cpulab.plan import toolchain
    from cpulab import workloads
    compiles, run_step = [], artifacts.run_step
    monkeypatch.setattr(artifacts, "run_step", lambda cmd, cwd=None: run_step(cmd, cwd) or compiles.append(cmd[-1]))
    w = workloads.get("sha256")
    with ThreadPoolExecutor(2) as pool:
        built = list(pool.map(lambda v: artifacts.build_artifact(w, toolchain.BUILTIN[v], cache_dir=tmp_path),
                              ("O2", "static")))
    assert len(list((tmp_path / "objects").glob("*.o"))) == 2 and built[0].code_hash != built[1].code_hash
    assert sorted(Path(o).name for o in compiles if o.endswith(".o")) == ["harness.o", "kernel.o"]
    o1 = artifacts.build_artifact(w, toolchain.BUILTIN["O1"], cache_dir=tmp_path)
    artifacts.build_executable(Path(__file__).parent / "kernels" / "faults.c", toolchain.BUILTIN["O2"],
                               cache_dir=tmp_path, placeable=True)
    objects = {f.read_bytes() for f in (tmp_path / "objects").glob("*.o")}
    assert len(objects) == 4 and sum(o.endswith("harness.o") for o in compiles) == 1
    compile_kernel = list(o1.commands[1])
    compile_kernel[compile_kernel.index("-o") + 1] = str(tmp_path / "again.o")
    subprocess.run(compile_kernel, check=True)
    assert (tmp_path / "again.o").read_bytes() in objects


def test_an_experiments_builds_hold_the_choices_its_points_run(tmp_path):
    """rc5-72's core is a compiled choice: an experiment that runs the portable core alone
    measures a build without the vector cores, one that runs both the whole build, and
    two experiments that run the same choices share one build."""
    exps = [plans.Experiment(name, ["rc5-72"], ["O2"], "O2", params={"rc5-72": {"core": cores, "keys": ["64"]}})
            for name, cores in (("portable", ["portable"]), ("both", ["portable", "simd"]), ("again", ["portable"]))]
    p = plans.validate(plans.Plan("held", exps, Settings(**{**FAST, "processes": 1})))
    store = Store(tmp_path / "db.sqlite")
    results = store.results(runner.run_plan(p.given(seed=5), store))
    assert {r.status for r in results} == {"ok"}
    built = {(r.experiment, r.params["core"]): store.artifact(r.artifact_hash) for r in results}
    portable, both = built[("portable", "portable")], built[("both", "portable")]
    assert built[("again", "portable")].hash == portable.hash != both.hash == built[("both", "simd")].hash
    assert any("-DCPULAB_CORE_PORTABLE" in cmd for cmd in portable.commands)
    assert not any("-DCPULAB_CORE" in arg for cmd in both.commands for arg in cmd)
    # resumed (each result owed a second process), every result finds the build it ran
    more = plans.validate(plans.Plan("held", exps, Settings(**{**FAST, "processes": 2})))
    resumed = targets.resumed_targets(more, store, results[0].run_id, QuietProgress())
    assert {t.result_id: t.artifact.hash for t in resumed} == {r.id: r.artifact_hash for r in results}


def test_identical_builds_are_same(tmp_path):
    """An A/A test of the whole method: one artifact measured as 20 pairs of 'variants'.
    The raw p (before Holm and before the 1% effect floor) must hold alpha: more than 4
    of 20 below 0.05 has probability 0.003 when it does (Binomial(20, 0.05)), so a broken
    test statistic fails here even where the floor would hide it."""
    from cpulab.plan.toolchain import Variant
    custom = {"twin": Variant("twin", cflags=("-O2",))}
    exps = [plans.Experiment(f"aa{i}", ["sha256"], ["O2", "twin"], "O2", params={"sha256": {"size": ["1024"]}})
            for i in range(20)]
    p = plans.validate(plans.Plan("aa", exps, Settings(processes=6, samples=3, min_sample_time=0.002, warmup=0.0, budget=0.0, measure_identical=True), custom_variants=custom))
    store = Store(tmp_path / "db.sqlite")
    run_id = runner.run_plan(p.given(seed=4), store)
    comps = analysis.summarise(store, run_id).comparisons
    assert len(comps) == 20
    # `inconclusive` (too many processes left out as preempted on a loaded machine) is
    # no claim of a difference; faster/slower would be a false one.
    raw = sum(c.p_raw < 0.05 for c in comps)
    assert raw <= 4, [(round(c.ratio, 4), c.p_raw, c.verdict) for c in comps]
    assert sum(c.verdict in ("faster", "slower") for c in comps) <= raw


class CountingProgress(QuietProgress):
    """Each phase's [name, total with what grew, steps advanced], and the notes, from any thread."""
    def __init__(self):
        self.phases, self.notes, self.lock = [], [], threading.Lock()

    def phase(self, name, total):
        self.phases.append([name, total, 0])

    def grow(self, more):
        with self.lock:
            self.phases[-1][1] += more

    def advance(self, label):
        with self.lock:
            self.phases[-1][2] += 1

    def note(self, text):
        self.notes.append(text)


def test_budget_mode_adds_rounds_only_to_undecided_points(tmp_path):
    """On scripted timings (a fake site: no process, whatever the machine's load): O0
    takes twice O2's time and is decided at the first look; a twin of O2, jittering by
    30% at a precision of 0.001%, cannot be called `same` and has no difference to find,
    so its point gets looks at 2x, 4x, 8x, ... the first while its budget lasts, and the
    progress says which comparison is undecided."""
    import random
    from conftest import FakeExecutor, FakeSite
    from cpulab.plan.toolchain import Variant
    rng = random.Random(5)
    slow = {"O0": 2.0, "O2": 1.0, "twin": 1.0}
    jitter = {"O0": 0.002, "O2": 0.3, "twin": 0.3}

    def wall(job):
        v = job.artifact_path.rsplit("-", 1)[1].split(".")[0]  # /fake/sha256-O2.layout1: placement 1 of O2
        return 0.001 * slow[v] * (1 + jitter[v] * rng.uniform(-1, 1))

    custom = {"twin": Variant("twin", cflags=("-O2",))}
    exps = [plans.Experiment("far", ["sha256"], ["O2", "O0"], "O2", params={"sha256": {"size": ["256"]}}),
            plans.Experiment("aa", ["sha256"], ["O2", "twin"], "O2", params={"sha256": {"size": ["256"]}})]
    p = plans.validate(plans.Plan("b", exps, Settings(processes=8, samples=3, budget=1.0, precision=0.00001, measure_identical=True), custom_variants=custom))
    store = Store(tmp_path / "db.sqlite")
    progress = CountingProgress()
    run_id = runner.run_plan(p.given(seed=5), store, site=FakeSite(FakeExecutor(wall)), progress=progress)
    rounds = {(r.experiment, r.variant): len({s.process for s in store.samples(r.id)})
              for r in store.results(run_id)}
    assert rounds[("far", "O2")] == rounds[("far", "O0")] == 8
    # looks at 8, 16, 32, 64, ... until the second of budget (about 7 ms a round) is spent
    assert 64 < rounds[("aa", "O2")] == rounds[("aa", "twin")] < 256
    # Each round ran a placement of its own: the signed-rank test counts rounds as
    # independent, which a placement run again in a later round is not.
    for r in store.results(run_id):
        ran = {s.process: s.placement for s in store.samples(r.id)}
        assert len(set(ran.values())) == len(ran), (r.variant, sorted(ran.values()))
    assert any("twin/O2" in n for n in progress.notes)
    comps = {c.experiment: c for c in analysis.summarise(store, run_id).comparisons}
    assert comps["far"].verdict == "slower" and comps["far"].method == "turns"
    aa = comps["aa"]  # tested at its look's share of alpha, the look its rounds reached
    k = DecisionPolicy.look(aa.rounds, 8)
    assert aa.rounds == rounds[("aa", "O2")] and aa.alpha == pytest.approx(0.05 / (k * (k + 1)))


def test_budget_is_not_overspent(tmp_path):
    """With a budget of 0.01 s the first look's rounds run, then nothing more."""
    from cpulab.plan.toolchain import Variant
    custom = {"twin": Variant("twin", cflags=("-O2",))}
    exps = [plans.Experiment("aa", ["sha256"], ["O2", "twin"], "O2", params={"sha256": {"size": ["256"]}})]
    p = plans.validate(plans.Plan("b", exps, Settings(processes=4, samples=2, min_sample_time=0.0005, warmup=0.0, budget=0.01, precision=0.00001, measure_identical=True), custom_variants=custom))
    store = Store(tmp_path / "db.sqlite")
    run_id = runner.run_plan(p.given(seed=6), store)
    assert all(len({s.process for s in store.samples(r.id)}) == 4 for r in store.results(run_id))


def test_the_placements_linked_ahead_are_the_ones_the_rounds_run(tmp_path):
    """The first look's placements, linked ahead while the builds end, are drawn from the
    run's seed as the rounds' are: they are the ones the rounds run (they were drawn from
    seed 0, the seeds' 120 links of them each made for nothing, and linked again)."""
    from conftest import FakeExecutor, FakeSite
    linked = []

    class Linking(FakeSite):
        def place(self, art, i):
            linked.append(art.placement_path(i))
            return art.placement_path(i)

    exps = [plans.Experiment("e", ["sha256"], ["O2", "O3"], "O2", params={"sha256": {"size": ["256", "512"]}},
                             share_machine=True)]
    p = plans.validate(plans.Plan("s", exps, Settings(processes=3, samples=2, budget=0.0)))
    ex = FakeExecutor(lambda job: 0.001)
    runner.run_plan(p.given(seed=8), Store(tmp_path / "db.sqlite"), site=Linking(ex))
    ran = [j.artifact_path for j in ex.jobs if ".layout" in j.artifact_path]
    assert len(ran) == len(set(ran)) == 4 * 3  # two points of two builds, three rounds each
    ahead = linked[:len(ran)]  # then each round asks for its own
    assert sorted(ahead) == sorted(ran)


def as_from_a_shell():
    """A child's SIGINT as a shell's foreground job has it: handled (a pytest-xdist worker
    may be ignoring it, and an ignored SIGINT is inherited: Python then keeps ignoring it,
    as a background job of a script should)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_keeps_what_was_measured(tmp_path):
    db = tmp_path / "db.sqlite"
    env = {**os.environ, "CPULAB_DB": str(db)}
    proc = subprocess.Popen([sys.executable, "-m", "cpulab.cli", "run", "-w", "sha256", "-v", "O2", "-v", "O1",
                             "-p", "size=1024", "--runs", "1000", "--min-sample-time", "0.001"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=as_from_a_shell)
    deadline = time.time() + 90
    n = 0
    while time.time() < deadline and n < 6:
        time.sleep(0.5)
        try:
            n = sqlite3.connect(db).execute("SELECT count(DISTINCT process) FROM samples").fetchone()[0]
        except sqlite3.Error:
            n = 0
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=60)
    finally:  # a run that outlives its test would hold a CPU and spoil the tests after it
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    con = sqlite3.connect(db)
    assert con.execute("SELECT status FROM runs").fetchone()[0] == "interrupted"
    assert con.execute("SELECT count(*) FROM samples").fetchone()[0] >= 6
    assert "keeps what was measured" in err


def test_missing_library_names_the_package():
    from cpulab.plan import toolchain
    why = toolchains.library_reason(toolchain.BUILTIN["O2"], "no_such_header_here.h", ("-lnosuchlib",), "libnosuch-dev")
    assert "install libnosuch-dev" in why and "no_such_header_here.h" in why
    assert toolchains.library_reason(toolchain.BUILTIN["O2"], "stdio.h", ("-lm",), "libc6-dev") == ""


def test_variants_differing_only_in_environment_are_both_measured(tmp_path):
    from cpulab.compile import artifacts
    from cpulab.plan.toolchain import Variant
    env = (("CPULAB_TEST_SETTING", "1"),)
    custom = {"O2-env": Variant("O2-env", env=env), "O2-env-twin": Variant("O2-env-twin", env=env)}
    p = make_plan(["sha256"], ["O2", "O2-env", "O2-env-twin"], {"sha256": {"size": ["256"]}}, custom)
    store = Store(tmp_path / "db.sqlite")
    run_id = runner.run_plan(p.given(seed=5), store)
    res = {r.variant: r for r in store.results(run_id)}
    assert res["O2-env"].status == "ok" and len(store.samples(res["O2-env"].id)) == FAST["processes"] * FAST["samples"]
    assert res["O2-env-twin"].status == "identical" and res["O2-env-twin"].same_as == "O2-env"
    # ABI flags change what runs as well, even where the bytes (the code hash) are equal.
    art = artifacts.Artifact("x", "h", "same-bytes", 1, "gcc", ())
    assert targets.execution_key(Variant("a"), art) != targets.execution_key(Variant("b", abi_flags=("-m32",)), art)
    assert targets.execution_key(Variant("a"), art) == targets.execution_key(Variant("b", cflags=("-O3",)), art)


def start_cli_run(db, *args):
    return subprocess.Popen([sys.executable, "-m", "cpulab.cli", "run", "-w", "sha256", *args],
                            env={**os.environ, "CPULAB_DB": str(db)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def processes_stored(db) -> int:
    try:
        return sqlite3.connect(db).execute(
            "SELECT count(*) FROM (SELECT DISTINCT result_id, process FROM samples)").fetchone()[0]
    except sqlite3.Error:
        return 0


def measured_children(parent: int) -> list[int]:
    """Pids of the artifacts `parent` runs now (under -n 2 the other worker's run from the
    same artifact cache too)."""
    cache = os.environ["CPULAB_CACHE_DIR"]
    pids = []
    for d in os.listdir("/proc"):
        try:
            if (d.isdigit() and open(f"/proc/{d}/cmdline", "rb").read().startswith(cache.encode())
                    and int(proc_stat(int(d))[1]) == parent):
                pids.append(int(d))
        except (OSError, ValueError, IndexError):
            pass
    return pids


def proc_stat(pid: int) -> list[str]:
    """The fields of /proc/PID/stat after the command's name: state, parent, ..."""
    return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()


def process_state(pid: int) -> str:
    """A process's state letter (R, S, Z ...), or "" once it is gone."""
    try:
        return proc_stat(pid)[0]
    except (OSError, IndexError):
        return ""


def killed(pid: int) -> bool:
    """Whether a process is gone, a zombie, exiting (PF_EXITING) or has a SIGKILL pending:
    one killed a moment ago can still read R while it waits for its CPU to die on."""
    try:
        stat = proc_stat(pid)
        pending = [int(line.split()[1], 16) for line in open(f"/proc/{pid}/status")
                   if line.startswith(("SigPnd:", "ShdPnd:"))]
    except (OSError, IndexError):
        return True
    return stat[0] in "ZX" or int(stat[6]) & 0x4 != 0 or any(mask & 1 << (signal.SIGKILL - 1) for mask in pending)


def wait_until(cond, timeout=120.0):
    deadline = time.time() + timeout
    while not cond():
        assert time.time() < deadline, "timed out"
        time.sleep(0.05)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_stop_the_run_like_ctrl_c(tmp_path, sig):
    db = tmp_path / "db.sqlite"
    # Processes of about half a second each, so that one is being measured when the signal comes.
    proc = start_cli_run(db, "-v", "O2", "-v", "O1", "-p", "size=1024", "--runs", "50", "--samples", "5",
                         "--min-sample-time", "0.1")
    wait_until(lambda: processes_stored(db) >= 2 and measured_children(proc.pid))
    measured = measured_children(proc.pid)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, err
    # the processes being measured were killed with the run, not orphaned
    assert not {pid: process_state(pid) for pid in measured if not killed(pid)}
    con = sqlite3.connect(db)
    assert con.execute("SELECT status FROM runs").fetchone()[0] == "interrupted"
    assert processes_stored(db) >= 2
    assert f"interrupted ({signal.Signals(sig).name})" in err and "cpulab run --resume 1" in err


def test_a_run_stopped_in_its_builds_is_resumed_whole(tmp_path):
    """Ctrl-C while the builds compile, before any result is recorded: --resume builds
    and measures the whole plan (it once found nothing owed and said done)."""
    p = make_plan(["sha256"], ["O2", "O1"], {"sha256": {"size": ["256", "1024"]}}).given(seed=3)
    store = Store(tmp_path / "db.sqlite")

    class StoppedInBuilds(runner.LocalSite):
        def build(self, w, v):
            if v.name == "O1":
                raise KeyboardInterrupt
            return super().build(w, v)
    with pytest.raises(KeyboardInterrupt):
        runner.run_plan(p, store, site=StoppedInBuilds(LocalExecutor(seed=3)))
    run_id = store.latest_run()
    assert store.run(run_id).status == "interrupted" and store.results(run_id) == []
    assert runner.run_plan(p, store, resume=run_id) == run_id
    results = store.results(run_id)
    assert sorted((r.variant, r.params["size"], r.status) for r in results) == \
        [(v, n, "ok") for v in ("O1", "O2") for n in ("1024", "256")]
    assert all(len(store.samples(r.id)) == FAST["processes"] * FAST["samples"] for r in results)
    assert store.run(run_id).status == "done"


def test_killed_run_reads_interrupted_and_resume_completes_it(tmp_path):
    db = tmp_path / "db.sqlite"
    runs, samples = 4, 2
    proc = start_cli_run(db, "-v", "O2", "-v", "O1", "-p", "size=256,1024,4096", "--runs", str(runs),
                         "--samples", str(samples), "--min-sample-time", "0.02")
    wait_until(lambda: processes_stored(db) >= 2)
    proc.kill()  # SIGKILL: no clean-up at all, the run row still says 'running'
    proc.communicate(timeout=60)
    con = sqlite3.connect(db)
    assert con.execute("SELECT status FROM runs").fetchone()[0] == "running"
    before = set(con.execute("SELECT result_id, process, idx, ns FROM samples"))
    assert 2 * samples <= len(before) < 6 * runs * samples

    listed = json.loads(cli_json(db, "runs"))
    assert [r["status"] for r in listed] == ["interrupted"]
    doc = json.loads(cli_json(db, "compare"))
    assert doc["status"] == "interrupted"
    assert "run 1 stopped before its end (interrupted)" in cpulab("compare", db=db, timeout=120).stdout
    # Processes measured: those with a clean sample (processes) and those whose every
    # sample was left out as disturbed (excluded_processes; a loaded machine has some).
    measured = lambda r: r["processes"] + r["excluded_processes"]
    for r in doc["results"]:  # measured results say ok, never-measured ones say pending
        assert r["status"] == ("ok" if measured(r) else "pending"), r
    assert sum(measured(r) for r in doc["results"]) < 6 * runs

    p = cpulab("run", "--resume", "1", "--json", db=db, timeout=300)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["run_id"] == 1 and doc["status"] == "done" and len(doc["results"]) == 6
    for r in doc["results"]:
        assert r["status"] == "ok" and measured(r) == runs and len(r["samples"]) == runs * samples
    after = set(con.execute("SELECT result_id, process, idx, ns FROM samples"))
    assert before <= after and len(after) == 6 * runs * samples
    assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 1
    again = cpulab("run", "--resume", "1", db=db, timeout=60)
    assert again.returncode == 2 and "the run is done" in again.stderr


def cli_json(db, *args) -> str:
    p = cpulab(*args, "--json", db=db, timeout=120)
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_a_probe_table_that_fails_is_recorded_and_the_run_is_kept(tmp_path, monkeypatch):
    """A crashing probe fails alone: its table says why, the run ends done with its results."""
    from cpulab.measure import probes
    from cpulab.report.analysis_views import analysis_tables

    def crash(**_):
        raise probes.ProbeError("crash: killed by SIGKILL")
    probe = probes.get("seed004-table3")
    monkeypatch.setitem(probes.registry(), "seed004-table3", dataclasses.replace(probe, measure=crash))
    p = make_plan(["sha256"], ["O2"], {"sha256": {"size": ["1024"]}})
    p.probe_tables = ["seed004-table3"]
    store = Store(tmp_path / "db.sqlite")
    run_id = runner.run_plan(p, store)
    assert store.run(run_id).status == "done" and store.results(run_id)[0].status == "ok"
    (a,) = store.analyses(run_id, probe.kind)
    assert a.data == {"status": "failed", "error": "crash: killed by SIGKILL"}
    assert "crash: killed by SIGKILL" in analysis_tables(a.kind, a.data, VIEWS)[0].title


class RecordingExecutor(LocalExecutor):
    """A local executor that keeps every harness job it ran, in order."""

    def __init__(self):
        super().__init__()
        self.jobs = []

    def execute(self, job):
        self.jobs.append(job)
        return super().execute(job)

    def execute_group(self, jobs, orders):
        self.jobs += jobs
        return super().execute_group(jobs, orders)


def test_later_processes_take_the_first_ones_reps_and_passed_test(tmp_path):
    """A target's first process calibrates and runs the known-answer test; every later
    one gets the same repetitions, the first one's sized by its fastest kept sample
    (steady_reps), and skips the test it passed."""
    p = make_plan(["sha256"], ["O2", "O3"], {"sha256": {"size": ["256"]}}, processes=3)
    ex = RecordingExecutor()
    run_id = runner.run_plan(p.given(seed=3), Store(tmp_path / "db.sqlite"), executor=ex)
    store = Store(tmp_path / "db.sqlite")
    for r in store.results(run_id):
        home = os.path.dirname(store.artifact(r.artifact_hash).path)
        jobs = [j for j in ex.jobs if os.path.dirname(j.artifact_path) == home and not j.calibrate_only]
        assert len(jobs) == 3
        assert jobs[0].reps is None and not jobs[0].verified
        first = [x for x in store.samples(r.id) if x.process == 0]
        reps = steady_reps(first[0].reps, [x.ns for x in first if not x.excluded], p.settings.min_sample_time)
        assert all(j.reps == reps and j.verified for j in jobs[1:])


def test_later_processes_reps_size_the_fastest_kept_sample_at_the_minimum_and_a_tenth():
    """The first process's count scaled to its fastest kept sample: unchanged where that
    sample lasted min_sample_time and a tenth, halved where it lasted twice that (the
    calibration saw a warmer kernel than the samples), doubled where half; at least 1;
    the count as calibrated when no sample was kept."""
    m = 0.0025
    assert steady_reps(400, [1.1 * m * 1e9, 2e7], m) == 400
    assert steady_reps(400, [2.2 * m * 1e9 + 1, 3e7], m) == 200
    assert steady_reps(400, [0.55 * m * 1e9 - 1], m) == 801  # rounded up
    assert steady_reps(1, [0.3e9], m) == 1
    assert steady_reps(400, [], m) == 400


@pytest.mark.machine  # two lanes need both CPUs idle
def test_experiments_that_share_the_machine_run_one_per_cpu_at_once(tmp_path, monkeypatch):
    """Two share_machine experiments run in two lanes at once (their samples overlap in
    time), each complete, and the plan's probe table in a lane after them; the run
    records which ones shared; the third has the machine to itself after them.  A shared
    experiment's instructions are counted on one CPU, in its lane or beside the third's
    rounds; the third's after its rounds, on one CPU too (beside the probes that need the
    machine, which there are none of here).  Each experiment is explained once, in the
    lanes: nothing is left to explain after them."""
    from cpulab.measure import instructions, probes
    from cpulab.measure.schedule.afterwards import Afterwards
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one CPU: nothing to share")
    probe = probes.get("seed004-table3")
    monkeypatch.setitem(probes.registry(), "seed004-table3", dataclasses.replace(
        probe, measure=lambda timer, executor: {"cpu": executor.cpu, "at": time.monotonic_ns()}))
    counted = []  # per count: when, and the CPUs it could run on

    def count(*args):
        counted.append((time.monotonic_ns(), os.sched_getaffinity(0)))
        return instructions.Count(1.0, [])
    monkeypatch.setattr(instructions, "count", count)
    explained, analysed = [], []
    explanations, analyse = Afterwards.explanations, Afterwards.analyse
    monkeypatch.setattr(Afterwards, "explanations", lambda self, exps, *a, **k: (
        explained.append(exps), explanations(self, exps, *a, **k))[1])
    monkeypatch.setattr(Afterwards, "analyse", lambda self, exps, *a, **k: (
        analysed.append(exps), analyse(self, exps, *a, **k))[1])
    exps = [plans.Experiment(name, ["sha256"], ["O2", "O3"], "O2", params={"sha256": {"size": ["256"]}},
                             share_machine=name != "alone", instructions=True) for name in ("a", "b", "alone")]
    p = plans.validate(plans.Plan("lanes", exps, Settings(**{**FAST, "processes": 4, "samples": 20}), probe_tables=["seed004-table3"]))
    store = Store(tmp_path / "db.sqlite")
    progress = CountingProgress()
    run_id = runner.run_plan(p.given(seed=4), store, progress=progress)
    assert store.run(run_id).conditions["shared_machine"] == ["a", "b"]
    # the lanes' bar: as many steps as it announced, among them its lanes' rounds (4 of 2
    # variants each) and the table (their counts may trail into the next phase)
    ((_, total, advanced),) = [ph for ph in progress.phases if ph[0] == "measure (two CPUs)"]
    assert total == advanced >= 2 * 4 * 2 + 1
    assert all(advanced <= total for _, total, advanced in progress.phases), progress.phases
    (table,) = store.analyses(run_id, probe.kind)
    span = {}
    for r in store.results(run_id):
        assert r.status == "ok"
        starts = [s.start_ns for s in store.samples(r.id)]
        assert len(starts) == 4 * 20
        lo, hi = span.get(r.experiment, (math.inf, -math.inf))
        span[r.experiment] = (min(lo, *starts), max(hi, *starts))
    assert span["a"][0] < span["b"][1] and span["b"][0] < span["a"][1]  # a and b overlap
    assert span["alone"][0] > max(span["a"][1], span["b"][1])
    assert table.data["at"] < span["alone"][0]  # in a lane, before the experiment that runs alone
    assert len(counted) == 6 and all(len(cpus) == 1 for _, cpus in counted)
    assert sum(at > span["alone"][1] for at, _ in counted) >= 2  # the third's, at least, after its rounds
    assert sorted(sorted(e) for e in explained) == [[], ["a"], ["alone"], ["b"]] and analysed == [set()]


class _Lane:
    """An executor stand-in for in_lanes: a name, a CPU this test may use, nothing to kill."""
    def __init__(self, name):
        self.name, self.cpu = name, min(os.sched_getaffinity(0))

    def kill_all(self):
        pass


def test_lanes_take_the_longest_first_and_what_an_item_adds():
    """The queue gives the item of the most seconds (inf before any estimate; of equal
    ones, the first queued); work an item returns joins it, and a lane with nothing to
    take waits for it while another lane's item runs."""
    from cpulab.measure.schedule.lanes import in_lanes
    done = []

    def item(name, more=(), pause=0.0):
        def run(executor, store, rng, stop):
            time.sleep(pause)
            done.append((name, executor.name))
            return list(more)
        return run
    in_lanes([(math.inf, item("a", [(5.0, item("a-rest"))])), (math.inf, item("b", [(10.0, item("b-rest"))])),
              (0.0, item("table"))], [_Lane("one")], ":memory:", random.Random(1))
    assert [name for name, _ in done] == ["a", "b", "b-rest", "a-rest", "table"]
    done.clear()
    # two lanes, one item that adds two when it ends: the idle lane waits, then takes one
    in_lanes([(math.inf, item("first", [(2.0, item("x", pause=0.3)), (1.0, item("y", pause=0.3))], pause=0.2))],
             [_Lane("one"), _Lane("two")], ":memory:", random.Random(1))
    assert sorted(name for name, _ in done) == ["first", "x", "y"]
    assert {lane for name, lane in done if name in "xy"} == {"one", "two"}


def test_a_first_lane_that_hands_over_leaves_the_trailing_work_to_the_others_beside_the_block():
    """With hand_over the first lane never takes trailing work (counts, explanations): the
    block runs once no other work is queued or under way, beside the other lane doing
    what trails, and the first takes its share of what is left of that once the block
    ends; the end waits for all of it; Ctrl-C in the block stops it at once."""
    from cpulab.measure.schedule.lanes import TRAILS, lanes
    done, started, block = [], [], {"over": False}

    def item(name, more=(), seconds=0.0):
        def run(executor, store, rng, stop):
            started.append((name, executor.name, block["over"]))
            stop.wait(seconds)
            done.append((name, executor.name, stop.is_set()))
            return list(more)
        return run
    work = [(math.inf, item("rounds", [(TRAILS, item("explain", seconds=0.2))] * 6, seconds=0.3)),
            (TRAILS, item("count", seconds=0.1))]
    with lanes(work, [_Lane("one"), _Lane("two")], ":memory:", random.Random(1), hand_over=True):
        in_block = [name for name, _, _ in done]
        time.sleep(0.1)
        block["over"] = True
    assert "rounds" in in_block and "explain" not in in_block
    # the first lane: its rounds (if it took them) before the block, trailing work only after it
    assert {(name, over) for name, lane, over in started if lane == "one"} - {("rounds", False)} == {("explain", True)}
    assert sorted(name for name, _, _ in done) == ["count"] + ["explain"] * 6 + ["rounds"]
    done.clear()
    with pytest.raises(KeyboardInterrupt):
        with lanes([(TRAILS, item("long", seconds=30)), (TRAILS, item("never"))], [_Lane("one"), _Lane("two")],
                   ":memory:", random.Random(1), hand_over=True):
            time.sleep(0.1)
            raise KeyboardInterrupt
    assert done == [("long", "two", True)]


def test_work_the_block_hands_on_is_done_beside_it_by_the_lane_that_had_none_left():
    """Work the block adds (trail: the alone experiments' explanations once their rounds
    end) is taken by the other lane beside the block, though it had finished all it had."""
    from cpulab.measure.schedule.lanes import TRAILS, lanes
    done = []

    def item(name):
        def run(executor, store, rng, stop):
            done.append((name, executor.name))
        return run
    with lanes([(math.inf, item("rounds"))], [_Lane("one"), _Lane("two")], ":memory:", random.Random(1),
               hand_over=True) as trail:
        time.sleep(0.2)  # the other lane has nothing left to do
        trail([(TRAILS, item("explain"))])
        deadline = time.monotonic() + 10
        while ("explain", "two") not in done and time.monotonic() < deadline:
            time.sleep(0.01)
        in_block = list(done)
    assert ("explain", "two") in in_block and sorted(name for name, _ in done) == ["explain", "rounds"]
    # Ctrl-C in the block while that lane waits for more: it stops at once
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        with lanes([(math.inf, item("rounds"))], [_Lane("one"), _Lane("two")], ":memory:", random.Random(1),
                   hand_over=True):
            time.sleep(0.2)
            raise KeyboardInterrupt
    assert time.monotonic() - started < 5


def test_share_machine_must_be_true_or_false(tmp_path):
    f = tmp_path / "p.toml"
    f.write_text('[[experiment]]\nname = "x"\nworkloads = ["sha256"]\nvariants = ["O2"]\nshare_machine = "yes"\n')
    with pytest.raises(plans.PlanError, match=r"experiment 'x': share_machine: expected true or false"):
        plans.load(str(f))
