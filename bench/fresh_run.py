#!/usr/bin/env python3
"""The README's first command timed as a new user meets it: `pip install . && cpulab run`
from a fresh clone, with empty caches and store, on this host.

Each repeat clones the repository (at --commit), installs it into a virtual environment
of its own that sees this Python's packages (so the clone replaces no install of yours and
the dependencies already here are reused, as on a machine that ran it before), and runs the
default plan.  It prints the host, the install's and the run's seconds, the machine's CPU
time over the run (busy, stolen by the host, idle: a run near 100% busy is shortened only
by less work), and where the run's own time went (its time split, from the store).
Nothing else should run meanwhile: on 2 CPUs anything beside it is part of what it times.

Usage: python bench/fresh_run.py [--repeat 1] [--commit HEAD] [--keep] [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cpulab import time_split
from cpulab.machine import cpuinfo
from cpulab.store.db import Store

REPO = Path(__file__).resolve().parent.parent


def host() -> dict:
    """What names this host's figures: the CPU model, family and model, CPUs and load."""
    info = cpuinfo()
    return {"cpu": info.get("model name", platform.processor()), "family": info.get("cpu family"),
            "model": info.get("model"), "cpus": os.cpu_count(), "load": os.getloadavg()[0]}


def timed(argv: list[str], cwd: Path, env: dict, log: Path) -> float:
    """Seconds `argv` took; its output into `log`; exits naming the log when it fails."""
    t0 = time.monotonic()
    with open(log, "w") as out:
        p = subprocess.run(argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
    if p.returncode:
        sys.exit(f"fresh_run: {' '.join(argv[:3])} exited {p.returncode}: see {log}")
    return time.monotonic() - t0


def cpu_seconds() -> dict[str, float]:
    """The machine's CPU time so far (/proc/stat, all CPUs): busy (user, nice, system, irq,
    softirq), stolen by the host, and idle (with iowait), in seconds."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:9]]
    hz = os.sysconf("SC_CLK_TCK")
    user, nice, system, idle, iowait, irq, softirq, steal = ticks
    return {"busy": (user + nice + system + irq + softirq) / hz, "steal": steal / hz, "idle": (idle + iowait) / hz}


def split(store: Path) -> tuple[dict[str, float], dict]:
    """The run's time split summed over experiments (phase -> seconds), and its timing."""
    db = Store(store)
    run = db.run(db.latest_run())
    return time_split.totals(run.conditions.get("time_split", {})), run.timing


def fresh_run(commit: str, where: Path) -> dict:
    """One clone, install and run in `where`: their seconds and the run's split."""
    clone, venv = where / "clone", where / "venv"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    subprocess.run(["git", "-C", str(clone), "checkout", "-q", commit], check=True)
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True)
    env = {**os.environ, "XDG_CACHE_HOME": str(where / "cache"), "XDG_DATA_HOME": str(where / "data")}
    env.pop("VIRTUAL_ENV", None)
    # The venv's python runs this Python's pip (seen through the system site), installing into the venv.
    install = timed([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "."], clone, env, where / "install.log")
    before = cpu_seconds()
    run = timed([str(venv / "bin" / "cpulab"), "run"], clone, env, where / "run.log")
    cpu = {k: round(v - before[k], 1) for k, v in cpu_seconds().items()}  # the whole machine's, over the run
    phases, timing = split(where / "data" / "cpulab" / "cpulab.sqlite")
    return {"commit": subprocess.run(["git", "-C", str(clone), "rev-parse", "--short", "HEAD"], capture_output=True,
                                     text=True).stdout.strip(),
            "install_s": round(install, 1), "run_s": round(run, 1), "total_s": round(install + run, 1),
            "core_per_tsc": timing.get("core_per_tsc"), "cpu_s": cpu, "split_s": {k: round(v, 1) for k, v in phases.items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--commit", default="HEAD")
    ap.add_argument("--keep", action="store_true", help="keep each repeat's folder (clone, store, report, logs)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", a.commit], capture_output=True, text=True,
                            check=True).stdout.strip()
    doc = {"host": host(), "runs": []}
    for i in range(a.repeat):
        where = Path(tempfile.mkdtemp(prefix="cpulab-fresh-"))
        try:
            r = fresh_run(commit, where)
        finally:
            if not a.keep:
                subprocess.run(["rm", "-rf", str(where)])
        r["folder"] = str(where) if a.keep else None
        doc["runs"].append(r)
        if not a.json:
            print(f"{r['commit']}: install {r['install_s']} s, run {r['run_s']} s, total {r['total_s']} s "
                  f"(core/TSC {r['core_per_tsc'] or 0:.2f})" + (f", kept in {where}" if a.keep else ""), flush=True)
            c = r["cpu_s"]  # the run is CPU-bound where busy is near CPUs x run; steal: the host's share
            print(f"  CPU over the run: busy {c['busy']} s ({c['busy'] / (r['run_s'] * os.cpu_count()):.0%} of "
                  f"{os.cpu_count()} CPUs), stolen {c['steal']} s, idle {c['idle']} s", flush=True)
    if a.json:
        print(json.dumps(doc, indent=1))
        return
    h = doc["host"]
    print(f"host: {h['cpu']}, family {h['family']} model {h['model']}, {h['cpus']} CPUs, load {h['load']:.2f} at the start")
    for phase in doc["runs"][-1]["split_s"]:
        print(f"  {phase:20s} " + "  ".join(f"{r['split_s'].get(phase, 0):6.1f}" for r in doc["runs"]) + " s")


if __name__ == "__main__":
    main()
