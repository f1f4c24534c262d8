#!/usr/bin/env python3
"""The RC5 case of 2026-11-26 (issue 39, item 3): the portable RC5 core compiled to the
same instructions before and after commit f5d6f4a (only label names differ), yet gcc's
O2 build read 286 against 299-301 cycles a key on a Zen 4, under every function and loop
alignment: the layout of the file around the function had moved.  Both sources are built
here as one workload (a file that includes the old or the new source, -DRC5_OLD picks),
measured as `cpulab run` measures (every round a placement of its own), and what cpulab
says of them is printed: the ratio, its interval and verdict, and each build's placement
band (how much of a 4.5% move the placements span).

Usage: python bench/rc5_layout.py [--old REV] [--json]   (needs git and this checkout's history)
"""
from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from cpulab import analysis, workloads
from cpulab.measure.schedule import runner
from cpulab.plan import plan as plans
from cpulab.plan.toolchain import Variant
from cpulab.store.db import Store

ROOT = Path(__file__).resolve().parents[1]
FILES = ("rc5_72.c", "rc5_body.h")


def sources(old: str, into: Path) -> Path:
    """old/ and new/ copies of the RC5 sources, and the file that includes one of them."""
    digest = hashlib.sha256()
    for tree, rev in (("old", old), ("new", None)):
        (into / tree).mkdir()
        for name in FILES:
            path = f"src/cpulab/kernels/{name}"
            text = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{path}"], capture_output=True, text=True,
                                  check=True).stdout if rev else (workloads.KERNEL_DIR / name).read_text()
            (into / tree / name).write_text(text)
            digest.update(text.encode())
    pair = into / "rc5_pair.c"
    pair.write_text(f"/* {digest.hexdigest()} */\n#ifdef RC5_OLD\n#include \"old/rc5_72.c\"\n#else\n"
                    "#include \"new/rc5_72.c\"\n#endif\n")
    return pair


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--old", default="f741f6e", help="the revision of the old source (default f741f6e)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        pair = sources(a.old, Path(d))
        rc5 = workloads.get("rc5-72")
        workloads.registry()["rc5-pair"] = workloads.Workload(
            name="rc5-pair", kernel=str(pair), unit="keys", params=rc5.params, description="RC5-72, old or new source",
            extra_sources=tuple(str(Path(d) / t / n) for t in ("old", "new") for n in FILES))
        variants = {"new": Variant("new", cflags=("-O2",)), "old": Variant("old", cflags=("-O2", "-DRC5_OLD"))}
        plan = plans.validate(plans.Plan("rc5-layout", [plans.Experiment(
            "rc5-layout", ["rc5-pair"], ["new", "old"], "new", params={"rc5-pair": {"core": ["portable"]}})],
            custom_variants=variants))
        store = Store(Path(d) / "rc5.sqlite")
        run_id = runner.run_plan(plan.given(seed=1), store)
        s = analysis.summarise(store, run_id)
    [c] = s.comparisons
    doc = {"host": s.machine.get("cpu_model"), "core_per_tsc": s.timing.get("core_per_tsc"),
           "ratio": c.ratio, "ci": c.ci, "verdict": str(c.verdict), "rounds": c.rounds, "held": c.held,
           "builds": {r.variant: {"cycles_per_key": r.cycles_per_unit, "placements": r.placements,
                                  "placement_band": r.placement_band} for r in s.results}}
    print(json.dumps(doc, indent=1) if a.json else "\n".join(f"{k}: {v}" for k, v in doc.items()))


if __name__ == "__main__":
    sys.exit(main())
