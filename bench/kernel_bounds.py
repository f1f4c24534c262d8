#!/usr/bin/env python3
"""Seed 004's key crackers against their issue bound on this core: cycles per key measured,
beside the fewest cycles the vector pipes could take for the instructions the build
executes per key.

For each kernel and build, with the widest vector path of this core (or --isa):

* the instructions per key of the core's function, times its calls a key, which the
  kernel notes (the RC5-72 SIMD core checks `keys_per_batch` keys per call; the DES
  bitslice core does `rounds_per_key` rounds' worth of S-boxes a key over its `lanes`,
  about 11.4 with its kept rounds and early abort), by class: rotates (`vprol*`,
  `vpror*`, `vpshld*`), shifts (`vpsll*`, `vpsrl*`, `vpsra*`), vpternlogs, other vector
  ALU operations, register copies, loads and stores.  AVX-512 functions are straight
  code and counted in their text (objdump; valgrind cannot run AVX-512); AVX2 ones are
  counted as executed, under callgrind (the RC5 core's passes are loops);
* this core's throughput of each class, measured with the loop probe (8 independent
  instructions of the path's width; on Zen 4: adds 2 zmm or 4 ymm a cycle, rotates 1,
  shifts 2 ymm, a rotate and an add together 2);
* the bound: the vpternlogs over their rate plus the other vector ALU operations over the
  vector rate (on Zen 4 vpternlog issues 1.7 a cycle, adds and logic 2, and a mix of the
  two takes the sum of their times), and at least the rotates and the shifts over
  theirs; a second bound counts register copies as vector operations too: alone they are
  eliminated at rename (about 5.7 a cycle on Zen 4), but a copy feeding a vpternlog takes
  a vector pipe like the operation (`copy+tern`: instructions a cycle of 8 such pairs,
  2.0 on Zen 4);
* the cycles per key of `cpulab run` (turns, a few rounds) and its share of the bound
  with copies.

Usage: python bench/kernel_bounds.py [--isa avx512|avx2] [-v O2 -v clang-O2 ...] [--processes 4] [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter

from cpulab import machine, workloads
from cpulab.compile.artifacts import build_artifact
from cpulab.measure.probes.loop import measure_loop
from cpulab.plan.toolchain import get as variant_of

KERNELS = {
    # name: (workload, params, its function by path, its calls a key from the result's notes)
    "rc5-72 simd": ("rc5-72", {"core": "simd"}, {"avx512": "avx512_c3", "avx2": "avx2_c3"},
                    lambda notes: 1 / notes["keys_per_batch"]),
    "des bitslice": ("des", {"core": "bitslice"}, {"avx512": "bs512_round", "avx2": "bs256_round"},
                     lambda notes: notes["rounds_per_key"] / notes["lanes"]),
}
REGISTER = {"avx512": "zmm", "avx2": "ymm"}
ROTATE = re.compile(r"^vp(rol|ror|shld|shrd)")
SHIFT = re.compile(r"^vps(ll|rl|ra)")
TERN = re.compile(r"^vpternlog")
MOVE = re.compile(r"^vmov(dqa|dqu|aps|apd|ups|upd)")


def classify(mnemonic: str, operands: str) -> list[str]:
    """The classes of one instruction (Intel syntax): none for a scalar one."""
    if not mnemonic.startswith("v"):
        return []
    dst, _, srcs = operands.partition(",")
    if MOVE.match(mnemonic):
        return ["store" if "[" in dst else "load" if "[" in srcs else "copy"]
    kind = "rotate" if ROTATE.match(mnemonic) else "shift" if SHIFT.match(mnemonic) else \
        "tern" if TERN.match(mnemonic) else "vector"
    return [kind, "load"] if "[" in srcs else [kind]  # a folded memory operand loads too


def instructions(path: str, name: str) -> dict[int, tuple[str, str]]:
    """Address -> (mnemonic, operands) of one function of an executable (objdump, Intel)."""
    out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", "-M", "intel", path], capture_output=True,
                         text=True, check=True).stdout
    m = re.search(rf"^[0-9a-f]+ <{re.escape(name)}(\.[a-z0-9.]+)?>:\n(.*?)(?:\n\n|\Z)", out, re.M | re.S)
    if not m:
        raise SystemExit(f"{path}: no function {name} (is this a build with that path?)")
    code = {}
    for line in m.group(2).splitlines():
        addr, _, text = line.partition(":")
        mnemonic, _, operands = text.strip().partition(" ")
        if mnemonic:
            code[int(addr, 16)] = (mnemonic, operands.strip())
    return code


def mix_per_call_static(path: str, name: str) -> Counter:
    """Straight code: each instruction of the function once per call."""
    n: Counter = Counter()
    for mnemonic, operands in instructions(path, name).values():
        n.update(classify(mnemonic, operands))
    return n


def mix_per_call_executed(path: str, name: str, params: dict[str, str]) -> Counter:
    """The instructions the function executed per call, counted under callgrind."""
    if not shutil.which("valgrind"):
        raise SystemExit("valgrind is needed to count the AVX2 cores (apt-get install valgrind)")
    code = instructions(path, name)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "callgrind.out")
        args = sum((["--param", f"{k}={v}"] for k, v in params.items()), [])
        subprocess.run(["valgrind", "--tool=callgrind", "--dump-instr=yes", "--compress-pos=no",
                        "--compress-strings=no", f"--callgrind-out-file={out}", path, *args, "--samples", "1",
                        "--reps", "4", "--warmup", "0", "--min-sample-time", "0"],
                       capture_output=True, check=True)
        executed: Counter = Counter()
        inside = skip = False
        for line in open(out):
            if line.startswith("fn="):
                inside = line[3:].strip().split(".")[0] == name
            elif line.startswith("calls="):
                skip = True  # the next line is the cost of a call made from here, not ours
            elif line.startswith("0x"):
                if inside and not skip:
                    addr, _, cost = line.split()
                    executed[int(addr, 16)] += int(cost)
                skip = False
    calls = executed[min(code)]  # the function's first instruction, once a call
    n: Counter = Counter()
    for addr, times in executed.items():
        if addr in code:
            for kind in classify(*code[addr]):
                n[kind] += times / calls
    return n


def throughputs(isa: str) -> dict[str, float]:
    """Instructions per cycle of each class on this core: 8 independent instructions of the
    path's width (copy+tern: 8 independent pairs)."""
    r = REGISTER[isa]

    def ipc(make) -> float:
        body = [make(i) for i in range(8)]
        got = measure_loop("; ".join(body), repeats=3)
        return sum(len(b.split("; ")) for b in body) / got["cycles_median"]
    rates = {"vector": ipc(lambda i: f"vpaddd {r}{i}, {r}12, {r}13"),
             "shift": ipc(lambda i: f"vpslld {r}{i}, {r}12, 3"),
             "copy": ipc(lambda i: f"vmovdqa {r}{i}, {r}{8 + i % 4}" if isa == "avx2" else
                         f"vmovdqa64 {r}{i}, {r}{20 + i}")}
    if isa == "avx512":
        rates["rotate"] = ipc(lambda i: f"vprold zmm{i}, zmm20, 3")
        rates["tern"] = ipc(lambda i: f"vpternlogd zmm{i}, zmm20, zmm21, 0x96")
        rates["copy+tern"] = ipc(lambda i: f"vmovdqa64 zmm{i}, zmm{20 + i % 4}; vpternlogd zmm{i}, zmm20, zmm21, 0x96")
    return rates


def measured_cycles(isa: str, variants: list[str], processes: int) -> dict[tuple, float]:
    """Cycles per key of each kernel and build, from one `cpulab run` in a scratch store."""
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "CPULAB_DB": os.path.join(tmp, "bounds.sqlite")}
        for kernel, (wl, params, _, _) in KERNELS.items():
            args = ["cpulab", "run", "-w", wl, *sum((["-v", v] for v in variants), []),
                    *sum((["-p", f"{k}={v}"] for k, v in {**params, "isa": isa}.items()), []),
                    "--processes", str(processes), "--json"]
            doc = json.loads(subprocess.run(args, capture_output=True, text=True, env=env, check=True).stdout)
            for r in doc["results"]:
                out[(kernel, r["variant"])] = r["cycles_per_unit"]
                out[(kernel, r["variant"], "notes")] = r.get("notes") or {}
    return out


def bounds(per_key: dict[str, float], rates: dict[str, float]) -> tuple[float, float]:
    """The issue bound of one key's instructions, without and with register copies."""
    alu = sum(per_key.get(k, 0) for k in ("vector", "rotate", "shift")) / rates["vector"] \
        + per_key.get("tern", 0) / rates.get("tern", 1)
    bound = max(alu, *(per_key.get(k, 0) / rates[k] for k in ("rotate", "shift") if k in rates))
    return bound, max(bound, alu + per_key.get("copy", 0) / rates["vector"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--isa", choices=("avx512", "avx2"), help="the vector path (default: the widest this core has)")
    ap.add_argument("-v", "--variant", dest="variants", action="append", help="builds (default O2, clang-O2)")
    ap.add_argument("--processes", type=int, default=4)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    variants = a.variants or ["O2", "clang-O2"]
    flags = machine.cpu_flags()
    isa = a.isa or ("avx512" if "avx512f" in flags else "avx2")
    if {"avx512": "avx512f", "avx2": "avx2"}[isa] not in flags:
        raise SystemExit(f"this core has no {isa}")
    rates = throughputs(isa)
    cycles = measured_cycles(isa, variants, a.processes)
    rows = []
    for kernel, (wl, params, fn, calls_a_key) in KERNELS.items():
        for v in variants:
            art = build_artifact(workloads.get(wl), variant_of(v))
            n = mix_per_call_static(art.path, fn[isa]) if isa == "avx512" else \
                mix_per_call_executed(art.path, fn[isa], {**params, "isa": isa})
            calls = calls_a_key(cycles[(kernel, v, "notes")])
            per_key = {k: c * calls for k, c in n.items()}
            bound, with_copies = bounds(per_key, rates)
            got = cycles.get((kernel, v))
            rows.append({"kernel": kernel, "variant": v, "per_key": {k: round(x, 2) for k, x in sorted(per_key.items())},
                         "bound": bound, "bound_with_copies": with_copies, "cycles_per_key": got,
                         "share_of_bound": with_copies / got if got else None})
    if a.json:
        json.dump({"isa": isa, "throughputs": rates, "rows": rows, "cpu": machine.fingerprint().get("cpu_model")},
                  sys.stdout, indent=1)
        print()
        return
    print(f"{isa}; per cycle on this core: " + ", ".join(f"{k} {x:.2f}" for k, x in rates.items()))
    print(f"{'kernel':14} {'build':9} {'instructions per key':60} {'bound':>6} {'+copies':>8} {'measured':>9} {'share':>6}")
    for r in rows:
        mix = ", ".join(f"{k} {x:g}" for k, x in r["per_key"].items())
        got = f"{r['cycles_per_key']:.2f}" if r["cycles_per_key"] else "-"
        share = f"{100 * r['share_of_bound']:.0f}%" if r["share_of_bound"] else "-"
        print(f"{r['kernel']:14} {r['variant']:9} {mix:60} {r['bound']:6.2f} {r['bound_with_copies']:8.2f} {got:>9} "
              f"{share:>6}")


if __name__ == "__main__":
    main()
