#!/usr/bin/env python3
"""`cpulab bisect` and `--metric memory` on their defaults (issue 41): how often bisection
finds a planted 3% regression among 16 commits, and how often it finds one in a history
without any; and whether peak memory 5% larger is called `larger` while A/A is `same`.

A toy repository of 16 commits of one C program (a dependent multiply chain of about
--ms milliseconds); from commit --at on, the loop runs 3% more iterations.  Each try is
`cpulab bisect good HEAD --plan` in a fresh store, as a user would run it.  --memory:
`cpulab time --metric memory` of bench/kernels/alloc.c touching 64 MiB against 67.2 MiB,
and against itself.  Each rate comes with its exact 95% interval.

Usage: python bench/bisect_power.py [--tries 10] [--at 11] [--ms 20] [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ci_busy import TOY_C, toy_plan  # noqa: E402
from power import rate  # noqa: E402

from cpulab.compile.artifacts import build_tool  # noqa: E402

HERE = Path(__file__).resolve().parent


def cpulab(*args: str, db: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cpulab.cli", *args], capture_output=True, text=True,
                          env={**os.environ, "CPULAB_DB": str(db)}, timeout=3600)


def repository(root: Path, works: list[int]) -> Path:
    """A git repository with one commit per amount of work (the first tagged good), and its plan."""
    repo = root / "repo"
    repo.mkdir()
    git = ["git", "-c", "user.name=b", "-c", "user.email=b@b", "-C", str(repo)]
    subprocess.run([*git, "init", "-q"], check=True)
    (repo / "Makefile").write_text("toy: toy.c\n\t$(CC) $(CFLAGS) -o toy toy.c\n")
    for i, work in enumerate(works):
        (repo / "toy.c").write_text(TOY_C.format(work=work, comment="toy"))
        subprocess.run([*git, "add", "."], check=True)
        subprocess.run([*git, "commit", "-qm", f"commit {i}", "--allow-empty"], check=True)
        if i == 0:
            subprocess.run([*git, "tag", "good"], check=True)
    return toy_plan(root, repo)


def iterations_for(ms: float) -> int:
    """Iterations of the chain that take about `ms` here."""
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "t.c"
        src.write_text(TOY_C.format(work=50_000_000, comment="toy"))
        exe = Path(d) / "t"
        subprocess.run(["gcc", "-O2", str(src), "-o", str(exe)], check=True)
        t0 = time.perf_counter()
        subprocess.run([str(exe)], check=True, capture_output=True)
        return int(50_000_000 * ms / 1000 / (time.perf_counter() - t0))


def bisect_tries(tries: int, at: int | None, n: int) -> list[dict]:
    out = []
    for _ in range(tries):
        with tempfile.TemporaryDirectory() as d:
            works = [n if at is None or i < at else int(n * 1.03) for i in range(16)]
            plan = repository(Path(d), works)
            t0 = time.perf_counter()
            r = cpulab("bisect", "good", "HEAD", "--plan", str(plan), "--json", db=Path(d) / "s.sqlite")
            doc = json.loads(r.stdout) if r.stdout.strip().startswith("{") else {"status": f"error {r.stderr[-200:]}"}
            first = (doc.get("first_bad") or {}).get("subject")
            out.append({"status": doc["status"], "first_bad": first, "steps": len(doc.get("steps", [])),
                        "seconds": time.perf_counter() - t0, "exit": r.returncode})
    return out


def memory_tries(tries: int) -> dict:
    alloc = str(build_tool(HERE / "kernels" / "alloc.c"))
    verdicts = {"larger": [], "aa": []}
    with tempfile.TemporaryDirectory() as d:
        for _ in range(tries):
            for kind, mb in (("larger", 64 * 1.05), ("aa", 64)):
                r = cpulab("time", "--metric", "memory", "-n", "A", "-n", "B", f"{alloc} 64", f"{alloc} {mb}", "--json",
                           db=Path(d) / "m.sqlite")
                c = json.loads(r.stdout)["comparisons"][0]
                verdicts[kind].append((c["verdict"], c["ratio"]))
    return {"larger_detected": rate(sum(v == "larger" for v, _ in verdicts["larger"]), tries),
            "aa_same": rate(sum(v == "same" for v, _ in verdicts["aa"]), tries),
            "larger_ratio_median": sorted(r for _, r in verdicts["larger"])[tries // 2]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tries", type=int, default=10)
    ap.add_argument("--at", type=int, default=11, help="the first slower commit, 1-15 (default 11)")
    ap.add_argument("--ms", type=float, default=20.0)
    ap.add_argument("--memory", action="store_true", help="also --metric memory's tries")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    n = iterations_for(a.ms)
    planted, aa = bisect_tries(a.tries, a.at, n), bisect_tries(a.tries, None, n)
    doc = {"iterations": n, "at": f"commit {a.at}",
           "found": rate(sum(t["first_bad"] == f"commit {a.at}" for t in planted), a.tries),
           "planted_outcomes": [(t["status"], t["first_bad"], t["steps"]) for t in planted],
           "steps_max": max(t["steps"] for t in planted),
           "seconds_median": sorted(t["seconds"] for t in planted)[a.tries // 2],
           "aa_nothing_found": rate(sum(t["status"] == "none" for t in aa), a.tries),
           "aa_outcomes": [(t["status"], t["first_bad"], t["steps"]) for t in aa]}
    if a.memory:
        doc["memory"] = memory_tries(a.tries)
    print(json.dumps(doc, indent=1) if a.json else "\n".join(f"{k}: {v}" for k, v in doc.items()))


if __name__ == "__main__":
    main()
