"""The second witness: instructions per unit counted exactly (under valgrind, or stepped on
the core), of the timed work alone, and the words where it and the time disagree."""
from __future__ import annotations

import hashlib
import json
import platform
import shutil
import subprocess
import time
from collections import Counter

import pytest

from conftest import TEST_KERNELS
from cpulab import workloads
from cpulab.compile import artifacts
from cpulab.estimates import count_verdicts, witness_words
from cpulab.measure import instructions, stepmap
from cpulab.measure.explain.largest import executed_by_function
from cpulab.report.analysis_views import explain_tables
from cpulab.model import Comparison, Verdict
from cpulab.plan.toolchain import Variant
from cpulab.spec.policy import DecisionPolicy

needs_valgrind = pytest.mark.skipif(shutil.which("valgrind") is None,
                                    reason="valgrind is not installed (Debian package valgrind)")


@pytest.fixture(scope="module")
def three_per_unit():
    return artifacts.build_executable(TEST_KERNELS / "three_per_unit.c", Variant("t", cflags=("-O2",))).path


@pytest.fixture
def own_counts(monkeypatch, tmp_path):
    """count() keeps its counts in this test's folder: the other worker's tests count the
    same executable, perhaps by another counter, and keep theirs beside it."""
    def kept(executable, params, timed_notes, caches):
        return tmp_path / "counts" / hashlib.sha256(repr((params, timed_notes, caches)).encode()).hexdigest()
    monkeypatch.setattr(instructions, "kept_count", kept)


@pytest.fixture
def under_valgrind(monkeypatch, own_counts):
    """count() without stepping: valgrind's own count."""
    monkeypatch.setattr(instructions, "step_unavailable_reason", lambda: "not in this test")


@needs_valgrind
def test_the_count_is_the_timed_work_alone(three_per_unit, under_valgrind):
    """A loop of exactly three instructions per unit: the count is 3 per unit plus the
    C loop's few per 4096-trip rep, whatever the 100,000-step set-up and the harness
    execute around it; and it repeats to 0.05% (two counts once differed by 0.014%: each
    is the difference of two whole processes, which wobble by a few dozen instructions)."""
    exe = three_per_unit
    c = instructions.count(exe, {}, {"lanes": 1}, tsc_hz=2e9)
    first, functions = c.per_unit, c.functions
    assert 3.0 <= first <= 3.0 + 20 / 4096
    assert instructions.count(exe, {}, tsc_hz=2e9).per_unit == pytest.approx(first, rel=5e-4)
    # per function: the loop's function holds the work; the harness's do not appear
    assert functions[0][1] >= 3.0 and sum(n for _, n in functions) == pytest.approx(first, rel=1e-3)
    assert not {"main", "add_chain", "k_setup"} & {fn for fn, _ in functions}


@needs_valgrind
def test_another_path_under_valgrind_gives_no_count(three_per_unit, under_valgrind):
    exe = three_per_unit
    with pytest.raises(instructions.CountError, match="another path.*lanes 1 where timed 2"):
        instructions.count(exe, {}, {"lanes": 2}, tsc_hz=2e9)


needs_x86_64 = pytest.mark.skipif(platform.machine() != "x86_64", reason="stepping counts x86-64 only")


@needs_x86_64
def test_stepping_counts_the_timed_work_exactly(three_per_unit):
    """On the core itself: the k_run call alone, so the count is the same to the
    instruction every time, 3 a trip plus the C loop's few a rep, all in the loop's
    functions."""
    c = instructions.count_with(instructions.step_run, three_per_unit, {}, {"lanes": 1}, 2e9, False)
    assert c.source == "branch-step" and 3.0 <= c.per_unit <= 3.0 + 20 / 4096
    again = instructions.count_with(instructions.step_run, three_per_unit, {}, None, 2e9, False)
    assert again.per_unit == c.per_unit
    assert {fn for fn, _ in c.functions} <= {"k_run", "trips"}
    assert sum(n for _, n in c.functions) == pytest.approx(c.per_unit, rel=1e-9)


@needs_valgrind
@needs_x86_64
@pytest.mark.parametrize("kernel, params", [("three_per_unit", {}), ("dot", {"n": "4096"})])
def test_the_core_counts_what_valgrind_counts(three_per_unit, kernel, params):
    """The two counters agree within 1% on builds both can run (they count the same
    instructions: valgrind's count differs only by its run-to-run wobble)."""
    exe = three_per_unit if kernel == "three_per_unit" else artifacts.build_artifact(
        workloads.get(kernel), Variant("O2", cflags=("-O2",))).path
    by_valgrind = instructions.count_with(instructions.valgrind_run, exe, params, None, 2e9, False)
    stepped = instructions.count_with(instructions.step_run, exe, params, None, 2e9, False)
    assert stepped.per_unit == pytest.approx(by_valgrind.per_unit, rel=0.01)


@needs_x86_64
def test_a_call_of_few_branches_is_stepped_and_valgrind_never_runs(three_per_unit, monkeypatch, own_counts):
    def valgrind(*args):
        raise AssertionError("valgrind ran")
    monkeypatch.setattr(instructions, "valgrind_run", valgrind)
    c = instructions.count(three_per_unit, {}, {"lanes": 1}, tsc_hz=2e9)
    assert c.source == "branch-step" and 3.0 <= c.per_unit <= 3.0 + 20 / 4096


@needs_valgrind
@needs_x86_64
def test_a_branchy_call_and_a_cache_model_are_counted_under_valgrind(three_per_unit, monkeypatch, own_counts):
    """With the cache model, which stepping has not, and over QUICK_STOPS a repetition (the
    loop's 4,096 branches against a limit of 1), valgrind counts."""
    c = instructions.count(three_per_unit, {}, {"lanes": 1}, tsc_hz=2e9, caches=True)
    assert c.source == "valgrind" and c.d1_misses is not None
    monkeypatch.setattr(instructions, "QUICK_STOPS", 1)
    assert instructions.count(three_per_unit, {}, {"lanes": 1}, tsc_hz=2e9).source == "valgrind"


@needs_x86_64
def test_what_valgrind_cannot_run_is_counted_on_the_core(three_per_unit, monkeypatch, own_counts):
    def avx512(*args):
        raise instructions.OtherPath("valgrind 3.19 cannot execute this build's instructions (AVX-512?)")
    monkeypatch.setattr(instructions, "valgrind_run", avx512)
    monkeypatch.setattr(instructions, "QUICK_STOPS", 1)  # past the quick try: the fallback
    monkeypatch.setattr(instructions, "unavailable_reason", lambda: None)
    c = instructions.count(three_per_unit, {}, {"lanes": 1}, tsc_hz=2e9)
    assert c.source == "branch-step" and c.notes()["instructions_source"] == "branch-step"
    # kept: counted again, nothing runs
    monkeypatch.setattr(instructions, "step_run", None)
    assert instructions.count(three_per_unit, {}, {"lanes": 1}, tsc_hz=2e9) == c


@needs_x86_64
def test_a_call_of_too_many_stops_is_refused_saying_why(three_per_unit, monkeypatch):
    monkeypatch.setattr(instructions, "STEP_LIMIT", 100)
    with pytest.raises(instructions.CountError, match="more stops than the limit"):
        instructions.step_run(three_per_unit, {}, 1, 2e9)


# Every kind of control the map reads, and code outside it: each of the 16 conditions taken
# and not (cmp of a against b, both ways), a jump table, a call through a pointer, a REP
# string instruction (a step an iteration), a libc call (qsort, stepped whole) calling back
# into the map, a system call, and returns; as a kernel, whose harness counts its k_run.
BRANCHY = r"""
#include "cpulab.h"
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
const char k_unit[] = "rounds";
static int by_value(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }
__attribute__((noinline)) static long twice(long x) { return 2 * x; }
__attribute__((noinline)) long conditions(long a, long b)
{
    long n = 0;
    __asm__ volatile(
#define ONE(cc) "cmp %2, %1\n\tj" #cc " 1f\n\tinc %0\n1:\n\tcmp %1, %2\n\tj" #cc " 1f\n\tinc %0\n1:\n\t"
        ONE(o) ONE(no) ONE(b) ONE(ae) ONE(e) ONE(ne) ONE(be) ONE(a)
        ONE(s) ONE(ns) ONE(p) ONE(np) ONE(l) ONE(ge) ONE(le) ONE(g)
        : "+r"(n) : "r"(a), "r"(b) : "cc");
    return n;
}
__attribute__((noinline)) long work(int rounds)
{
    long (*volatile via)(long) = twice;
    char from[64] = "stepped", to[64];
    int v[40];
    long s = getpid() > 0;
    for (int r = 0; r < rounds; r++) {
        s += conditions(r - 3, r % 5) + conditions(-r, r) + conditions(0x7fffffffffffffffL - r, -1);
        switch ((r * 7) % 6) {
        case 0: s += 11; break;
        case 1: s ^= 5; break;
        case 2: s -= 3; break;
        case 3: s *= 3; break;
        case 4: s += via(r); break;
        default: s = -s;
        }
        for (int i = 0; i < 40; i++)
            v[i] = (i * 7919 + r) % 97;
        qsort(v, 6, sizeof v[0], by_value);
        __asm__ volatile("rep movsb" : : "D"(to), "S"(from), "c"(8 + r % 9) : "memory");
        s += v[r % 40] + to[3];
    }
    return s;
}
void *k_setup(void) { static int x; return &x; }
int k_verify(void *ctx) { (void)ctx; return 0; }
uint64_t k_run(void *ctx, uint64_t reps) { (void)ctx; return (uint64_t)work(30 * (int)reps); }
double k_work(const void *ctx, uint64_t reps) { (void)ctx; return 30.0 * (double)reps; }
"""


@needs_x86_64
@pytest.mark.parametrize("link", ["-no-pie", "-pie", "-static"])
def test_a_stop_at_each_branch_counts_what_a_stop_at_each_instruction_counts(tmp_path, link):
    """The map's straight runs and decided branches give every instruction's count
    exactly as stepping every instruction does (an empty map), in fewer stops, and the
    process computes, prints and ends as it would have."""
    (tmp_path / "branchy.c").write_text(BRANCHY)
    exe = artifacts.build_executable(tmp_path / "branchy.c", Variant("t", ldflags=(link,))).path
    entry, functions = instructions._symbols(exe)

    def run(map_file: str | None) -> tuple[dict, dict]:
        argv = instructions.step_argv(exe, {}, 1, 2e9, entry["k_run"], map_file, 10_000_000) if map_file \
            else instructions.harness_argv(exe, {}, 1, 2e9)
        p = subprocess.run(argv, capture_output=True, text=True, timeout=300)
        lines = p.stdout.splitlines()
        assert p.returncode == 0, p.stdout + p.stderr
        return json.loads(lines[0]), json.loads(lines[-1][len(instructions.STEP_MARK):]) if map_file else {}
    plain, _ = run(None)
    every_data, every = run("/dev/null")
    by_branch_data, by_branch = run(str(stepmap.write(exe, tmp_path / "b.map")))
    assert "error" not in every and "error" not in by_branch, (every, by_branch)
    assert every_data["checksum"] == by_branch_data["checksum"] == plain["checksum"]
    assert by_branch["instructions"] == every["instructions"] == every["stops"]
    assert by_branch["pcs"] == every["pcs"]
    assert by_branch["stops"] < every["stops"]  # (this code branches every third instruction)
    assert not any(instructions._function_of(int(pc, 16), functions).startswith(stepmap.COUNTER) for pc in every["pcs"])


@pytest.mark.parametrize("text, kind", [
    ("je     1012 <_init+0x12>", ("b", 0x1012, 4)), ("jle    40 <f+0x40>", ("b", 0x40, 14)),
    ("jmp    1020 <_init+0x20>", ("j", 0x1020, 0)), ("call   1030 <raise@plt>", ("c", 0x1030, 0)),
    ("ret", ("r", 0, 0)), ("ret    0x8", ("s", 0, 0)), ("call   rax", ("s", 0, 0)),
    ("bnd jmp QWORD PTR [rip+0x2fca]        # 4000 <x>", ("s", 0, 0)), ("notrack jmp rax", ("s", 0, 0)),
    ("rep stos QWORD PTR es:[rdi],rax", ("s", 0, 0)), ("syscall", ("s", 0, 0)), ("jrcxz  10 <f>", ("s", 0, 0)),
    ("loop   10 <f>", ("s", 0, 0)), ("cs nop WORD PTR [rax+rax*1+0x0]", ("n", 0, 0)),
    ("vaddpd zmm0,zmm1,zmm2", ("n", 0, 0)), ("lock add DWORD PTR [rax],0x1", ("n", 0, 0)),
])
def test_the_map_reads_where_each_instruction_sends_control(text, kind):
    assert stepmap._kind(text) == kind


FOUR_PER_TRIP = r"""
#include <stdio.h>
__attribute__((noinline)) long four_per_trip(long n)
{
    long a = 0;
    __asm__ volatile("1:\n\tadd $1, %0\n\tadd $1, %0\n\tdec %1\n\tjnz 1b" : "+r"(a), "+r"(n) : : "cc");
    return a;
}
int main(void) { printf("%ld\n", four_per_trip(250000)); return 0; }
"""


@needs_valgrind
@pytest.mark.skipif(platform.machine() != "x86_64", reason="an x86-64 asm loop")
def test_a_whole_process_is_counted_with_its_functions(tmp_path):
    """A program's count is its whole process, repeatable, with its own function named:
    four_per_trip runs exactly 4 x 250,000 instructions in its loop, plus a few around it."""
    (tmp_path / "p.c").write_text(FOUR_PER_TRIP)
    subprocess.run(["gcc", "-O1", "-o", str(tmp_path / "p"), str(tmp_path / "p.c")], check=True)
    c = instructions.count_process([str(tmp_path / "p")])
    total, functions = c.per_unit, c.functions
    counted = dict(functions)
    assert 1_000_000 <= counted["four_per_trip"] <= 1_000_010
    assert total > counted["four_per_trip"] and functions[0][0] == "four_per_trip"


def test_a_profile_sums_a_function_over_its_files_and_names_its_events():
    profile = ("events: Ir D1mr\nfl=a.c\nfn=f\n1 10 1\n2 5\nfl=b.h\nfn=f\n7 3\nfn=g\n3 1 0\n"
               "summary: 40 2\n")
    p = instructions.parse_profile(profile)
    assert p.events == {"Ir": 40, "D1mr": 2} and p.functions == {"f": 18, "g": 1}


@pytest.mark.parametrize("per_rep", [1_000, 3, 40_000_000])
def test_a_repetition_lost_in_the_process_wobble_is_counted_over_enough_of_them(per_rep):
    """A whole process's count wobbles by up to WOBBLE run to run (here: a first run 900
    over its baseline): where that hides one repetition, even making two count fewer than
    one, enough repetitions are added to drown it; where one repetition is past
    EXTRA_INSTRUCTIONS, two suffice."""
    asked = []

    def run(executable, params, reps, tsc_hz, caches):
        asked.append(reps)
        noise = 900 if reps == 1 else -900 * (reps == 2)
        return instructions._Profile({"Ir": 50_000 + per_rep * reps + noise}, Counter(), {"work": 8 * reps})

    c = instructions.count_with(run, "k", {}, None, 2e9, False)
    assert c.per_unit == pytest.approx(per_rep / 8, rel=1e-3)
    assert asked[0] == 1 and (asked[-1] - 1) * per_rep >= instructions.EXTRA_INSTRUCTIONS // 2 and len(asked) <= 4


def test_without_valgrind_the_reason_names_the_package(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(instructions.CountError, match="Debian package valgrind"):
        instructions.count("/bin/true", {})


@pytest.mark.parametrize("verdict, instruction_ratio, words", [
    (Verdict.FASTER, 1.0, "the same instructions, yet faster: where the code sits"),
    (Verdict.SLOWER, 1.0004, "the same instructions, yet slower"),
    (Verdict.SAME, 0.80, "20.0% fewer instructions, yet the same time: bound by memory or latency"),
    (Verdict.FASTER, 1.10, "10.0% more instructions, yet faster"),
    (Verdict.SLOWER, 0.95, "5.0% fewer instructions, yet slower"),
    (Verdict.FASTER, 0.80, ""),  # fewer instructions and faster: they agree
    (Verdict.UNCLEAR, 1.0, ""),  # nothing decided, nothing to contrast
])
def test_two_witnesses_in_words(verdict, instruction_ratio, words):
    said = witness_words(verdict, instruction_ratio)
    assert said.startswith(words) if words else said == ""


def test_the_instruction_metric_reads_each_verdict_from_the_counts():
    """With metric instructions a tested comparison's verdict is its count's, at the
    policy's precision (fewer: faster), whatever the time said; without both counts it is
    unclear; what was never tested (identical code) keeps its verdict."""
    def row(time_verdict, instruction_ratio, method="turns"):
        return Comparison("e", "w", {}, "O2", "O3", time_verdict, 1.0, method=method, instruction_ratio=instruction_ratio)
    rows = [row(Verdict.SAME, 0.98), row(Verdict.FASTER, 1.02), row(Verdict.SLOWER, 1.004), row(Verdict.SAME, None),
            row(Verdict.IDENTICAL_CODE, None, method=None)]
    count_verdicts(rows, DecisionPolicy(precision=0.01, metric="instructions"))
    assert [r.verdict for r in rows] == [Verdict.FASTER, Verdict.SLOWER, Verdict.SAME, Verdict.UNCLEAR,
                                         Verdict.IDENTICAL_CODE]


def test_explain_sets_two_builds_counts_by_function_side_by_side():
    rows = executed_by_function([["f", 10.0], ["g", 5.0]], [["f", 10.0], ["g", 8.0], ["h", 1.0]])
    assert [r["function"] for r in rows] == ["g", "h", "f"]  # the one that moved most first
    assert rows[1] == {"function": "h", "a_per_unit": None, "b_per_unit": 1.0}
    doc = {"a_name": "O2", "b_name": "O3", "identical": False, "rows": [], "executed": rows,
           "a": {"kernel_instructions": 1, "kernel_bytes": 1, "hot_loop": None},
           "b": {"kernel_instructions": 1, "kernel_bytes": 1, "hot_loop": None}}
    table = next(t for t in explain_tables(doc) if t.name == "executed")
    assert [str(c) for c in table.rows[0]] == ["g", "5.000", "8.000", "+60.0%"]


def test_a_compilers_clone_lines_up_with_the_plain_function():
    rows = executed_by_function([["check.isra.0", 724.0]], [["check", 630.0]])
    assert rows == [{"function": "check", "a_per_unit": 724.0, "b_per_unit": 630.0}]


@needs_valgrind
def test_the_cache_model_sees_a_chase_miss_the_d1_only_past_it(build_kernel):
    """memlat under valgrind's cache model: a 4 KiB chase stays in any D1 (no misses a
    load), a 256 KiB one outgrows every D1 (nearly one a load: a cycle longer than an LRU
    cache misses at every step); the count is about one instruction a load either way.
    (4 MiB took 5.3 s of the cache model, 256 KiB 1.6 s.)"""
    exe = build_kernel("memlat.c")
    small = instructions.count(exe, {"size": "4096"}, tsc_hz=2e9, caches=True)
    large = instructions.count(exe, {"size": str(256 << 10)}, tsc_hz=2e9, caches=True)
    assert small.d1_misses < 0.01 and large.d1_misses > 0.9
    assert 0.9 <= small.per_unit <= 1.5 and 0.9 <= large.per_unit <= 1.5
    assert small.notes()["d1_misses_per_unit"] == small.d1_misses
    assert "d1_misses_per_unit" not in instructions.count(exe, {"size": "4096"}, tsc_hz=2e9).notes()


def test_the_cache_model_is_the_os_caches_where_cachegrind_takes_them():
    caches = [{"level": 1, "type": "Data", "size_bytes": 48 << 10, "ways": 12, "line_bytes": 64},
              {"level": 1, "type": "Instruction", "size_bytes": 32 << 10, "ways": 8, "line_bytes": 64},
              {"level": 2, "type": "Unified", "size_bytes": 2 << 20, "ways": 16, "line_bytes": 64},
              {"level": 3, "type": "Unified", "size_bytes": 32 << 20, "ways": 16, "line_bytes": 64}]
    assert instructions.cache_model(caches) == [f"--D1={48 << 10},12,64", f"--LL={32 << 20},16,64"]
    caches[3]["size_bytes"] = 480 << 20  # 491520 sets: not a power of two, valgrind's own guess stays
    assert instructions.cache_model(caches) == [f"--D1={48 << 10},12,64"]
    assert instructions.cache_model([]) == []


def test_ctrl_c_while_counting_starts_no_more_counts():
    """Ctrl-C stops the counting phase at once: no queued count starts after it."""
    started = []

    def interrupted():
        raise KeyboardInterrupt

    def slow():
        started.append(time.monotonic())
        time.sleep(0.5)
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        instructions.count_all([interrupted] + [slow] * 6, workers=1)
    assert not started and time.monotonic() - t0 < 0.5
