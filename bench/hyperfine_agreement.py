"""Does `cpulab time` agree with hyperfine?  Medians of the same commands, same machine.

Builds a small C program that spins on the clock for a given number of milliseconds,
then times it at 5 ms and at 200 ms with hyperfine (--shell=none, pinned with taskset
to the CPU cpulab pins to) and with `cpulab time`, alternating the two tools in blocks
so machine drift hits both.  Prints each median and their difference; the goal is
within 2%.

    PYTHONPATH=src python bench/hyperfine_agreement.py [--runs 15] [--blocks 10]
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from cpulab.measure.execute.executor import claimed_cpu

SPIN_C = r"""
#include <stdlib.h>
#include <time.h>
int main(int argc, char **argv) {
    double ms = argc > 1 ? atof(argv[1]) : 5.0;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    do clock_gettime(CLOCK_MONOTONIC, &b);
    while ((b.tv_sec - a.tv_sec) * 1e3 + (b.tv_nsec - a.tv_nsec) * 1e-6 < ms);
    return 0;
}
"""


def hyperfine_median(cmd: list[str], runs: int, cpu: int, out: Path) -> float:
    subprocess.run(["taskset", "-c", str(cpu), "hyperfine", "--shell=none", "--warmup", "3", "--runs", str(runs),
                    "--style", "none", "--export-json", str(out), " ".join(cmd)],
                   check=True, capture_output=True)
    return statistics.median(json.loads(out.read_text())["results"][0]["times"])


def cpulab_median(cmd: list[str], runs: int, cpu: int, db: Path) -> float:
    p = subprocess.run([sys.executable, "-m", "cpulab.cli", "time", "--db", str(db), "--warmup", "3",
                        "--runs", str(runs), "--cpu", str(cpu), "--json", " ".join(cmd)],
                       check=True, capture_output=True, text=True)
    (res,) = json.loads(p.stdout)["results"]
    return res["real_s"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15, help="processes per tool per block")
    ap.add_argument("--blocks", type=int, default=10, help="alternating blocks of hyperfine and cpulab")
    args = ap.parse_args()
    if not shutil.which("hyperfine"):
        sys.exit("hyperfine not found: apt-get install hyperfine")
    cpu = claimed_cpu()
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        (t / "spin.c").write_text(SPIN_C)
        subprocess.run(["gcc", "-O2", "-o", str(t / "spin"), str(t / "spin.c")], check=True)
        print(f"cpu {cpu}, {args.blocks} blocks x {args.runs} runs per tool; medians in ms")
        print(f"{'command':>12} {'hyperfine':>10} {'cpulab':>10} {'diff':>8}")
        worst = 0.0
        for ms in ("5", "200"):
            cmd = [str(t / "spin"), ms]
            hf, cl = [], []
            for b in range(args.blocks):
                hf.append(hyperfine_median(cmd, args.runs, cpu, t / "hf.json"))
                cl.append(cpulab_median(cmd, args.runs, cpu, t / "cpulab.sqlite"))
            h, c = statistics.median(hf), statistics.median(cl)
            worst = max(worst, abs(c / h - 1))
            print(f"{'spin ' + ms + ' ms':>12} {h * 1e3:10.3f} {c * 1e3:10.3f} {(c / h - 1) * 100:+7.2f}%"
                  f"   blocks hf {' '.join(f'{x * 1e3:.3f}' for x in hf)} | cpulab {' '.join(f'{x * 1e3:.3f}' for x in cl)}")
        print(f"largest difference {worst * 100:.2f}% ({'within' if worst <= 0.02 else 'NOT within'} 2%)")


if __name__ == "__main__":
    main()
