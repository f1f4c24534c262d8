"""Why one build is faster, in words, from the evidence the measure stage stored: the two
builds' code side by side (measure/explain/compare.py), their hot regions, instruction mixes
and alignments, and the measured cycles per unit; and for every decided comparison a
cause (`Comparison.why`) from its two results and each build's hot loop."""
from __future__ import annotations

import math

from cpulab import workloads
from cpulab.model import Comparison, Result, Verdict
from cpulab.params import cache_name, data_caches, human_bytes


def with_why(doc: dict) -> dict:
    """An explain document with its sentence of why (`why`); one stored with a sentence
    (by an earlier version) keeps it."""
    if "why" in doc:
        return doc
    a_name, b_name = doc.get("names") or ("A", "B")
    return {**doc, "why": code_sentence(a_name, b_name, doc["a"], doc["b"])}


def code_sentence(a_name: str, b_name: str, a: dict, b: dict) -> str:
    """One sentence from the evidence: the region, its share of samples, instructions per
    iteration, what kind they are, alignment, and the measured cycles per unit."""
    ha, hb = a["hot_loop"], b["hot_loop"]
    if not ha or not hb:
        return "no hot region found in one of the builds"
    what = "loop" if ha["loop"] and hb["loop"] else "function"
    parts = [f"hot {what} {'in ' if what == 'loop' else ''}{ha['function']}"
             + (f" / {hb['function']}" if hb["function"] != ha["function"] else "")]
    if ha["sample_share"] is not None and hb["sample_share"] is not None:
        parts[0] += f" ({ha['sample_share']:.0%} / {hb['sample_share']:.0%} of samples)"
    if not hb.get("lined_up", True):
        parts.append(f"{a_name}'s {ha['function']} has no counterpart in {b_name} (inlined or renamed)")
    n_a, n_b = ha["instructions"], hb["instructions"]
    parts.append(f"{n_a} -> {n_b} instructions per iteration" + (f" ({n_b / n_a:.1f}x)" if n_a and n_a != n_b else ""))
    diffs = [f"{k} {ha['kinds'][k]} -> {hb['kinds'][k]}" for k in ha["kinds"] if ha["kinds"][k] != hb["kinds"][k]]
    if diffs:
        parts.append(", ".join(diffs))
    chains = [ha.get("chain"), hb.get("chain")]  # absent in an earlier version's explanation; None: x87
    if None not in chains and chains[0] != chains[1]:
        parts.append(f"loop-carried chain {_chain(chains[0])} -> {_chain(chains[1])} an iteration")
    if ha["alignment"] != hb["alignment"]:
        parts.append(f"alignment {ha['alignment']} vs {hb['alignment']}")
    pa, pb = a.get("profile") or {}, b.get("profile") or {}
    if pa.get("cycles_per_unit") and pb.get("cycles_per_unit"):
        parts.append(f"measured {pa['cycles_per_unit']:.3g} -> {pb['cycles_per_unit']:.3g} cycles/{pa['unit'].rstrip('s')}")
    return f"{b_name} against {a_name}: " + "; ".join(parts) + "."


# A change smaller than this in instructions, IPC or a loop's model is "about the same".
ALIKE = 0.02


def attach_causes(comparisons: list[Comparison], results: list[Result], codes: dict[str, dict],
                  caches: list[dict]) -> None:
    """Each decided (faster/slower) comparison's `why`, from its two results and the code
    the measure stage read of each build (`codes`, by workloads.code_key); and a
    `same` one's where the two builds' hot loops differ."""
    by_point = {(r.experiment, r.workload, r.variant, r.point): r for r in results}
    for c in comparisons:
        if c.verdict not in (Verdict.FASTER, Verdict.SLOWER, Verdict.SAME) or not c.ratio:
            continue
        base, var = (by_point.get((c.experiment, c.workload, v, c.point)) for v in (c.baseline, c.variant))
        if base is None or var is None:
            continue
        # the code read where this point's code runs (a why read at another point's core,
        # DES's table for its bitslice, once named the wrong loop)
        docs = [codes.get(workloads.code_key(c.experiment, c.workload, v, c.params)) or {}
                for v in (c.baseline, c.variant)]
        code = [d.get("hot_loop") for d in docs]
        floats = [d.get("float") for d in docs]
        counted = base.instructions_per_unit and var.instructions_per_unit
        if c.verdict == Verdict.SAME:
            # a reader expects a difference where the code differs (wider vectors, say):
            # then why it did not make one
            if all(code) and (differs := _loops(c, base, var, *code, {})):
                c.why = {"sentence": f"the same time although {differs}", "figures": {}}
        elif all(code) or all(floats) or counted:  # else nothing was read to say it from (an earlier version's run)
            c.why = cause(c, base, var, *code, caches, floats)


def cause(c: Comparison, base: Result, var: Result, hot_b: dict | None, hot_v: dict | None,
          caches: list[dict], floats: list[dict | None] = (None, None)) -> dict:
    """Why the variant's time differs from the baseline's at one point: {"sentence",
    "figures"}.  Read from measurements and the code, never from the verdict alone: the
    work (instructions per unit, counted) against its rate (per cycle), the hot loops
    side by side (vector width, instructions, loop-carried chain, llvm-mca's model), and
    where the working set lives (a build read without a profile: how it does its floating
    point, `floats`); it says when these do not settle it."""
    figures: dict = {"cycles_per_unit": [base.cycles_per_unit, var.cycles_per_unit]}
    said = [_measured(base, var), _work(base, var, figures), _events(c, base, var, figures)]
    said.append(_loops(c, base, var, hot_b, hot_v, figures))
    said.append(_floating_point(c, *floats, figures))
    settled = any(said[1:])
    said.append(_where(var, caches, figures))
    if not settled:
        said.append("neither the instructions nor the hot loop tell the builds apart: the evidence does not "
                    "settle it (where the code sits, or the machine)")
    return {"sentence": "; ".join(s for s in said if s), "figures": figures}


def _measured(base: Result, var: Result) -> str:
    """The measured figure the cause explains, baseline -> variant: cycles a unit, or
    where they were not measured (under qemu-user) the rate."""
    if base.cycles_per_unit and var.cycles_per_unit:
        return f"{base.cycles_per_unit:.3g} -> {var.cycles_per_unit:.3g} cycles {_a(var.unit)} measured"
    if base.median and var.median:
        return f"{base.median:.4g} -> {var.median:.4g} {var.rate_unit} measured"
    return ""


def _a(unit: str) -> str:
    """'bytes' -> 'a byte', 'elements' -> 'an element'."""
    one = unit.rstrip("s")
    return f"{'an' if one[:1] in 'aeiou' else 'a'} {one}"


def _work(base: Result, var: Result, figures: dict) -> str:
    """The counted work and the rate it ran at, and which of the two moved the time."""
    ib, iv = base.instructions_per_unit, var.instructions_per_unit
    if not ib or not iv:
        return ""
    figures["instructions_per_unit"] = [ib, iv]
    moved = f"{abs(iv / ib - 1):.0%} {'fewer' if iv < ib else 'more'} instructions {_a(var.unit)} ({ib:.4g} -> {iv:.4g})"
    if not base.cycles_per_unit or not var.cycles_per_unit:
        return moved
    ipc_b, ipc_v = ib / base.cycles_per_unit, iv / var.cycles_per_unit
    figures["ipc"] = [ipc_b, ipc_v]
    rate = f"{ipc_b:.2f} -> {ipc_v:.2f} instructions a cycle"
    if abs(math.log(iv / ib)) >= abs(math.log(ipc_v / ipc_b)):
        return moved + (f" at about the same {rate}" if abs(ipc_v / ipc_b - 1) < ALIKE else f", {rate}")
    return f"{rate}, with {'the same work' if abs(iv / ib - 1) < ALIKE else moved}: the rate moved, not the work"


def _events(c: Comparison, base: Result, var: Result, figures: dict) -> str:
    """The named counters that moved, measured in the same rounds (--events): each one
    significantly larger or smaller, with its interval; top-down level 1 of both builds
    where it was counted."""
    moved = {n: e for n, e in c.events.items() if e["verdict"] in ("larger", "smaller")}
    if moved:
        figures["events"] = {n: {"ratio": e["ratio"], "ci": e["ci"]} for n, e in moved.items()}
    said = [f"{abs(e['ratio'] - 1):.1%} {'more' if e['ratio'] > 1 else 'fewer'} {n} {_a(var.unit)} "
            f"[{100 * (e['ci'][0] - 1):+.1f}, {100 * (e['ci'][1] - 1):+.1f}%]" for n, e in moved.items()]
    if base.topdown and var.topdown:
        figures["topdown"] = [base.topdown, var.topdown]
        said.append("top-down " + ", ".join(f"{k} {100 * base.topdown[k]:.0f}% -> {100 * var.topdown[k]:.0f}%"
                                            for k in base.topdown))
    return ", ".join(said)


def _loops(c: Comparison, base: Result, var: Result, hb: dict | None, hv: dict | None, figures: dict) -> str:
    """The two hot loops side by side, where they differ in what bounds an iteration."""
    if not hb or not hv:
        return ""
    a, b = c.baseline, c.variant
    parts = []
    if hb.get("listing") == hv.get("listing"):
        return ""
    if (wb := _width(hb)) != (wv := _width(hv)):
        parts.append(f"{b}'s hot loop uses {wv} against {a}'s {wb}")
    figures["loop_instructions"] = [hb["instructions"], hv["instructions"]]
    chains = [hb.get("chain"), hv.get("chain")]  # None: not followed (x87)
    if None not in chains and chains[0] != chains[1]:
        figures["chain"] = chains
        parts.append(f"its loop-carried chain: {_chain(chains[1])} an iteration, against {_chain(chains[0])}")
    mb, mv = ((h.get("mca") or {}).get("cycles_per_iteration") for h in (hb, hv))
    if mb and mv and not hb.get("x87") and not hv.get("x87"):  # llvm-mca's x87 model is not one to quote
        figures["mca_cycles_per_iteration"] = [mb, mv]
        agrees, modelled = "", None
        if base.instructions_per_unit and var.instructions_per_unit:
            # per unit: iterations a unit are the counted instructions a unit over the
            # loop's (the hot loop carrying the work), so unrolled and vector loops compare
            modelled = (mv * var.instructions_per_unit / hv["instructions"]) / \
                (mb * base.instructions_per_unit / hb["instructions"])
        elif hb["instructions"] == hv["instructions"]:  # uncounted: alike loops, taken as alike work an iteration
            modelled = mv / mb
        if modelled is not None and base.cycles_per_unit and var.cycles_per_unit:
            measured = var.cycles_per_unit / base.cycles_per_unit
            figures["mca_ratio_per_unit"] = modelled
            agrees = (" (the model sees no difference: look beyond the loop's schedule)" if abs(modelled - 1) < ALIKE
                      else " (as measured)" if (modelled < 1) == (measured < 1) else " (the model expects the opposite)")
        elif modelled is None:  # iterations of unlike loops: their work a unit is unknown without a count
            agrees = (f" (their iterations do unlike work: with instructions counted, --instructions, the model "
                      f"is read per {base.unit.rstrip('s') or 'unit'})")
        parts.append(f"llvm-mca models {mb:.3g} -> {mv:.3g} cycles an iteration of {hb['instructions']} -> "
                     f"{hv['instructions']} instructions{agrees}")
    return ", ".join(parts)


def _floating_point(c: Comparison, fb: dict | None, fv: dict | None, figures: dict) -> str:
    """How each build does its floating point, where they differ: library calls (soft
    float) against instructions (VFP, AArch64)."""
    if not fb or not fv or fb == fv:
        return ""
    figures["float"] = [fb, fv]

    def how(f: dict) -> str:
        if f["soft_float_calls"]:
            return "in library calls (" + ", ".join(f["soft_float_calls"]) + ")"
        return ("in instructions (" + ", ".join(f["fp_instructions"]) + ")") if f["fp_instructions"] else "in no way read"
    return f"{c.variant} does its floating point {how(fv)}, {c.baseline} {how(fb)}"


def _where(r: Result, caches: list[dict], figures: dict) -> str:
    """Which cache level the working set fits in, beyond the first: there the level's
    bandwidth or latency, not the code, may set the pace."""
    ws = r.notes.get("working_set_bytes")
    levels = data_caches(caches)
    if not ws or not levels:
        return ""
    fits = next((lv for lv in levels if ws <= lv["size_bytes"]), None)
    figures["working_set_bytes"] = ws
    if fits is levels[0]:
        return ""
    return f"working set {human_bytes(ws)}: " + (f"in {cache_name(fits)}" if fits else "beyond the last cache, in memory")


def _width(hot: dict) -> str:
    if hot.get("x87"):
        return "x87 stack code"
    return f"{hot['vector_bits']}-bit vectors" if hot.get("vector_bits") else "scalar code"


def _chain(chain: list[str]) -> str:
    if not chain:
        return "none"
    names = sorted(set(chain))
    return f"{len(chain)} dependent {'/'.join(names)}"
