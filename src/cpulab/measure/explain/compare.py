"""Two builds side by side: the hot loop of each (by samples when profiled, else by size),
lined up instruction by instruction with its mix and an llvm-mca estimate: the evidence
the analysis stage words as why one is faster (analysis/why.py).
"""
from __future__ import annotations

import re
import shutil
from collections import Counter
from pathlib import Path

from cpulab.measure.explain.code import (
    Function, Loop, carried_chain, disassemble, float_style, hot_loop, is_x86, is_x87, kernel_functions, loop_listing,
    side_by_side, size_differences, stem, vector_bits
)
from cpulab.measure.explain.profile import attribute, profile, profile_program
from cpulab.measure.execute.executor import Executor
from cpulab.measure.probes.mca import mca_predict


def sampled_region(f: Function) -> Loop | None:
    """The smallest loop of f holding at least half of f's samples (None: the whole function)."""
    total = sum(i.samples for i in f.instructions)
    best = None
    for lp in f.loops():
        held = sum(i.samples for i in loop_listing(f, lp))
        if total and held * 2 >= total and (best is None or lp.instructions < best.instructions):
            best = lp
    return best


def region_summary(name: str, f: Function, lp: Loop | None, total: int) -> dict:
    insns = loop_listing(f, lp) if lp else f.instructions
    held = sum(i.samples for i in insns)
    kinds = Counter(k for i in insns for k in i.kinds())
    return {"function": name, "start": hex(insns[0].address), "loop": lp is not None,
            "instructions": len(insns), "bytes": lp.bytes if lp else f.size_bytes,
            "alignment": (lp.alignment if lp else Loop(insns[0].address, 0, 0, 0).alignment),
            "sample_share": held / total if total else None,
            "kinds": {k: kinds.get(k, 0) for k in ("load", "store", "branch", "vector", "fp-scalar")},
            "vector_bits": vector_bits(insns), "x87": is_x87(insns), "chain": carried_chain(insns) if lp else None,
            "listing": [i.display for i in insns], "samples": [i.samples for i in insns],
            "_instructions": insns}


def mca_estimate(listing: list[str]) -> dict | None:
    """llvm-mca's cycles per iteration of a loop listing (a model, not a measurement)."""
    body = [re.sub(r"\s*<[^>]*>", "", t) for t in listing]
    # The closing backward branch goes to the loop top; other branches are dropped (the
    # model does not take them anyway).
    stmts = [t for t in body[:-1] if not t.split()[0].startswith("j")]
    last = body[-1].split()[0] if body else ""
    if not stmts:
        return None
    if last.startswith("j"):
        stmts.append(f"{last} 1b")
    return mca_predict("\n".join(stmts), as_loop=last.startswith("j"))


def summary_of(funcs: dict[str, Function], prof: dict | None = None, function: str | None = None) -> dict:
    """One build's code (a kernel's functions, or a program's); with a profile, the
    sampled region (in `function`'s stem when given, else in the hottest function)."""
    out = {
        "functions": [{"name": n, "instructions": len(f.instructions), "bytes": f.size_bytes,
                       "loops": len(f.loops())} for n, f in sorted(funcs.items())],
        "kernel_instructions": sum(len(f.instructions) for f in funcs.values()),
        "kernel_bytes": sum(f.size_bytes for f in funcs.values()),
        "hot_loop": None, "profile": None,
    }
    if prof:
        per_func = attribute(funcs, prof["pcs"])
        total = sum(per_func.values())
        ranked = [n for n, _ in per_func.most_common() if n in funcs]
        out["profile"] = {"ticks": total, "runs": prof.get("runs"), "cycles_per_unit": prof["cycles_per_unit"],
                          "unit": prof["unit"],
                          "functions": [{"name": n, "share": c / total} for n, c in per_func.most_common()]}
        same = [n for n in ranked if function and stem(n) == stem(function)]
        name = (same or ranked or [None])[0]
        if name:
            lp = sampled_region(funcs[name])
            out["hot_loop"] = region_summary(name, funcs[name], lp, total)
            out["hot_loop"]["lined_up"] = bool(same) or function is None
        return out
    hot = hot_loop(funcs)
    if hot:
        name, lp = hot
        out["hot_loop"] = region_summary(name, funcs[name], lp, 0)
    return out


def explain(artifact_a: str, artifact_b: str, params: dict[str, str] | None = None, profile_code: float = 0.0,
            names: tuple[str, str] = ("A", "B"), executor: Executor | None = None, verified: bool = False) -> dict:
    """Both builds' kernel code, their hot regions lined up on the same function and
    aligned side by side.  profile_code: seconds of sampled
    profile of each artifact at `params` to find the regions (0: the static guess).
    verified: both passed their known-answer test at `params` (a run's builds at a point
    they were timed at; a 100 MB file's test is a pass over it): not again."""
    pa = profile(artifact_a, params, profile_code, executor, verified) if profile_code else None
    pb = profile(artifact_b, params, profile_code, executor, verified) if profile_code else None
    return compare_code(kernel_functions(artifact_a), kernel_functions(artifact_b), pa, pb, names,
                        Path(artifact_a).read_bytes() == Path(artifact_b).read_bytes())


def build_code(artifact: str, params: dict[str, str] | None, seconds: float, executor: Executor | None = None) -> dict:
    """One build of a run's code: its hot region found by `seconds` of samples at `params`
    (a point it was timed at), with its instructions, vector width, loop-carried chain
    and llvm-mca's estimate; another machine's build (ARM, run under qemu-user) read
    without a profile: how its timed code does its floating point (float_style)."""
    if not is_x86(Path(artifact)):
        return {"hot_loop": None, "float": float_style(kernel_functions(artifact))}
    # a run's build at a point it was timed at: its known-answer test passed (an FFT's
    # long-double DFT can cost more than the profile)
    out = summary_of(kernel_functions(artifact), profile(artifact, params, seconds, executor, verified=True))
    if (hot := out["hot_loop"]) is not None:
        hot.pop("_instructions", None)
        if hot["loop"] and shutil.which("llvm-mca"):
            hot["mca"] = mca_estimate(hot["listing"])
    return out


def compare_code(funcs_a: dict[str, Function], funcs_b: dict[str, Function], pa: dict | None, pb: dict | None,
                 names: tuple[str, str], identical: bool) -> dict:
    """Two builds' code summaries, their hot regions lined up on the same function (B on
    A's hottest) and aligned side by side, named (`names`: A's and B's)."""
    a = summary_of(funcs_a, pa)
    b = summary_of(funcs_b, pb, a["hot_loop"]["function"] if a["hot_loop"] else None)
    rows = []
    if a["hot_loop"] and b["hot_loop"]:
        rows = side_by_side(a["hot_loop"].pop("_instructions"), b["hot_loop"].pop("_instructions"))
        for side in (a, b):
            if side["hot_loop"]["loop"] and shutil.which("llvm-mca"):
                side["hot_loop"]["mca"] = mca_estimate(side["hot_loop"]["listing"])
    for side in (a, b):
        if side["hot_loop"]:
            side["hot_loop"].pop("_instructions", None)
    return {"a": a, "b": b, "rows": rows, "names": list(names), "profiled": pa is not None and pb is not None,
            "identical": identical}


def explain_programs(exe_a: str, argv_a: list[str], exe_b: str, argv_b: list[str], names: tuple[str, str],
                     profile_code: bool = True, executor: Executor | None = None) -> dict:
    """Two builds of a program: the functions that differ most, and (profiled) the hot
    region of each lined up on the same function, side by side."""
    funcs_a = {n: f for n, f in disassemble(Path(exe_a)).items() if f.instructions}
    funcs_b = {n: f for n, f in disassemble(Path(exe_b)).items() if f.instructions}
    pa = profile_program(exe_a, argv_a, executor=executor) if profile_code else None
    pb = profile_program(exe_b, argv_b, executor=executor) if profile_code else None
    doc = compare_code(funcs_a, funcs_b, pa, pb, names, Path(exe_a).read_bytes() == Path(exe_b).read_bytes())
    doc["differences"] = size_differences(funcs_a, funcs_b)
    doc["subject"] = "program"
    return doc
