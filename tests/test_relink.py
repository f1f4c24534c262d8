"""A program of yours relinked into a layout of its own every round (compile/relink.py):
its links recorded by the {cc} wrapper, the same code in every layout, a reason wherever
it keeps one layout, and a plan's rounds each running a layout never run before."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from conftest import program_source
from cpulab.compile import artifacts, placement
from cpulab.compile.programs import build_program
from cpulab.compile.relink import Relink
from cpulab.measure.schedule import runner
from cpulab.plan import plan as plans
from cpulab.plan import toolchain
from cpulab.store.db import Store

MAIN_C = r"""
#include <stdio.h>
#include <stdlib.h>
unsigned long work(unsigned long n);
static const char greeting[] = "sum";
int main(int argc, char **argv)
{
    unsigned long n = argc > 1 ? strtoul(argv[1], 0, 10) : 1000;
    printf("%s %lu\n", greeting, work(n));
    return 0;
}
"""
WORK_C = r"""
static unsigned long table[64];
static unsigned long step(unsigned long x) { return x * 2654435761u + 1; }
unsigned long helper(unsigned long x) { return step(x) ^ (x >> 3); }
unsigned long work(unsigned long n)
{
    unsigned long h = 0;
    for (unsigned long i = 0; i < n; i++) { table[i & 63] += i; h = helper(h + table[i & 63]); }
    return h;
}
"""
# Compiled to objects, then linked: the way most builds go.
MAKEFILE = ("prog: main.o work.o\n\t$(CC) $(LDFLAGS) -o prog main.o work.o\n"
            "%.o: %.c\n\t$(CC) $(CFLAGS) -c $< -o $@\n")


@pytest.fixture
def source(tmp_path):
    return program_source(tmp_path, {"main.c": MAIN_C, "work.c": WORK_C, "Makefile": MAKEFILE})


def program(src: Path, build: str = "make CC={cc} CFLAGS='{cflags}' LDFLAGS='{ldflags}'", run: str = "{build}/prog 5000"):
    return plans.from_dict({"experiment": [{"name": "p", "workloads": ["prog"], "variants": ["O2"]}],
                            "program": {"prog": {"source": str(src), "build": [build], "run": run,
                                                 "check": {"stdout_regex": "^sum [0-9]+$"}}}}, "t.toml")


MAKE = "make CC={cc} CFLAGS='{cflags}' LDFLAGS='{ldflags}'"
# Compiled and linked in one step: cpulab compiles the sources apart to relink their objects
ONE_STEP = "{cc} {cflags} -o prog main.c work.c"


@pytest.mark.parametrize("build", [MAKE, ONE_STEP])
def test_a_program_runs_in_layouts_of_its_own_with_the_same_code(source, tmp_path, build):
    b = build_program(program(source, build).programs["prog"], toolchain.BUILTIN["O2"], cache_dir=tmp_path / "cache")
    assert b.link is not None and b.one_layout == "", b.one_layout
    relink = Relink(b.exe, b.hash, b.link)
    try:
        seen = placement.inspect_program(relink, list(range(8)))
        outputs = {subprocess.run([relink.place(i), "5000"], capture_output=True, text=True, check=True).stdout
                   for i in range(8)}
    finally:
        artifacts.remove_placements()
    assert {"main", "work", "helper"} <= set(seen.orders[0])
    assert len(set(seen.orders)) > 1 and len(set(seen.offsets)) > 1 and seen.differing == ()
    assert outputs == {subprocess.run([b.exe, "5000"], capture_output=True, text=True).stdout}
    assert not list(Path(b.exe).parent.glob("prog.layout*"))  # removed with the run's placements


@pytest.mark.parametrize("build, run, variant, why", [
    ("{cc} {cflags} -o prog -x c main.c work.c", "{build}/prog 5000", "O2", "could not be done apart"),
    ("{cc} {cflags} -fprofile-use -Wno-missing-profile -o prog main.c work.c", "{build}/prog 5000", "O2",
     "could not be done apart"),  # compiled apart, a profile would be looked for under another name
    (MAKE, "{build}/prog 5000", "lto", "link-time optimised"),
    (MAKE + " && printf '#!/bin/sh\\nexec ./prog \"$@\"\\n' > run.sh "
     "&& chmod +x run.sh", "{build}/run.sh 5000", "O2", "no link of the build made it"),
])
def test_a_program_that_cannot_be_relinked_keeps_one_layout_and_says_why(source, tmp_path, build, run, variant, why):
    b = build_program(program(source, build, run).programs["prog"], toolchain.BUILTIN[variant],
                      cache_dir=tmp_path / "cache")
    assert b.link is None and why in b.one_layout, b.one_layout


def test_a_plan_runs_each_round_of_a_program_in_a_layout_never_run_before(source, tmp_path):
    p = program(source).given(processes=5, budget=0.0, timeout=10.0, seed=3)
    store = Store(tmp_path / "s.sqlite")
    run_id = runner.run_plan(p, store)
    (r,) = store.results(run_id)
    layouts = [s.placement for s in store.samples(r.id)]
    assert r.status == "ok" and "one_layout" not in r.notes
    assert len(layouts) == 5 and len(set(layouts)) == 5 and None not in layouts
