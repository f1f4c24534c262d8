#!/usr/bin/env python3
"""A/A test of the method: one SHA-256 artifact measured as K pairs of "variants".

Every comparison should say `same`; the share that does not is the false-`different`
rate, to set against the advertised 5%.  Usage: python bench/aa_rate.py [K] [RUNS]
"""
import sys
import tempfile
from pathlib import Path

from cpulab import analysis, plan as plans, run as runner
from cpulab.store import Store
from cpulab.toolchain import Variant

K = int(sys.argv[1]) if len(sys.argv) > 1 else 40
RUNS = int(sys.argv[2]) if len(sys.argv) > 2 else 10

exps = [plans.Experiment(f"aa{i}", ["sha256"], ["O2", "twin"], "O2") for i in range(K)]
plan = plans.validate(plans.Plan("aa", exps, runs=RUNS, measure_identical=True,
                                 custom_variants={"twin": Variant("twin", cflags=("-O2",))}))
with tempfile.TemporaryDirectory() as d:
    store = Store(Path(d) / "aa.sqlite")
    run_id = runner.run_plan(plan, store)
    comps = analysis.summarise(store, run_id).comparisons
different = [c for c in comps if c.verdict != "same"]
ratios = sorted(c.ratio for c in comps)
print(f"{len(comps)} A/A comparisons, {RUNS} processes a side at the first look (budget mode), {plan.samples} samples each")
print(f"false 'different': {len(different)} = {100 * len(different) / len(comps):.1f}%")
print(f"raw p < 0.05 (before the 1% floor): {sum(c.p_raw < 0.05 for c in comps)}")
print(f"ratio range {ratios[0]:.4f} .. {ratios[-1]:.4f}, median {ratios[len(ratios) // 2]:.4f}")
