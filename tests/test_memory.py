"""memlat and bandwidth kernels, the memory workloads, and cache-level detection."""
from __future__ import annotations

import dataclasses
import math
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest

from conftest import ArgvJob, fastest_kept, run_artifact
from cpulab.analysis.cache_levels import describe_levels, detect_levels, label_by_level
from cpulab.machine import os_cache_sizes
from cpulab.measure.execute import executor
from cpulab.measure.execute.executor import default_executor
from cpulab.workloads import get
from cpulab.workloads.memory import memlat_sizes, page_colours
from cpulab.store.db import Store
from cpulab.plan import plan

KiB = 1024
MiB = 1024 * KiB
QUICK = ("--samples", "1", "--min-sample-time", "0.001", "--warmup", "0")


def params(**kv) -> list[str]:
    out = []
    for k, v in kv.items():
        out += ["--param", f"{k}={v}"]
    return out


@pytest.fixture(scope="module")
def memlat(build_kernel):
    return build_kernel("memlat.c", cflags=("-O2", "-Wall", "-Wextra", "-Werror"))


@pytest.fixture(scope="module")
def bandwidth(build_kernel):
    return build_kernel("bandwidth.c", cflags=("-O2", "-Wall", "-Wextra", "-Werror"))


# ---- memlat: the chain is one cycle through every line -------------------------------------

@pytest.mark.parametrize("mode", ["random", "sequential"])
@pytest.mark.parametrize("pages", ["4k", "thp"])
@pytest.mark.parametrize("size", [64, 1 * KiB, 3000, 100 * KiB, 3 * MiB])
def test_memlat_verifies(memlat, size, mode, pages):
    r = run_artifact(memlat, *params(size=size, mode=mode, pages=pages), *QUICK)
    assert r["status"] == "ok", r["error"]
    lines = size // 64
    assert r["notes"]["lines"] == lines
    assert r["notes"]["working_set_bytes"] == lines * 64
    assert r["unit"] == "loads" and r["work"] > 0
    # random, whole pages: each line's 128-byte buddy half a cycle later, and each page exactly
    # one lap after its last visit, never sooner (k_verify walks and checks both)
    whole = mode == "random" and lines % 64 == 0
    assert r["notes"].get("buddy_gap") == (lines // 2 if whole else None)
    assert r["notes"].get("page_gap") == (lines // 64 if whole else None)


@pytest.mark.parametrize("mode", ["random", "sequential"])
@pytest.mark.parametrize("size", [128, 64 * KiB])
def test_memlat_verify_catches_a_broken_chain(memlat, mode, size):
    r = run_artifact(memlat, *params(size=size, mode=mode, corrupt=1), *QUICK)
    assert r["status"] == "verify-failed" and r["error"]


@pytest.mark.parametrize("pages", ["4k", "thp"])
@pytest.mark.parametrize("size", [4 * KiB, 5000, 64 * KiB, 8 * MiB])
def test_memlat_pagestride_is_one_node_per_page(memlat, size, pages):
    r = run_artifact(memlat, *params(size=size, mode="pagestride", pages=pages), *QUICK)
    assert r["status"] == "ok", r["error"]
    assert r["notes"]["lines"] == r["notes"]["pages_touched"] == size // 4096
    assert r["notes"]["working_set_bytes"] == size // 4096 * 4096


def test_memlat_pagestride_verify_catches_a_broken_chain_and_refuses_small_size(memlat):
    r = run_artifact(memlat, *params(size=64 * KiB, mode="pagestride", corrupt=1), *QUICK)
    assert r["status"] == "verify-failed" and r["error"]
    r = run_artifact(memlat, *params(size=2048, mode="pagestride"), *QUICK)
    assert r["status"] == "setup-failed" and "pagestride" in r["error"]


def test_memlat_huge_pages_measure_or_skip_with_reason(memlat):
    r = run_artifact(memlat, *params(size=4 * MiB, pages="huge"), *QUICK)
    if r["status"] == "skipped":
        assert "huge" in r["error"]
    else:
        assert r["status"] == "ok", r["error"]
        assert r["notes"]["page_bytes"] == 2 * MiB


def test_memlat_same_chain_for_every_build(build_kernel, memlat):
    """The permutation comes from a fixed-seed generator: i386 and x86-64 agree."""
    ids = set()
    for exe in (memlat, build_kernel("memlat.c", cflags=("-O0", "-m32"))):
        r = run_artifact(exe, *params(size=300 * KiB), *QUICK)
        assert r["status"] == "ok", r["error"]
        ids.add(r["notes"]["chain_id"])
    assert len(ids) == 1
    other = run_artifact(memlat, *params(size=300 * KiB, seed=2), *QUICK)
    assert other["notes"]["chain_id"] not in ids


@pytest.mark.parametrize("bad", [{"mode": "zigzag"}, {"pages": "1g"}, {"size": 10}, {"line": 12}])
def test_memlat_rejects_bad_parameters(memlat, bad):
    r = run_artifact(memlat, *params(**bad), *QUICK)
    assert r["status"] == "setup-failed" and r["error"]


def _per_load(exe, **kv) -> tuple[float, float | None]:
    """Fastest (ns, cycles or None without a cycle timer) per load of 5 samples that an
    estimate keeps: a busy machine only ever adds time (on 2 shared cores, most samples may
    be slowed), and a host that takes the CPU leaves its samples out (fastest_kept)."""
    r = fastest_kept(lambda: run_artifact(exe, *params(**kv), "--samples", "5", "--min-sample-time", "0.005"))
    ns = min(v / r["work"] for v in r["ns"])
    cyc = None if None in r["cycles"] else min(v / r["work"] for v in r["cycles"])
    return ns, cyc


@pytest.mark.timing
def test_memlat_physics(memlat):
    """An L1-sized chase costs a handful of cycles (4-5 on current x86; wide margin);
    a 64 MiB random chase misses every cache and costs far more."""
    l1_ns, l1_cyc = _per_load(memlat, size=4 * KiB)
    if l1_cyc is not None:
        assert 2 <= l1_cyc <= 10, f"{l1_cyc:.2f} cycles per L1 load"
    far_ns, _ = _per_load(memlat, size=64 * MiB)
    assert far_ns >= 5 * l1_ns, f"64 MiB: {far_ns:.1f} ns, 4 KiB: {l1_ns:.1f} ns"


# ---- bandwidth --------------------------------------------------------------------------

@pytest.mark.parametrize("op,per_elem", [("read", 8), ("write", 8), ("copy", 16), ("triad", 24)])
@pytest.mark.parametrize("size", [4 * KiB, 1000 * KiB])
def test_bandwidth_verifies_and_counts_stream_bytes(bandwidth, op, per_elem, size):
    r = run_artifact(bandwidth, *params(op=op, size=size), *QUICK)
    assert r["status"] == "ok", r["error"]
    n = r["notes"]["elements"]
    assert n % 8 == 0 and n * per_elem <= size < (n + 8) * per_elem
    assert r["notes"]["working_set_bytes"] == n * per_elem
    assert r["work"] == r["reps"] * n * per_elem


def test_bandwidth_rejects_unknown_op(bandwidth):
    r = run_artifact(bandwidth, *params(op="scale"), *QUICK)
    assert r["status"] == "setup-failed"


# ---- workloads ----------------------------------------------------------------------------

@pytest.mark.parametrize("lo,hi,per", [(1 * KiB, 64 * MiB, 4), (4 * KiB, 256 * MiB, 2), (100, 5000, 3), (64, 64, 1)])
def test_memlat_sizes_properties(lo, hi, per):
    s = memlat_sizes(lo, hi, per)
    assert s == sorted(set(s))
    assert all(x % 64 == 0 and x >= 64 for x in s)
    assert s[-1] == max(64, round(hi / 64) * 64)
    assert abs(s[0] - lo) <= 64
    ratios = [b / a for a, b in zip(s, s[1:])]
    if lo >= 1024:  # well above the line: geometric spacing survives the rounding
        assert all(r <= 2 ** (1 / per) * 1.05 for r in ratios)
        assert len(s) == pytest.approx(per * math.log2(hi / lo) + 1, abs=1)


def test_memlat_sizes_rejects_nonsense():
    with pytest.raises(ValueError):
        memlat_sizes(1024, 512, 4)


def test_workload_grids():
    """memlat's grids join the line chase's product and the page-stride chase over whole
    pages of its own; an override replaces its axis in both, each point once."""
    quick = get("memlat").grid("quick")
    stride = [p for p in quick if p["mode"] == "pagestride"]
    assert len(quick) == 65 * 2 + len(stride) and len(stride) == 34
    assert all(int(p["size"]) % 4096 == 0 and p["pages"] == "4k" for p in stride)
    assert len(get("memlat").grid("full")) == 73 * 3 * 2 + 40
    one = get("memlat").grid("quick", {"size": ["65536"], "mode": ["random"]})
    assert one == [{**get("memlat").defaults(), "size": "65536", "pages": pages} for pages in ("4k", "thp")]
    assert len(get("bandwidth").grid("quick")) == 15 * 4
    assert len(get("bandwidth").grid("full")) == 33 * 4
    assert max(int(p["size"]) for p in get("memlat").grid("full")) == 256 * MiB


# ---- cache levels from synthetic curves ------------------------------------------------------

CACHES = [
    {"level": 1, "type": "Data", "size_bytes": 32 * KiB, "name": "L1d 32 KiB"},
    {"level": 1, "type": "Instruction", "size_bytes": 32 * KiB, "name": "L1i 32 KiB"},
    {"level": 2, "type": "Unified", "size_bytes": 1 * MiB, "name": "L2 1 MiB"},
    {"level": 3, "type": "Unified", "size_bytes": 32 * MiB, "name": "L3 32 MiB"},
]


def curve(f, sizes, noise, seed):
    rng = np.random.default_rng(seed)
    return [(s, f(s) * math.exp(rng.normal(0, noise)), 2.5 * f(s)) for s in sizes]


def staircase(s):
    return 1.2 if s <= 32 * KiB else 4.0 if s <= MiB else 12.0 if s <= 32 * MiB else 80.0


@pytest.mark.parametrize("noise", [0.0, 0.03, 0.06])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_staircase_gives_four_levels_at_the_right_edges(noise, seed):
    levels = detect_levels(curve(staircase, memlat_sizes(KiB, 256 * MiB, 4), noise, seed), CACHES)
    assert len(levels) == 4
    for lv, edge, ns in zip(levels, [32 * KiB, MiB, 32 * MiB], [1.2, 4, 12]):
        assert edge / 1.5 <= lv["size_bytes"] <= edge * 1.5
        assert lv["ns"] == pytest.approx(ns, rel=0.1)
        assert lv["agrees"] and lv["matches"] is not None
    assert [lv["matches"] for lv in levels] == ["L1d 32 KiB", "L2 1 MiB", "L3 32 MiB", "memory"]
    assert levels[-1]["open"] and levels[-1]["ns"] == pytest.approx(80, rel=0.1)


@pytest.mark.parametrize("seed", [1, 2])
def test_gently_rising_plateaus_stay_whole(seed):
    """Inside a level latency often creeps up (TLB misses with 4 KiB pages): 10 % per
    doubling of the working set must not split the level."""
    starts = {1.2: KiB, 4.0: 32 * KiB, 12.0: MiB, 80.0: 32 * MiB}

    def tilted(s):
        base = staircase(s)
        return base * 1.10 ** math.log2(s / starts[base])

    levels = detect_levels(curve(tilted, memlat_sizes(KiB, 256 * MiB, 4), 0.02, seed), CACHES)
    assert [lv["matches"] for lv in levels] == ["L1d 32 KiB", "L2 1 MiB", "L3 32 MiB", "memory"]


def gradual(s):
    """Seed 003 (Linux on the 21064A): 8 KB L1, then a 2 MB L2 that starts missing from
    128 KB on (arbitrary page placement), rising smoothly to memory latency at 2 MB."""
    if s <= 8 * KiB:
        return 1.5
    if s <= 128 * KiB:
        return 8.0
    if s <= 2 * MiB:
        return 8.0 * (60 / 8) ** (math.log2(s / (128 * KiB)) / 4)
    return 60.0


@pytest.mark.parametrize("noise", [0.0, 0.03])
def test_gradual_step_is_found_and_flagged(noise):
    caches = [{"level": 1, "type": "Data", "size_bytes": 8 * KiB, "name": "L1d 8 KiB"},
              {"level": 2, "type": "Unified", "size_bytes": 2 * MiB, "name": "L2 2 MiB"}]
    levels = detect_levels(curve(gradual, memlat_sizes(KiB, 64 * MiB, 4), noise, 7), caches)
    assert len(levels) == 3
    l1, l2, mem = levels
    assert l1["matches"] == "L1d 8 KiB"
    assert l2["ns"] == pytest.approx(8, rel=0.1)
    # The L2 plateau ends where the climb starts, far below the 2 MB the OS reports.
    assert 128 * KiB / 1.5 <= l2["size_bytes"] <= 128 * KiB * 1.5
    assert not l2["agrees"] and l2["matches"] is None
    assert l2["next_bytes"] > 4 * l2["size_bytes"]
    assert mem["matches"] == "memory" and mem["ns"] == pytest.approx(60, rel=0.1)
    # The climb's points go with the step: from the plateau's edge to the next level's start, rising.
    ramp = l2["ramp"]
    assert (ramp[0][0], ramp[-1][0]) == (l2["size_bytes"], l2["next_bytes"]) and len(ramp) > 4
    assert ramp[-1][1] > 4 * ramp[0][1] and "ramp" not in mem
    text = describe_levels(levels, caches)
    assert "gradual" in text and "L2 2 MiB" in text


@pytest.mark.parametrize("noise", [0.0, 0.05])
def test_flat_curve_is_one_level(noise):
    levels = detect_levels(curve(lambda s: 90.0, memlat_sizes(KiB, 256 * MiB, 4), noise, 5), CACHES)
    assert len(levels) == 1 and levels[0]["open"]
    assert levels[0]["ns"] == pytest.approx(90, rel=0.05)


def test_detect_levels_edge_cases():
    assert detect_levels([], CACHES) == []
    assert len(detect_levels([(1024, 1.0, 4.0)], CACHES)) == 1
    lv = detect_levels(curve(staircase, memlat_sizes(KiB, 256 * MiB, 4), 0.0, 1), [])
    assert len(lv) == 4 and all(l["matches"] is None for l in lv)
    assert "Level 1" in describe_levels(lv)


def test_label_by_level():
    assert label_by_level(16 * KiB, CACHES) == "L1"
    assert label_by_level(32 * KiB, CACHES) == "L1"
    assert label_by_level(33 * KiB, CACHES) == "L2"
    assert label_by_level(8 * MiB, CACHES) == "L3"
    assert label_by_level(64 * MiB, CACHES) == "memory"
    assert label_by_level(1, []) == "memory"


def test_os_cache_sizes_reads_sysfs_and_tolerates_its_absence(tmp_path):
    assert os_cache_sizes(tmp_path / "missing") == []
    for i, (level, typ, size) in enumerate([(1, "Data", "48K"), (1, "Instruction", "32K"),
                                            (2, "Unified", "2048K"), (3, "Unified", "96M")]):
        d = tmp_path / f"index{i}"
        d.mkdir()
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{typ}\n")
        (d / "size").write_text(f"{size}\n")
    (tmp_path / "index9").mkdir()  # incomplete entry: ignored
    caches = os_cache_sizes(tmp_path)
    assert [c["name"] for c in caches] == ["L1d 48 KiB", "L1i 32 KiB", "L2 2 MiB", "L3 96 MiB"]
    assert caches[2]["size_bytes"] == 2 * MiB
    for c in os_cache_sizes():  # this machine, whatever it has
        assert c["size_bytes"] > 0 and c["level"] >= 1


# ---- memlat: page colours (/proc/self/pagemap frames; root only) --------------------------

def _frames_visible() -> bool:
    """Whether this process sees physical frame numbers in /proc/self/pagemap (root)."""
    import ctypes
    import mmap
    import struct
    buf = mmap.mmap(-1, 4096)
    buf[0] = 1
    addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    with open("/proc/self/pagemap", "rb") as f:
        f.seek(addr // 4096 * 8)
        entry = struct.unpack("<Q", f.read(8))[0]
    return bool(entry & ((1 << 55) - 1))


COLOUR_CACHE = {"colour_cache_bytes": 1 * MiB, "colour_ways": 8}  # 32 colours of 4 KiB


@pytest.mark.parametrize("cache_bytes, ways, colours", [(2 * MiB, 16, 32), (1 * MiB, 8, 32), (48 * KiB, 12, 1),
                                                          (32 * KiB, 16, 1), (480 * MiB, 16, 7680)])
def test_page_colours_arithmetic(cache_bytes, ways, colours):
    assert page_colours(cache_bytes, ways) == colours


@pytest.mark.parametrize("mode, size", [("random", 3 * MiB), ("pagestride", 2 * MiB), ("sequential", 100_000)])
def test_memlat_colour_report_counts_every_page_once(memlat, mode, size):
    r = run_artifact(memlat, *params(size=size, mode=mode, colour="report", **COLOUR_CACHE), *QUICK)
    assert r["status"] == "ok", r["error"]
    n = r["notes"]
    if not n["colour_known"]:
        assert "colours" not in n
        pytest.skip("no physical frames in /proc/self/pagemap (not root)")
    pages = -(-n["working_set_bytes"] // 4096)
    colours = page_colours(COLOUR_CACHE["colour_cache_bytes"], COLOUR_CACHE["colour_ways"])
    assert n["colours"] == colours and n["colour_pages"] == pages
    assert n["colour_pages_min"] * colours <= pages <= n["colour_pages_max"] * colours
    assert n["colour_imbalance"] == pytest.approx(n["colour_pages_max"] / (pages / colours))


FEW_COLOURS = {"colour_cache_bytes": 64 * KiB, "colour_ways": 4}  # 4 colours


@pytest.mark.parametrize("mode, size", [("random", 3 * MiB), ("pagestride", 2 * MiB), ("sequential", 400_000)])
def test_memlat_colour_balanced_verifies_or_skips_without_root(memlat, mode, size):
    r = run_artifact(memlat, *params(size=size, mode=mode, colour="balanced", **FEW_COLOURS), *QUICK)
    if not _frames_visible():
        assert r["status"] == "skipped" and "needs root" in r["error"]
        return
    assert r["status"] == "ok", r["error"]
    n = r["notes"]
    pages = -(-n["working_set_bytes"] // 4096)
    assert n["colour_known"] == 1 and n["colour_pages"] == pages
    # Round robin over the colours: the counts differ by at most one unless a colour runs
    # out.  Twice the pages needed are mapped: with 4 colours and >= 98 pages needed, even
    # frames drawn at random leave a colour short only with odds ~1e-4 (it is 4 standard
    # deviations away); with 32 colours and 25 pages it happens about half the time.
    assert n["colour_pages_max"] - n["colour_pages_min"] <= 1
    same = run_artifact(memlat, *params(size=size, mode=mode), *QUICK)
    assert same["notes"]["chain_id"] == n["chain_id"]  # the same chain, on other pages


@pytest.mark.parametrize("mode, size", [("random", 3 * MiB), ("pagestride", 2 * MiB), ("sequential", 400_000)])
def test_memlat_colour_balanced_pages_are_found_once_per_run(memlat, mode, size, request):
    """Under a run's shared directory the first process keeps its balanced pages and
    chain, and a later one maps them: the same chain and walks (its known-answer test
    passes), as balanced; another point, and a chain broken on purpose, are not shared."""
    if not _frames_visible():
        pytest.skip("no physical frames in /proc/self/pagemap (not root)")
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm: a run keeps no pages to share")
    # On tmpfs, as in a run: only there are the pages not picked given back (memlat.c,
    # pool_on_tmpfs), which this test checks.
    pool = Path(tempfile.mkdtemp(dir="/dev/shm"))
    request.addfinalizer(lambda: shutil.rmtree(pool, ignore_errors=True))
    kept = ArgvJob([str(memlat), *params(size=size, mode=mode, colour="balanced", **FEW_COLOURS), *QUICK], 120,
                   env={executor.SHARED: str(pool)})
    first = default_executor().execute(kept).data
    assert first["status"] == "ok", first["error"]
    def pools():
        return sorted(f.name for f in pool.iterdir() if f.name.startswith("balanced-"))
    files = pools()
    assert len(files) == 3 and files[1].endswith(".head")
    kept_file = (pool / files[0]).stat()  # twice the pages mapped, the ones not picked given back
    assert kept_file.st_blocks * 512 < 0.75 * kept_file.st_size
    again = default_executor().execute(kept).data  # verifies the mapped chain (no --verified)
    assert again["status"] == "ok", again["error"]
    assert pools() == files
    assert again["notes"]["chain_id"] == first["notes"]["chain_id"]
    assert again["notes"]["colour_pages_max"] - again["notes"]["colour_pages_min"] <= 1
    other = dataclasses.replace(kept, command=[*kept.command, "--param", "seed=2"])
    assert default_executor().execute(other).data["status"] == "ok" and len(pools()) == 6
    broken = dataclasses.replace(kept, command=[*kept.command, "--param", "seed=3", "--param", "corrupt=1"])
    assert default_executor().execute(broken).data["status"] == "verify-failed"
    assert len(pools()) == 6


def test_memlat_random_order_is_made_once_per_run(memlat, tmp_path):
    """The random mode's page order kept in the run's directory by its first process and
    read by the next: the same chain (fingerprint) as made anew, verified each time."""
    chase = [str(memlat), *params(size=3 * MiB, mode="random"), *QUICK]
    alone = run_artifact(memlat, *chase[1:])
    kept = ArgvJob(chase, 120, env={executor.SHARED: str(tmp_path)})
    first, again = (default_executor().execute(kept).data for _ in range(2))
    assert [f.name.split("-")[0] for f in tmp_path.iterdir()] == ["order"]
    assert first["status"] == again["status"] == alone["status"] == "ok", (first["error"], again["error"])
    assert first["notes"]["chain_id"] == again["notes"]["chain_id"] == alone["notes"]["chain_id"]


def test_a_runs_shared_directory_is_named_to_its_processes_and_removed_after(tmp_path):
    stale = tmp_path / "cpulab-pages-999999999-x"  # a killed run's (no such pid)
    stale.mkdir()
    with executor.shared_pages(str(tmp_path)):
        d = os.environ[executor.SHARED]
        assert executor.fixed_env(ArgvJob(["true"], 1))[executor.SHARED] == d and os.path.isdir(d)
        assert not stale.exists()
    assert executor.SHARED not in os.environ and not os.path.exists(d)
    assert executor.SHARED not in executor.fixed_env(ArgvJob(["true"], 1))


def test_runs_at_once_in_threads_share_one_directory_until_the_last_ends(tmp_path):
    """A cluster run drives its machines' runs in threads of one process: the second to
    start shares the first's directory, which goes when the last ends, whichever it is
    (the first's end once took it from under the second, whose own end then failed)."""
    import threading
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()
    seen = {}

    def run(name, enter_after, leave_after, entered):
        enter_after.wait()
        with executor.shared_pages(str(tmp_path)):
            seen[name] = os.environ[executor.SHARED]
            entered.set()
            leave_after.wait()
        seen[name + " left"] = os.path.isdir(seen[name])
    go = threading.Event()
    go.set()
    threads = [threading.Thread(target=run, args=("a", go, second_in, first_in)),
               threading.Thread(target=run, args=("b", first_in, first_out, second_in))]
    for t in threads:
        t.start()
    threads[0].join()
    first_out.set()
    threads[1].join()
    assert seen["a"] == seen["b"] and seen["a left"] and not seen["b left"]
    assert executor.SHARED not in os.environ


def test_memlat_colour_balanced_verify_catches_a_broken_chain(memlat):
    if not _frames_visible():
        pytest.skip("no physical frames in /proc/self/pagemap (not root)")
    r = run_artifact(memlat, *params(size=1 * MiB, colour="balanced", corrupt=1, **COLOUR_CACHE), *QUICK)
    assert r["status"] == "verify-failed" and r["error"]


@pytest.mark.parametrize("bad", [{"colour": "rainbow"}, {"colour": "report", "pages": "thp"},
                                 {"colour": "balanced"}, {"colour": "report", "colour_cache_bytes": 1 * MiB}])
def test_memlat_colour_rejects_bad_parameters(memlat, bad):
    r = run_artifact(memlat, *params(size=64 * KiB, **bad), *QUICK)
    assert r["status"] == "setup-failed" and "colour" in r["error"]


def test_memlat_colour_without_root_notes_unknown_and_skips_balanced(memlat, tmp_path):
    """As an unprivileged user (setpriv, when we are root) the frames read as zero."""
    import os
    import shutil
    from cpulab.measure.execute.executor import default_executor
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv (Debian package util-linux) to drop to an unprivileged user")
    exe = tmp_path / "memlat"
    shutil.copy(memlat, exe)
    tmp_path.chmod(0o755)
    drop = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", str(exe)]
    for colour, status in (("report", "ok"), ("balanced", "skipped")):
        argv = [*drop, *params(size=256 * KiB, colour=colour, **COLOUR_CACHE), *QUICK]
        r = default_executor().execute(ArgvJob(argv, 60)).data
        assert r["status"] == status, r["error"]
        assert r["notes"].get("colour_known") == 0 and "colours" not in r["notes"]
    assert r["error"] == "page colour needs root (/proc/self/pagemap PFNs)"


def _sysfs_cache(level: int) -> dict | None:
    return next((c for c in os_cache_sizes() if c["level"] == level and c["type"] != "Instruction" and c["ways"]), None)


@pytest.mark.parametrize("cache, pct", [("L1d", 50), ("L2", 75), ("L3", 10)])
def test_memlat_cache_fraction_is_a_share_of_the_running_cpus_cache(memlat, cache, pct):
    """cache=L2 fraction=75: the working set is 75% of the L2 sysfs reports, in whole pages,
    and colours are counted for that cache."""
    want = _sysfs_cache(int(cache[1]))
    r = run_artifact(memlat, *params(cache=cache, fraction=pct, colour="report"), *QUICK)
    if want is None:
        assert r["status"] == "skipped" and cache in r["error"]
        return
    assert r["status"] == "ok", r["error"]
    n = r["notes"]
    assert (n["cache_bytes"], n["cache_ways"]) == (want["size_bytes"], want["ways"])
    assert n["working_set_bytes"] == want["size_bytes"] * pct // 100 // 4096 * 4096
    if n["colour_known"]:
        assert n["colours"] == page_colours(want["size_bytes"], want["ways"])


@pytest.mark.parametrize("bad, word", [({"cache": "L4"}, "cache"), ({"fraction": 50}, "fraction"),
                                       ({"cache": "L2", "colour_cache_bytes": MiB, "colour_ways": 8}, "cache")])
def test_memlat_cache_rejects_bad_parameters(memlat, bad, word):
    r = run_artifact(memlat, *params(size=64 * KiB, **bad), *QUICK)
    assert r["status"] == "setup-failed" and word in r["error"]


@pytest.mark.machine  # chases through the last cache: another test beside it spoils every sample
def test_memlat_colour_command_is_the_seeds_experiment(cli, tmp_path):
    """memlat --colour runs the seeds plan's page-colour grid: each of the L2 and L3 at four
    shares, both sides measured, or the balanced side missing with the reason (not root)."""
    import json
    res = cli("memlat", "--colour", "--processes", "1", "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    caches = [c for c in ("L2", "L3") if _sysfs_cache(int(c[1]))]
    rows = doc["rows"]
    assert [(r["cache"], r["fraction"]) for r in rows] == [(c, f) for c in caches for f in (50, 75, 100, 125)]
    for r in rows:
        want = _sysfs_cache(int(r["cache"][1]))
        assert r["cache_bytes"] == want["size_bytes"] and r["colours"] == page_colours(want["size_bytes"], want["ways"])
        assert r["size_bytes"] == want["size_bytes"] * r["fraction"] // 100 // 4096 * 4096
        # One process a side: on a busy host every sample of one can be left out (seen once,
        # at an L2 point's balanced side), which the row says.
        assert (r["arbitrary_ns"] or 0) > 0 or r["arbitrary_error"] == "no sample kept"
        if _frames_visible():
            assert r["arbitrary_imbalance"] >= 1
            assert (r["balanced_ns"] or 0) > 0 or r["balanced_error"] == "no sample kept"
        else:
            assert r["balanced_ns"] is None and "needs root" in r["balanced_error"] and "needs root" in doc["missing"]
    # At most half of a side's rows without a sample (each row is one process, every sample of
    # which the host can disturb): with a busy loop on one CPU, two of eight rows of one side
    # once were, and three once, in about 30 such suites (three runs of the command beside a
    # busy loop alone then lost none of 24 rows).  A cache level that never measures on a side
    # still fails here, with the rows' reasons.
    reasons = [(r["cache"], r["fraction"], r["arbitrary_error"], r["balanced_error"]) for r in rows]
    for side in ("arbitrary", "balanced") if _frames_visible() else ("arbitrary",):
        assert sum(not r[f"{side}_ns"] for r in rows) <= len(rows) // 2, reasons
        assert all(any(r[f"{side}_ns"] for r in rows if r["cache"] == c) for c in caches), reasons
    if _frames_visible():
        assert doc["missing"] in (None, "no sample kept")




def _colour_result(colour: str, rates: list[float] | None, error: str = ""):
    from cpulab.model import Result, Status
    p = {"size": "4096", "pages": "4k", "mode": "random", "line": "64", "seed": "1", "colour": colour,
         "colour_cache_bytes": "0", "colour_ways": "0", "cache": "L2", "fraction": "100"}
    notes = {"working_set_bytes": 512 * KiB, "cache_bytes": 512 * KiB, "cache_ways": 8}
    if rates is None:
        return Result(0, "page-colour", "memlat", "O2", p, "loads", "loads/s", "cycles/load", Status.SKIPPED,
                      error=error, notes=notes)
    median = float(np.median(rates))
    return Result(0, "page-colour", "memlat", "O2", p, "loads", "loads/s", "cycles/load", Status.OK, notes=notes,
                  median=median, ns_per_unit=1e9 / median, observations=dict(enumerate(rates)))


def test_memlat_colour_pairs_by_round_and_says_why_balanced_is_missing():
    from cpulab.analysis.memory import memlat_colour
    from cpulab.spec.policy import DecisionPolicy
    policy = DecisionPolicy()
    arb = [1e8 * (1 + 0.2 * (i % 3)) for i in range(8)]  # rounds differ by up to 40%: the host's drift
    doc = memlat_colour([_colour_result("report", arb), _colour_result("balanced", [a * 1.1 for a in arb])], policy)
    (row,) = doc["rows"]
    assert doc["missing"] is None and (row["cache"], row["fraction"], row["colours"]) == ("L2", 100, 16)
    # Paired by round the drift cancels: exactly 10% faster, significant over 8 rounds.
    assert row["ratio"] == pytest.approx(1.1) and row["verdict"] == "faster"
    doc = memlat_colour([_colour_result("report", arb), _colour_result("balanced", None, "page colour needs root")],
                        policy)
    assert doc["rows"][0]["ratio"] is None and doc["missing"] == "page colour needs root"
    assert memlat_colour([_colour_result("any", arb)], policy) is None


def test_memlat_command_sweeps_its_grid_or_what_its_flags_give(cli):
    """Without sweep flags, the workload's own grid (the line chase and the page-stride
    chase over sizes of its own); with any, the product they give, random by default."""
    from types import SimpleNamespace
    from cpulab.cli.memory import memlat_points
    none = SimpleNamespace(max_size=None, per_octave=None, pages=None, mode=None)
    assert memlat_points(none, full=False) == {}
    given = memlat_points(SimpleNamespace(**{**vars(none), "pages": "4k"}), full=False)
    assert given["pages"] == ["4k"] and given["mode"] == ["random"] and given["size"][-1] == str(64 * MiB)
    import json
    res = cli("memlat", "--max-size", "16K", "--per-octave", "1", "--pages", "4k", "--processes", "1", "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    # the run's points (a loaded machine may leave one no sample kept, and the curve without it)
    swept = {int(r.params["size"]) for r in Store(cli.db).results(doc["run_id"])}
    assert sorted(swept) == [1024 * 2 ** k for k in range(5)], doc["failures"]
    # each process takes the seeds run's samples: with 3 it kept only its first 2 (stats.keep_count),
    # which at an L3 size are still filling the cache (Intel model 207: 220-270 and 117-150 cycles,
    # the third 100-114), and the L3's shelf was lost in 4 of 5 runs
    seeds = next(e for e in plan.load("seeds").experiments if e.name == "memory-latency")
    store = Store(cli.db)
    taken = {len(store.samples(r.id)) for r in store.results(doc["run_id"]) if r.status == "ok"}
    assert taken == {seeds.samples}
    assert len({p["series"] for p in doc["points"]}) == 1 and "mode=random pages=4k" in doc["points"][0]["series"]
