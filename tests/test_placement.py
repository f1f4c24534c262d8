"""Placements: each kernel's artifact is the same machine code at several addresses.

For every built-in kernel that builds here: the placements put the timed function at
different offsets within a page and the kernel's functions in different orders, the bytes
of every kernel.o function are the object's own in each (outside the fields the linker
fills in), and the harness reports the offset it really ran at."""
import dataclasses
import json
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from cpulab import workloads
from cpulab.compile import artifacts, placement, slimlink
from cpulab.compile.artifacts import build_executable
from cpulab.plan import toolchain
from cpulab.machine import toolchains

O2 = toolchain.get("O2")
KERNELS = sorted(name for name, w in workloads.registry().items()
                 if not toolchains.libraries_reason(O2, w.requires, w.libs))


def build(name: str, cache: Path | None = None) -> artifacts.Artifact:
    """The kernel's O2 artifact, in the session's cache (the other tests' builds share
    its objects) unless given another."""
    w = workloads.get(name)
    return build_executable(w.source, O2, libs=w.libs, cache_dir=cache, placeable=True,
                            extra_sources=tuple(workloads.KERNEL_DIR / s for s in w.extra_sources))


@pytest.mark.parametrize("name", KERNELS)
def test_placements_move_the_code_and_keep_its_bytes(name):
    art = build(name)
    got = placement.inspect(art, 6)
    assert got is not None and got.functions > 0
    assert len(set(got.offsets)) > 1, got.offsets  # the timed function sits elsewhere in its page
    if got.functions > 1:
        assert len(set(got.orders)) > 1, got.orders  # among the kernel's other functions in another order
    assert got.differing == ()  # and is the same code in every placement


def test_the_harness_reports_the_offset_it_ran_at():
    art = build("sha256")
    offsets = placement.inspect(art, 4).offsets
    for i, want in enumerate(offsets):
        out = subprocess.run([art.placement_path(i), "--samples", "1", "--min-sample-time", "0", "--warmup", "0"],
                             capture_output=True, text=True, timeout=60)
        assert json.loads(out.stdout.splitlines()[-1])["code_offset"] == want


def test_a_changed_instruction_is_found(tmp_path):
    """The check can fail: one byte of k_run changed in one placement is reported.  (A
    cache of its own: the folder copied holds no other test's placements.)"""
    art = build("sha256", tmp_path / "cache")
    artifacts.place(art, 1)  # here, not left to another test (under -n 2 it may run in the other worker)
    copy = tmp_path / "art"
    shutil.copytree(Path(art.path).parent, copy)
    exe = Path(copy / Path(art.placement_path(1)).name)
    with open(exe, "rb") as f:
        elf = ELFFile(f)
        sym = next(s for s in elf.get_section_by_name(".symtab").iter_symbols() if s.name == "k_run")
        seg = next(s for s in elf.iter_segments() if s["p_type"] == "PT_LOAD"
                   and s["p_vaddr"] <= sym["st_value"] < s["p_vaddr"] + s["p_filesz"])
        at = seg["p_offset"] + sym["st_value"] + sym["st_size"] - 1 - seg["p_vaddr"]  # its last byte
    data = bytearray(exe.read_bytes())
    data[at] ^= 0xFF
    exe.write_bytes(bytes(data))
    moved = dataclasses.replace(art, path=str(copy / Path(art.path).name))
    assert placement.inspect(moved, 4).differing == ("k_run",)


LINKS = [name for name in ("static", "nopie", "clang-O2", "musl-static", "i386-sse2", "armhf", "aarch64")
         if not toolchains.unavailable_reason(toolchain.get(name))]


@pytest.mark.parametrize("variant", LINKS)
def test_every_kind_of_link_takes_a_placement(variant):
    """Static, non-PIE, clang, musl, the i686 and ARM cross builds: a placement's linker
    script links under each, and the placed executable passes its known-answer test (run
    under qemu-user for a foreign ISA).  Toolchains missing here are left out."""
    from cpulab.compile import emulation
    w = workloads.get("sha256")
    art = build_executable(w.source, toolchain.get(variant), libs=w.libs, placeable=True)
    artifacts.place(art, 20)  # beyond the ones linked with the build: linked in full, traced
    exe = artifacts.place(art, 21)  # slim where its libraries are shared (slimlink.py)
    try:
        prefix = list(emulation.emulator_for(exe))
    except emulation.CannotRun as e:
        pytest.skip(str(e))
    out = subprocess.run([*prefix, exe, "--samples", "1", "--min-sample-time", "0", "--warmup", "0",
                          "--param", "size=256"], capture_output=True, text=True, timeout=120)
    assert json.loads(out.stdout.splitlines()[-1])["status"] == "ok", out.stdout + out.stderr


def test_a_slim_link_writes_the_bytes_of_the_full_link(tmp_path):
    """After a build's first placement, its placements are linked slim (slimlink.py: the
    shared libraries cut to the symbols the executable imports) once the first showed the
    same bytes; shown here on the others: each is the full link of its layout, byte for byte."""
    art = build("sha256", tmp_path / "cache")
    exes = [artifacts.place(art, i) for i in range(3)]
    slim = slimlink._slim[(*art.commands[-1], None)]
    assert slim is not None  # a glibc dynamic link takes it
    assert slim.direct and Path(slim.direct[0]).name != "collect2"  # and runs as ld itself, no driver
    for exe in exes[1:]:
        artifacts.run_step([*artifacts.with_output(list(art.commands[-1]), f"{exe}.full"), f"-Wl,-T,{exe}.ld"])
        assert Path(f"{exe}.full").read_bytes() == Path(exe).read_bytes()


def test_a_linker_command_that_writes_other_bytes_leaves_the_slim_link_to_the_driver(tmp_path, monkeypatch):
    """The linker's own command is kept only where it writes the driver's bytes: one that
    strips the executable (other bytes) leaves the slim link to the driver."""
    command = slimlink._linker_command
    monkeypatch.setattr(slimlink, "_linker_command", lambda driver, cwd: [*command(driver, cwd), "-s"])
    art = build("sha256", tmp_path / "cache")
    exes = [artifacts.place(art, i) for i in range(2)]
    slim = slimlink._slim[(*art.commands[-1], None)]
    assert slim is not None and not slim.direct
    artifacts.run_step([*artifacts.with_output(list(art.commands[-1]), f"{exes[1]}.full"), f"-Wl,-T,{exes[1]}.ld"])
    assert Path(f"{exes[1]}.full").read_bytes() == Path(exes[1]).read_bytes()


def test_a_build_whose_slim_link_differs_is_linked_in_full(tmp_path, monkeypatch):
    """Where no slim form writes the first placement's bytes, every placement of the build
    is linked as the build links it, and runs."""
    monkeypatch.setattr(slimlink, "_same", lambda a, b: False)
    art = build("sha256", tmp_path / "cache")
    exes = [artifacts.place(art, i) for i in range(2)]
    assert slimlink._slim[(*art.commands[-1], None)] is None
    out = subprocess.run([exes[1], "--samples", "1", "--min-sample-time", "0", "--warmup", "0"],
                         capture_output=True, text=True, timeout=60)
    assert json.loads(out.stdout.splitlines()[-1])["status"] == "ok"


def test_a_cache_where_no_slim_copy_can_be_made_leaves_the_links_in_full(tmp_path, monkeypatch):
    """Slim copies that cannot be written (the cache a file, here) cost nothing but the
    speed: every placement is linked as the build links it."""
    art = build("sha256", tmp_path / "cache")
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("CPULAB_CACHE_DIR", str(tmp_path / "file" / "cache"))
    exes = [artifacts.place(art, i) for i in range(2)]
    assert slimlink._slim[(*art.commands[-1], None)] is None and all(Path(e).exists() for e in exes)


def test_a_link_command_that_cannot_be_traced_is_run_as_it_is():
    """A link command that takes no -Wl,-t (a linker called directly) is run as given, for
    its first placement and the rest, never slim."""
    ran = []

    def run(argv, cwd):
        if "-Wl,-t" in argv:
            raise artifacts.BuildError("ld: unrecognized option '-Wl,-t'")
        ran.append(argv)
        return ""
    build = ("ld", "a.o", "-o", "/x/a", "untraceable")
    for out in ("/x/a.layout0", "/x/a.layout1"):
        slimlink.link(build, ["ld", "a.o", "-o", out], None, run)
    assert ran == [["ld", "a.o", "-o", "/x/a.layout0"], ["ld", "a.o", "-o", "/x/a.layout1"]]
    assert slimlink._slim[build] is None


def test_a_slim_copy_holds_the_named_symbols_in_their_order_and_no_code(tmp_path):
    """A slim library: its dynamic symbols cut to the names asked for (each with its
    version), in the library's order, and its code left out of a sparse file."""
    libc = subprocess.run(["gcc", "-print-file-name=libc.so.6"], capture_output=True, text=True).stdout.strip()
    names = frozenset({"printf", "malloc", "memcpy", "no_such_symbol"})
    copy = tmp_path / "libc.so.6"
    slimlink._slim_copy(libc, names, str(copy))

    def table(path):
        with open(path, "rb") as f:
            elf = ELFFile(f)
            versions = elf.get_section_by_name(".gnu.version")
            return [(s.name, versions.get_symbol(i)["ndx"]) for i, s in enumerate(elf.get_section_by_name(".dynsym")
                                                                                .iter_symbols())]
    full, slim = table(libc), table(copy)
    assert slim == full[:1] + [s for s in full[1:] if s[0] in names]
    assert {n for n, _ in slim[1:]} == names - {"no_such_symbol"}
    assert copy.stat().st_blocks * 512 < copy.stat().st_size / 2  # sparse: the code is not written


def test_an_alignment_the_build_asks_for_is_kept():
    """-falign-functions=64 puts every function on a 64-byte line, in every placement: a
    function moves by multiples of its own alignment (with the same bytes), and what the
    build leaves open (the order, the lines between) is drawn."""
    w = workloads.get("sha256")
    art = build_executable(w.source, toolchain.Variant("a64", cflags=("-O2", "-falign-functions=64")),
                           libs=w.libs, placeable=True)
    got = placement.inspect(art, 8)
    assert got.differing == () and len(set(got.offsets)) > 1, got.offsets
    for i, order in enumerate(got.orders):
        with open(artifacts.place(art, i), "rb") as f:
            symbols = {s.name: s["st_value"] for s in ELFFile(f).get_section_by_name(".symtab").iter_symbols()
                       if s["st_info"]["type"] == "STT_FUNC"}
        assert order and all(symbols[name] % 64 == 0 for name in order), (i, {n: symbols[n] % 64 for n in order})


def test_an_object_rebuilt_in_place_is_read_again(tmp_path):
    """code_sections reads an object once, but a rebuilt one (a program's relink after
    its build) anew: its sections are never those of the file it replaced."""
    obj, src = tmp_path / "k.o", tmp_path / "k.c"
    for names in (["f"], ["f", "g"]):
        src.write_text("".join(f"int {n}(int x) {{ return x + {i}; }}\n" for i, n in enumerate(names)))
        subprocess.run(["gcc", "-O2", "-ffunction-sections", "-c", str(src), "-o", str(obj)], check=True)
        assert artifacts.code_sections(obj) == [f".text.{n}" for n in names]


def _target(seed: int, size: str = "4096"):
    from cpulab.measure.schedule.targets import Target
    art = artifacts.Artifact("/x", "h", "c", 1, "gcc", (), placeable=True)
    return Target("e", "sha256", "O2", {"size": size}, artifact=art, seed=seed)


def test_placements_are_drawn_from_the_run_seed_the_point_and_the_round():
    """A rerun (another seed) and every point of a sweep get placements of their own; the
    same seed, point and round the same one (a run repeated with --seed)."""
    rounds = range(40)
    a, again, other_run, other_point = _target(1), _target(1), _target(2), _target(1, "16384")
    assert [a.placement_at(r) for r in rounds] == [again.placement_at(r) for r in rounds]
    assert len({a.placement_at(r) for r in rounds}) == 40
    for b in (other_run, other_point):
        assert not {a.placement_at(r) for r in rounds} & {b.placement_at(r) for r in rounds}


def test_the_run_streams_are_independent():
    """One seed, streams by name: the executor's pads and the round order are not one
    sequence (two random.Random(seed) once were)."""
    from cpulab.measure import randomness
    draws = [[randomness.stream(5, name).random() for _ in range(4)] for name in ("rounds", "executor")]
    assert draws[0] != draws[1] and randomness.stream(5, "rounds").random() == draws[0][0]


def test_a_run_stores_its_seed_and_the_seed_repeats_its_placements(tmp_path):
    """Three runs of one point: the second given the first's stored seed runs the same
    placements in the same order; the third, given none, others."""
    from conftest import cpulab
    db = tmp_path / "s.sqlite"
    args = ("run", "-w", "sha256", "-v", "O2", "-p", "size=64", "--processes", "4", "--samples", "1",
            "--min-sample-time", "0.001", "--budget", "0")

    def placements(run_id: int) -> list:
        con = sqlite3.connect(db)
        return [r[0] for r in con.execute("SELECT s.placement FROM samples s JOIN results x ON x.id = s.result_id"
                                          " WHERE x.run_id = ? ORDER BY s.process", (run_id,))]
    env = {"CPULAB_CACHE_DIR": str(tmp_path / "cache")}  # its own, to see what a run leaves there
    assert cpulab(*args, db=db, env=env).returncode == 0
    seed = json.loads(sqlite3.connect(db).execute("SELECT plan FROM runs WHERE id = 1").fetchone()[0])["seed"]
    assert cpulab(*args, "--seed", str(seed), db=db, env=env).returncode == 0
    assert cpulab(*args, db=db, env=env).returncode == 0
    assert placements(1) == placements(2) and len(set(placements(1))) == 4
    assert not set(placements(3)) & set(placements(1))
    assert not list((tmp_path / "cache").glob("**/*.layout*"))  # each run removes the placements it linked
