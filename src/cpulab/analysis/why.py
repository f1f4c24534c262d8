"""Why one build is faster, in words, from the evidence the measure stage stored: the two
builds' code side by side (measure/explain/compare.py), their hot regions, instruction mixes
and alignments, and the measured cycles per unit."""
from __future__ import annotations


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
    if ha["alignment"] != hb["alignment"]:
        parts.append(f"alignment {ha['alignment']} vs {hb['alignment']}")
    pa, pb = a.get("profile") or {}, b.get("profile") or {}
    if pa.get("cycles_per_unit") and pb.get("cycles_per_unit"):
        parts.append(f"measured {pa['cycles_per_unit']:.3g} -> {pb['cycles_per_unit']:.3g} cycles/{pa['unit'].rstrip('s')}")
    return f"{b_name} against {a_name}: " + "; ".join(parts) + "."
