#!/usr/bin/env python3
"""`cpulab ci` on a busy machine: the time gate against the instruction-count gate.

Makes a toy git repository whose HEAD does 2% more work than its BASE (and an A/A range
whose two commits do the same work, different only in a comment), then runs
`cpulab ci` on each range with and without `--metric instructions`, with a busy loop on
the measured CPU (bench/cotenant.py) through every run, or on and off at random.  A right gate
exits 1 on the 2% range and 0 on the A/A range.
Usage: python bench/ci_busy.py [--repeats 3] [--flicker | --quiet-machine] [--json]
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
from cotenant import cotenant  # noqa: E402

TOY_C = """#include <stdio.h>
/* {comment} */
int main(void) {{
    volatile unsigned long x = 1;
    for (long i = 0; i < {work}L; i++) x = x * 6364136223846793005UL + 1442695040888963407UL;
    printf("%lu\\n", x & 1);
    return 0;
}}
"""
COMMITS = {"base": (3_000_000, "base"), "more": (3_060_000, "2% more work"), "same": (3_000_000, "a comment")}


def toy(root: Path) -> Path:
    repo = root / "repo"
    repo.mkdir()
    git = ["git", "-c", "user.name=b", "-c", "user.email=b@b", "-C", str(repo)]
    subprocess.run([*git, "init", "-q"], check=True)
    (repo / "Makefile").write_text("toy: toy.c\n\t$(CC) $(CFLAGS) -o toy toy.c\n")
    for tag, (work, comment) in COMMITS.items():
        subprocess.run([*git, "checkout", "-q", "base"], check=False, capture_output=True)
        (repo / "toy.c").write_text(TOY_C.format(work=work, comment=comment))
        subprocess.run([*git, "add", "."], check=True)
        subprocess.run([*git, "commit", "-qm", tag], check=True)
        subprocess.run([*git, "tag", tag], check=True)
    return toy_plan(root, repo)


def toy_plan(root: Path, repo: Path) -> Path:
    """A plan that builds the toy repository's program with make and runs it."""
    plan = root / "plan.toml"
    plan.write_text(f'name = "toy"\n[program.toy]\nsource = "{repo}"\n'
                    'build = ["make CC={cc} CFLAGS=\'{cflags}\'"]\nrun = "{build}/toy"\n'
                    '[[experiment]]\nname = "toy"\nworkloads = ["toy"]\nvariants = ["O2"]\n')
    return plan


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--flicker", action="store_true", help="the busy loop on and off at random 0.05-5 s")
    ap.add_argument("--quiet-machine", action="store_true", help="no busy loop")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        plan = toy(Path(tmp))
        db = Path(tmp) / "ci.sqlite"
        measured = max(os.sched_getaffinity(0))  # the CPU cpulab claims first (cpulock.claim_cpu)
        with cotenant(None if a.quiet_machine else measured, seed=1, always=not a.flicker):
            for i in range(a.repeats):
                for refs in ("base..more", "base..same"):
                    for metric in ("time", "instructions"):
                        t0 = time.monotonic()
                        p = subprocess.run([sys.executable, "-m", "cpulab.cli", "ci", refs, "--plan", str(plan),
                                            "--metric", metric, "--db", str(db), "--random-seed", str(i)],
                                           capture_output=True, text=True)
                        rows.append({"range": refs, "metric": metric, "exit": p.returncode,
                                     "seconds": round(time.monotonic() - t0, 1),
                                     "summary": p.stdout.strip().splitlines()[2] if p.stdout.count("\n") > 2 else
                                     p.stderr.strip()})
                        if not a.json:
                            print(f"{refs:11} {metric:12} exit {p.returncode}  {rows[-1]['seconds']:5.1f} s  "
                                  f"{rows[-1]['summary'][:100]}", flush=True)
    if a.json:
        print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
