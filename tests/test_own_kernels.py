"""Your own kernel, as a user meets it: a [kernel.NAME] table in a plan of their own (C and
C++, library sources, include directories), `cpulab run -k FILE`, `cpulab new kernel`,
the automatic check where k_verify is left out, and one-line answers to bad input."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from cpulab import workloads
from cpulab.compile import artifacts, placement
from cpulab.plan import plan as plans

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "own-kernel" / "find.toml"
FAST = ("--processes", "2", "--budget", "0", "--samples", "5", "--min-sample-time", "0.0005")

KERNEL_C = """#include "cpulab.h"
#include "scale.h"
#include <stdlib.h>
const char k_unit[] = "elements";
struct ctx { uint32_t *a; size_t n; };
void *k_setup(void)
{
    struct ctx *c = malloc(sizeof *c);
    c->n = (size_t)k_param_int("n", 64);
    c->a = k_alloc(c->n * 4);
    for (size_t i = 0; i < c->n; i++) c->a[i] = (uint32_t)i;
    return c;
}
uint64_t k_run(void *p, uint64_t reps)
{
    struct ctx *c = p; uint64_t h = 0;
    for (uint64_t r = 0; r < reps; r++) h = k_mix(h, scaled_sum(c->a, c->n));
#ifdef WRONG
    h ^= 1;
#endif
#ifdef CRASH
    *(volatile int *)0 = 1;
#endif
    return h;
}
double k_work(const void *p, uint64_t reps) { return (double)reps * ((const struct ctx *)p)->n; }
"""
LIBRARY_C = """#include "scale.h"
uint64_t scaled_sum(const uint32_t *a, size_t n)
{
    uint64_t s = 0;
    for (size_t i = 0; i < n; i++) s += (uint64_t)a[i] * SCALE;
    return s;
}
"""
PLAN = """
[kernel.scaled]
source = "kernel.c"
library = ["lib/scale.c"]
include = ["inc"]
unit = "elements"
[kernel.scaled.params]
n = {{ default = 64, min = 1, max = 1000000 }}

[variants.wrong]
cflags = ["-O2", "-DWRONG"]
[variants.crash]
cflags = ["-O2", "-DCRASH"]

[[experiment]]
name = "own"
workloads = ["scaled"]
variants = {variants}
params = {{ scaled = {{ n = "64..256" }} }}
"""


def write_kernel(folder: Path, variants=("O2", "O1"), scale: int = 3) -> Path:
    """A user's kernel outside the package: kernel.c calling lib/scale.c, whose header
    sits in inc/, and a plan beside them."""
    (folder / "lib").mkdir(parents=True, exist_ok=True)
    (folder / "inc").mkdir(exist_ok=True)
    (folder / "kernel.c").write_text(KERNEL_C)
    (folder / "lib" / "scale.c").write_text(LIBRARY_C)
    (folder / "inc" / "scale.h").write_text(f"#include <stdint.h>\n#include <stddef.h>\n#define SCALE {scale}\n"
                                            "uint64_t scaled_sum(const uint32_t *a, size_t n);\n")
    plan = folder / "plan.toml"
    plan.write_text(PLAN.format(variants=json.dumps(list(variants))))
    return plan


@pytest.fixture
def registry(monkeypatch):
    """A registry of this test's own: the kernels its plans register leave no trace."""
    table = dict(workloads.registry())
    monkeypatch.setattr(workloads, "registry", lambda: table)
    return table


def results_of(p) -> dict[str, dict]:
    assert p.returncode in (0, 1), p.stdout + p.stderr
    return {f"{r['variant']} {r['params']}": r for r in json.loads(p.stdout)["results"]}


def test_a_kernel_table_is_a_workload_swept_and_checked_like_a_built_in(tmp_path, registry):
    plan = plans.load(str(write_kernel(tmp_path)))
    w = workloads.get("scaled")
    assert w.source == tmp_path / "kernel.c" and w.library_sources == (str(tmp_path / "lib" / "scale.c"),)
    assert plan.experiments[0].params["scaled"] == {"n": ["64", "128", "256"]}
    assert [p["n"] for p in w.grid("quick")] == ["64"]
    assert plans.from_stored(plan.record(seed=1), "run 1").kernels == plan.kernels  # resumed alike


def test_a_kernel_choice_can_be_compiled(tmp_path, registry):
    """A choice declared `compiled` is held by a build only where its experiment runs it:
    the build's flags define each choice run (Workload.held), as rc5-72's core."""
    plan = write_kernel(tmp_path)
    plan.write_text(plan.read_text().replace(
        "n = { default", "how = { choices = ['bytes', 'words'], default = 'bytes', compiled = true }\nn = { default"))
    plans.load(str(plan))
    w = workloads.get("scaled")
    assert w.params["how"].compiled and not w.params["n"].compiled
    assert w.held([{"how": "words"}]) == ("-DCPULAB_HOW_WORDS",) and w.held(w.grid("quick")) == ("-DCPULAB_HOW_BYTES",)


@pytest.mark.parametrize("edit, message", [
    (lambda t: t.replace('unit = "elements"', 'unit = "widgets"'), "kernel.scaled.unit: expected one of"),
    (lambda t: t.replace('source = "kernel.c"', 'source = "nowhere.c"'), "kernel.scaled.source: "),
    (lambda t: t.replace('include = ["inc"]', 'include = ["none"]'), "is not a directory"),
    (lambda t: t.replace('library = ["lib/scale.c"]', 'library = ["inc/scale.h"]'), "is not a C or C++ source"),
    (lambda t: t.replace('unit = "elements"', 'unit = "elements"\nflags = 1'), "unknown key 'flags'"),
    (lambda t: t.replace("max = 1000000", "max = 100"), "params.scaled.n: '256' is out of range 1..100"),
    (lambda t: t.replace("default = 64", 'default = "lots"'), "params.n: 'lots' is not a decimal integer"),
    (lambda t: t.replace("default = 64", "default = 64, compiled = true"), "params.n: only a choice parameter is compiled"),
    (lambda t: t.replace('n = "64..256"', 'm = "1"'), "workload 'scaled' has no parameter 'm' (it has: n)"),
    (lambda t: t.replace("[kernel.scaled]", "[kernel.sha256]").replace("kernel.scaled.params", "kernel.sha256.params"),
     "kernel.sha256: a built-in workload has this name"),
])
def test_a_bad_kernel_table_is_one_line_naming_the_field(tmp_path, registry, edit, message, cli):
    plan = write_kernel(tmp_path)
    plan.write_text(edit(plan.read_text()))
    with pytest.raises(plans.PlanError) as e:
        plans.load(str(plan))
    assert message in str(e.value) and "\n" not in str(e.value)
    p = cli("run", "--dry-run", str(plan))
    assert p.returncode == 2 and message in p.stderr and len(p.stderr.strip().splitlines()) == 1


def test_a_header_edited_is_a_new_build(tmp_path, registry):
    """Every header the compiler reads enters the build's hash (-MM), not only the sources."""
    plans.load(str(write_kernel(tmp_path)))
    w, v = workloads.get("scaled"), plans.toolchain.BUILTIN["O2"]
    first = artifacts.build_artifact(w, v, cache_dir=tmp_path / "cache")
    assert artifacts.build_artifact(w, v, cache_dir=tmp_path / "cache").hash == first.hash
    write_kernel(tmp_path, scale=5)  # inc/scale.h only
    assert artifacts.build_artifact(w, v, cache_dir=tmp_path / "cache").code_hash != first.code_hash


def test_a_run_checks_automatically_and_a_wrong_or_crashing_variant_fails_alone(tmp_path, cli):
    """No k_verify: each variant's one-call checksum must equal the baseline's.  -DWRONG
    changes it (verify-failed, nothing timed kept); -DCRASH faults; O1 agrees and is
    measured, its notes saying how it was checked."""
    plan = write_kernel(tmp_path, ("O2", "O1", "wrong", "crash"))
    results = results_of(cli("run", str(plan), *FAST, "--json"))
    assert len(results) == 12
    for key, r in results.items():
        if key.startswith(("O2 ", "O1 ")):
            assert r["status"] == "ok" and r["notes"]["check"].startswith("automatic"), r
        elif key.startswith("wrong "):
            assert r["status"] == "verify-failed" and "automatic check" in r["error"], r
            assert not r.get("samples")
        else:
            assert r["status"] not in ("ok", "verify-failed"), r
    assert "the baseline's" in results["O1 {'n': '64'}"]["notes"]["check"]


CXX_KERNEL = """#include "cpulab.h"
#include <vector>
#include "lib.hpp"
namespace { struct Ctx { std::vector<int> v; }; }
extern "C" {
const char k_unit[] = "elements";
void *k_setup(void) { auto *c = new Ctx; c->v.resize(k_param_int("n", 100)); return c; }
int k_verify(void *p) { return total(static_cast<Ctx *>(p)->v) == 0 ? 0 : 1; }
uint64_t k_run(void *p, uint64_t reps)
{
    uint64_t h = 0;
    for (uint64_t r = 0; r < reps; r++) h = k_mix(h, (uint64_t)total(static_cast<Ctx *>(p)->v));
    return h;
}
double k_work(const void *p, uint64_t reps) { return (double)reps * static_cast<const Ctx *>(p)->v.size(); }
}
"""


def test_a_cxx_kernel_is_built_with_the_cxx_driver_and_placed_whole(tmp_path, registry):
    """C++ with a library source of its own: compiled and linked by g++, and every
    placement orders the user's functions anew (a template's COMDAT section, a library
    function) with their bytes unchanged."""
    if not shutil.which("g++"):
        pytest.skip("install g++ (a C++ kernel builds with the variant's C++ driver)")
    (tmp_path / "lib.hpp").write_text("#include <vector>\n#include <numeric>\nint total(const std::vector<int> &v);\n"
                                      "template <class T> T twice(T x) { return x + x; }\n")
    (tmp_path / "lib.cpp").write_text('#include "lib.hpp"\nint total(const std::vector<int> &v)\n'
                                      "{ return twice(std::accumulate(v.begin(), v.end(), 0)); }\n")
    (tmp_path / "k.cpp").write_text(CXX_KERNEL)
    (tmp_path / "p.toml").write_text('[kernel.cxx]\nsource = "k.cpp"\nlibrary = ["lib.cpp"]\nunit = "elements"\n'
                                     '[[experiment]]\nname = "e"\nworkloads = ["cxx"]\nvariants = ["O2"]\n')
    plans.load(str(tmp_path / "p.toml"))
    art = artifacts.build_artifact(workloads.get("cxx"), plans.toolchain.BUILTIN["O2"])
    assert art.commands[-1][0] == "g++" and [c[0] for c in art.commands[1:-1]] == ["g++", "g++"]
    try:
        seen = placement.inspect(art, 4)
    finally:
        artifacts.remove_placements()
    names = set(seen.orders[0])
    assert {"k_run", "_Z5totalRKSt6vectorIiSaIiEE"} <= names and any(n.startswith("_ZN") for n in names)
    assert len(set(seen.orders)) > 1 and seen.differing == ()


def test_a_missing_function_is_one_line_naming_it(tmp_path, cli):
    (tmp_path / "half.c").write_text('#include "cpulab.h"\nconst char k_unit[] = "bytes";\n'
                                     "void *k_setup(void) { return (void *)1; }\n"
                                     "uint64_t k_run(void *c, uint64_t r) { return r; }\n")
    r = results_of(cli("run", "-k", str(tmp_path / "half.c"), "-v", "O2", *FAST, "--json"))["O2 {}"]
    assert r["status"] == "build-failed" and r["error"].startswith("the kernel defines no k_work"), r


def test_a_file_without_a_plan_runs_and_parameters_need_a_table(tmp_path, cli):
    write_kernel(tmp_path)
    (tmp_path / "solo.c").write_text(KERNEL_C.replace('#include "scale.h"', "").replace(
        "scaled_sum(c->a, c->n)", "c->a[c->n - 1]"))
    r = results_of(cli("run", "-k", str(tmp_path / "solo.c"), "-v", "O2", *FAST, "--json"))["O2 {}"]
    assert r["status"] == "ok" and r["workload"] == "solo" and r["unit"] == "elements"
    p = cli("run", "-k", str(tmp_path / "solo.c"), "-p", "n=5", "--dry-run")
    assert p.returncode == 2 and "declare them in a plan's [kernel] table" in p.stderr
    p = cli("run", "-k", str(tmp_path / "missing.c"), "--dry-run")
    assert p.returncode == 2 and "missing.c" in p.stderr


def test_new_kernel_writes_files_that_run_as_they_are(tmp_path, cli):
    p = cli("new", "kernel", "mine", "--dir", str(tmp_path))
    assert p.returncode == 0, p.stderr
    assert {f.name for f in tmp_path.iterdir()} >= {"mine.c", "mine.toml", "compile_flags.txt"}
    again = cli("new", "kernel", "mine", "--dir", str(tmp_path))
    assert again.returncode == 2 and "exists; nothing written" in again.stderr
    results = results_of(cli("run", str(tmp_path / "mine.toml"), *FAST, "--json"))
    assert len(results) == 4 and all(r["status"] == "ok" for r in results.values())
    assert cli("new", "kernel", "no-t valid").returncode == 2


@pytest.mark.timing
def test_the_example_words_beat_bytes(cli):
    """examples/own-kernel: eight bytes a step against one (about 5x on the hosts tried);
    a wide margin: at least 1.5x, and both builds answer alike (the automatic check)."""
    p = cli("run", str(EXAMPLE), "--processes", "3", "--budget", "0", "--samples", "5", "--json")
    results = results_of(p)
    assert all(r["status"] == "ok" and "check" in r["notes"] for r in results.values())
    comparisons = json.loads(p.stdout)["comparisons"]
    # a side whose every sample the host took the CPU from (steal) has no ratio, and says so
    measured = [c for c in comparisons if c["ratio"] is not None]
    assert all(c["verdict"] in ("no baseline", "inconclusive") for c in comparisons if c["ratio"] is None)
    assert len(comparisons) == 3 and measured and all(c["ratio"] > 1.5 for c in measured), comparisons


def test_ci_builds_a_kernel_in_git_at_both_commits(tmp_path, cli):
    """A kernel whose files are in a git work tree: `cpulab ci BASE..HEAD` builds each
    commit's files (the work tree untouched) and calls a doubled library loop a regression."""
    import subprocess
    plan = write_kernel(tmp_path / "repo", ("O2",))
    # one point, where a 64-element loop's placements moved its rate by -36% to +28%
    plan.write_text(plan.read_text().replace('n = "64..256"', 'n = "4096"'))
    git = ["git", "-C", str(tmp_path / "repo"), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "good"], check=True)
    # the same answer (the automatic check compares head's with base's) for twice the work
    slow = LIBRARY_C.replace("for (size_t i = 0; i < n; i++)", "for (int pass = 0; pass < 2; pass++)\n"
                             "    for (size_t i = 0; i < n; i++)").replace("return s;", "return s / 2;")
    (tmp_path / "repo" / "lib" / "scale.c").write_text(slow)
    subprocess.run([*git, "commit", "-qam", "twice the work"], check=True)
    (tmp_path / "repo" / "lib" / "scale.c").write_text(LIBRARY_C)  # the work tree is not what ci builds
    # A budget for rounds past the first look: beside the other worker, the first look once
    # left all three points unclear (-40% to -50%, an interval reaching +3.8%)
    p = cli("ci", "HEAD~1..HEAD", "--plan", str(plan), "--threshold", "0.2", "--budget", "20")
    assert p.returncode == 1 and "regression" in p.stdout, p.stdout + p.stderr


def test_explain_reads_a_kernel_of_a_plan_and_its_library_code(cli):
    """`cpulab explain A B --plan P -w NAME`: the plan's kernel and variants by name; the
    code read is the user's, its library function included."""
    p = cli("explain", "O2", "words", "--plan", str(EXAMPLE), "-w", "find", "-p", "size=4K", "--no-profile-code",
            "--json")
    assert p.returncode == 0, p.stderr
    assert "first_zero" in p.stdout and "k_run" in p.stdout
    p = cli("explain", "O2", "O3", "-w", "find", "-p", "size=4K")  # without its plan: unknown
    assert p.returncode == 2 and "find" in p.stderr
