#!/usr/bin/env python3
"""Seed 004's key crackers against their issue bound on this core: cycles per key measured,
beside the fewest cycles the vector pipes could take for the instructions the build
executes per key.

For each kernel and build:

* the instructions per key, counted statically in the core's straight-line function
  times the calls a key, which the kernel notes (the RC5-72 SIMD core checks
  `keys_per_batch` keys per call; the DES bitslice core does `rounds_per_key` rounds' worth
  of S-boxes a key over 512 lanes, about 11.4 with its kept rounds and early abort), by
  class: rotates (`vprol*`, `vpror*`, `vpshld*`), other vector ALU operations,
  register copies, loads and stores;
* this core's throughput of each class, measured with the loop probe (8 independent
  zmm instructions; on Zen 4: adds 2 a cycle, rotates 1, a rotate and an add together 2);
* the bound: the vpternlogs over their rate plus the other vector ALU operations over the
  vector rate (on Zen 4 vpternlog issues 1.7 a cycle, adds and logic 2, and a mix of the
  two takes the sum of their times), and at least the rotates over the rotate rate; a
  second bound counts register copies as vector operations too: alone they are
  eliminated at rename (about 5.7 a cycle on Zen 4), but a copy feeding a vpternlog takes
  a vector pipe like the operation (`copy+tern`: instructions a cycle of 8 such pairs,
  2.0 on Zen 4);
* the cycles per key of `cpulab run` (turns, a few rounds) and its share of the bound
  with copies.

Usage: python bench/kernel_bounds.py [-v O2 -v clang-O2 ...] [--processes 4] [--json]
AVX-512 builds only: on a core without AVX-512F it says so and stops.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter

from cpulab import machine, workloads
from cpulab.compile.artifacts import build_artifact
from cpulab.measure.probes.loop import measure_loop
from cpulab.plan.toolchain import get as variant_of

KERNELS = {
    # name: (workload, params, function, its calls a key from the result's notes)
    "rc5-72 simd": ("rc5-72", {"core": "simd"}, "avx512_c3", lambda notes: 1 / notes["keys_per_batch"]),
    "des bitslice": ("des", {"core": "bitslice"}, "bs512_round", lambda notes: notes["rounds_per_key"] / 512),
}
ROTATE = re.compile(r"^vp(rol|ror|shld|shrd)")
TERN = re.compile(r"^vpternlog")
MOVE = re.compile(r"^vmov(dqa|dqu|aps|apd|ups|upd)")


def classify(disassembly: str) -> Counter:
    """Instruction classes of one function's objdump text (Intel syntax)."""
    n: Counter = Counter()
    for line in disassembly.splitlines():
        parts = line.split("\t")
        if len(parts) < 2 or not parts[-1].strip():
            continue
        mnemonic, _, operands = parts[-1].strip().partition(" ")
        if not mnemonic.startswith("v"):
            continue
        dst, _, srcs = operands.partition(",")
        if MOVE.match(mnemonic):
            n["store" if "[" in dst else "load" if "[" in srcs else "copy"] += 1
        elif ROTATE.match(mnemonic):
            n["rotate"] += 1
        else:
            n["tern" if TERN.match(mnemonic) else "vector"] += 1
            n["load"] += "[" in srcs  # a folded memory operand
    return n


def function_text(path: str, name: str) -> str:
    out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", "-M", "intel", path], capture_output=True,
                         text=True, check=True).stdout
    m = re.search(rf"^[0-9a-f]+ <{re.escape(name)}(\.[a-z0-9.]+)?>:\n(.*?)(?:\n\n|\Z)", out, re.M | re.S)
    if not m:
        raise SystemExit(f"{path}: no function {name} (is this an AVX-512 build of the kernel?)")
    return m.group(2)


def throughputs() -> dict[str, float]:
    """Instructions per cycle of each class on this core: 8 independent zmm instructions
    (copy+tern: 8 independent pairs)."""
    def ipc(make) -> float:
        body = [make(i) for i in range(8)]
        r = measure_loop("; ".join(body), repeats=3)
        return sum(len(b.split("; ")) for b in body) / r["cycles_median"]
    return {"vector": ipc(lambda i: f"vpaddd zmm{i}, zmm20, zmm21"),
            "rotate": ipc(lambda i: f"vprold zmm{i}, zmm20, 3"),
            "tern": ipc(lambda i: f"vpternlogd zmm{i}, zmm20, zmm21, 0x96"),
            "copy": ipc(lambda i: f"vmovdqa64 zmm{i}, zmm{20 + i}"),
            "copy+tern": ipc(lambda i: f"vmovdqa64 zmm{i}, zmm{20 + i % 4}; vpternlogd zmm{i}, zmm20, zmm21, 0x96")}


def measured_cycles(variants: list[str], processes: int) -> dict[tuple[str, str], float]:
    """Cycles per key of each kernel and build, from one `cpulab run` in a scratch store."""
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "CPULAB_DB": os.path.join(tmp, "bounds.sqlite")}
        for kernel, (wl, params, _, _) in KERNELS.items():
            args = ["cpulab", "run", "-w", wl, *sum((["-v", v] for v in variants), []),
                    *sum((["-p", f"{k}={v}"] for k, v in params.items()), []),
                    "--processes", str(processes), "--json"]
            doc = json.loads(subprocess.run(args, capture_output=True, text=True, env=env, check=True).stdout)
            for r in doc["results"]:
                out[(kernel, r["variant"])] = r["cycles_per_unit"]
                out[(kernel, r["variant"], "notes")] = r.get("notes") or {}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-v", "--variant", dest="variants", action="append", help="builds (default O2, clang-O2)")
    ap.add_argument("--processes", type=int, default=4)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    variants = a.variants or ["O2", "clang-O2"]
    if "avx512f" not in machine.cpu_flags():
        raise SystemExit("this core has no AVX-512F: the bounds here are for the AVX-512 cores")
    rates = throughputs()
    cycles = measured_cycles(variants, a.processes)
    rows = []
    for kernel, (wl, _, fn, calls_a_key) in KERNELS.items():
        for v in variants:
            art = build_artifact(workloads.get(wl), variant_of(v))
            n = classify(function_text(art.path, fn))
            calls = calls_a_key(cycles[(kernel, v, "notes")])
            per_key = {k: c * calls for k, c in n.items()}
            alu = (per_key.get("vector", 0) + per_key.get("rotate", 0)) / rates["vector"] \
                + per_key.get("tern", 0) / rates["tern"]
            bound = max(alu, per_key.get("rotate", 0) / rates["rotate"])
            with_copies = max(bound, alu + per_key.get("copy", 0) / rates["vector"])
            got = cycles.get((kernel, v))
            rows.append({"kernel": kernel, "variant": v, "per_key": {k: round(x, 2) for k, x in sorted(per_key.items())},
                         "bound": bound, "bound_with_copies": with_copies, "cycles_per_key": got,
                         "share_of_bound": with_copies / got if got else None})
    if a.json:
        json.dump({"throughputs": rates, "rows": rows, "cpu": machine.fingerprint().get("cpu_model")}, sys.stdout,
                  indent=1)
        print()
        return
    print("per cycle on this core: " + ", ".join(f"{k} {x:.2f}" for k, x in rates.items()))
    print(f"{'kernel':14} {'build':9} {'instructions per key':52} {'bound':>6} {'+copies':>8} {'measured':>9} {'share':>6}")
    for r in rows:
        mix = ", ".join(f"{k} {x:g}" for k, x in r["per_key"].items())
        got = f"{r['cycles_per_key']:.2f}" if r["cycles_per_key"] else "-"
        share = f"{100 * r['share_of_bound']:.0f}%" if r["share_of_bound"] else "-"
        print(f"{r['kernel']:14} {r['variant']:9} {mix:52} {r['bound']:6.2f} {r['bound_with_copies']:8.2f} {got:>9} "
              f"{share:>6}")


if __name__ == "__main__":
    main()
