"""One CPU, one measurement: concurrent cpulab processes never measure on one CPU at once."""
import json
import os
import subprocess
import sys
import time

from cpulab.measure.execute import cpulock

# Two cpulab processes at once, each measuring 4 harness processes on the same CPU; each
# prints the [start, end] of every sample it took (CLOCK_MONOTONIC, shared by processes).
# They start measuring together (a go file), so that one cannot finish before the other
# has begun.
CHILD = """
import json, os, sys, time
from pathlib import Path
from cpulab import workloads
from cpulab.compile import artifacts
from cpulab.measure.execute.executor import HarnessJob, LocalExecutor
from cpulab.plan import toolchain
art = artifacts.build_artifact(workloads.get("sha256"), toolchain.BUILTIN["O2"])
ex = LocalExecutor(cpu=int(sys.argv[1]))
Path(sys.argv[2], f"ready-{os.getpid()}").touch()
while not Path(sys.argv[2], "go").exists():
    time.sleep(0.001)
spans = []
for _ in range(4):
    d = ex.execute(HarnessJob(art.path, {"size": "4096"}, samples=5, min_sample_time=0.002, warmup=0.0)).data
    spans.append([d["t_ns"][0], d["t_ns"][-1] + d["ns"][-1]])
print(json.dumps({"spans": spans, "waited": ex.waited_s}))
"""


def test_two_concurrent_processes_never_measure_on_one_cpu_at_once(tmp_path):
    env = {**os.environ, "CPULAB_LOCK_DIR": str(tmp_path)}
    cpu = str(max(os.sched_getaffinity(0)))
    kids = [subprocess.Popen([sys.executable, "-c", CHILD, cpu, str(tmp_path)], stdout=subprocess.PIPE, text=True,
                             env=env) for _ in range(2)]
    deadline = time.monotonic() + 300
    while len(list(tmp_path.glob("ready-*"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    (tmp_path / "go").touch()
    docs = [json.loads(k.communicate(timeout=300)[0]) for k in kids]
    a, b = (d["spans"] for d in docs)
    for s0, e0 in a:
        for s1, e1 in b:
            assert e0 <= s1 or e1 <= s0  # the measured spans of the two never overlap
    assert docs[0]["waited"] + docs[1]["waited"] > 0  # one of them had to wait


def test_a_claimed_cpu_is_not_picked_again(tmp_path, monkeypatch):
    monkeypatch.setenv("CPULAB_LOCK_DIR", str(tmp_path))
    monkeypatch.setattr(cpulock, "runnable_by_cpu", dict)  # no other program busy: the last first
    first, claim = cpulock.claim_cpu({0, 1})
    assert first == 1 and claim is not None
    code = "from cpulab.measure.execute import cpulock; print(cpulock.claim_cpu({%s})[1] is not None)"
    def claims(cpus: str) -> str:
        return subprocess.run([sys.executable, "-c", code % cpus], capture_output=True, text=True, check=True,
                              env={**os.environ, "CPULAB_LOCK_DIR": str(tmp_path)}).stdout.strip()
    assert claims("1") == "False" and claims("0") == "True"  # 1 is held: shared; 0 is free
    claim.close()
    assert claims("1") == "True"  # released with its holder


def test_a_cpu_another_program_keeps_busy_is_seen_and_passed_over(tmp_path, monkeypatch):
    """A busy loop pinned to a CPU shows there as runnable; of two unclaimed CPUs, the one
    without a runnable program is claimed, the last one where both are alike."""
    cpu = max(os.sched_getaffinity(0))
    loop = subprocess.Popen(["taskset", "-c", str(cpu), sys.executable, "-c", "while True: pass"])
    try:
        deadline = time.monotonic() + 30
        while cpulock.runnable_by_cpu().get(cpu, 0) < 1:
            assert time.monotonic() < deadline and loop.poll() is None
            time.sleep(0.01)
    finally:
        loop.kill()
        loop.wait()
    monkeypatch.setenv("CPULAB_LOCK_DIR", str(tmp_path))
    for busy, chosen in (({1: 1}, 0), ({0: 2}, 1), ({0: 1, 1: 1}, 1), ({}, 1)):
        monkeypatch.setattr(cpulock, "runnable_by_cpu", lambda busy=busy: busy)
        got, claim = cpulock.claim_cpu({0, 1})
        claim.close()
        assert got == chosen, busy
