#!/usr/bin/env python3
"""Replay the memory-latency steps of stored runs with the working tree's analysis: each
step's edge, cause, matches and the last cache's share, one line a step.

For checking a change to analysis/cache_levels.py or analysis/steps.py against every curve
measured so far: stores (a cpulab store, ../shared/data/*.sqlite, a fresh clone's
data/cpulab/cpulab.sqlite) and the JSON fixtures of tests/fixtures/memlat.  Nothing is
measured; a store is only read.

Usage: python bench/memlat_steps.py FILE... [--words]
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

from cpulab.analysis.cache_levels import detect_levels
from cpulab.analysis.memory import memlat_curves, memlat_steps
from cpulab.analysis.steps import describe_steps, explain_curves
from cpulab.analysis.summary import summarise
from cpulab.params import human_bytes
from cpulab.store.db import Store


def store_steps(path: Path):
    """(label, steps document) for each memlat experiment of each run in the store."""
    store = Store(path)
    for run in store.runs():
        s = summarise(store, run.id)
        caches = s.machine.get("caches") or []
        by_exp = defaultdict(list)
        for r in s.results:
            by_exp[r.experiment].append(r)
        for exp, results in sorted(by_exp.items()):
            if curves := memlat_curves(results, caches):
                yield f"{path.name} run {run.id} {exp}", memlat_steps(curves, caches, s.machine)


def fixture_steps(path: Path):
    """(label, steps document) of a fixture: its curves' points as (size, ns, cycles)."""
    d = json.loads(path.read_text())
    curves = [{"series": c["series"], "points": [], "levels": detect_levels(c["points"], d["caches"])}
              for c in d["curves"]]
    yield path.name, explain_curves(curves, d["caches"], d["tlbs"]["tlbs"])


def step_line(s: dict) -> str:
    share = f" share {human_bytes(s['share_bytes'])}" if s.get("share_bytes") else ""
    return f"  {human_bytes(s['edge_bytes']):>9}  {s['cause']:<34} {', '.join(s['matches'])}{share}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument("--words", action="store_true", help="also the steps in the report's words")
    a = ap.parse_args()
    for path in a.files:
        if not path.is_file():
            sys.exit(f"memlat_steps: no such file: {path}")
        for label, doc in (fixture_steps if path.suffix == ".json" else store_steps)(path):
            print(label)
            for s in (doc or {}).get("steps", []):
                print(step_line(s))
            if a.words and doc:
                print("  " + describe_steps(doc["steps"]).replace("\n", "\n  "))


if __name__ == "__main__":
    main()
