"""What the placements of an artifact are: where its code sits, and proof that the code
itself is the same in each (artifacts.py links the one kernel.o, and a user's library
objects, under random layouts).

A function's bytes in a placement are compared with its bytes in its object outside the
fields the linker fills in (relocations: call targets, RIP-relative addresses), which
must change when the code moves.  Read with pyelftools; x86-64 objects only (the
relocation sizes are that ABI's).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from elftools.elf.elffile import ELFFile
from elftools.elf.relocation import RelocationSection

from cpulab.compile.artifacts import Artifact, kernel_objects, place
from cpulab.compile.relink import Relink

PAGE = 4096
# x86-64 relocation types that fill 8 bytes (R_X86_64_64, _PC64, _GOTOFF64, _GOTPC64);
# every other type used in code fills 4.  GOTPCRELX and REX_GOTPCRELX let the linker
# rewrite the two bytes before the field too (mov from the GOT becomes lea).
_WIDE = {1, 24, 25, 29}
_RELAXABLE = {41, 42}


@dataclass(frozen=True)
class Placements:
    """One artifact's placements: the timed function's address modulo a page in each,
    the order of the kernel's functions (its library's too) in each (names by address),
    and those functions whose linked bytes differ from the object's in any of them (outside
    relocated fields; empty when the code is the same everywhere)."""
    offsets: tuple[int, ...]
    orders: tuple[tuple[str, ...], ...]
    functions: int
    differing: tuple[str, ...]


def _object_functions(obj: Path) -> dict[str, tuple[bytes, bytes]] | None:
    """Each defined function of an x86-64 object: its bytes, and a mask with 1 where the
    linker fills a relocated field; None for another machine."""
    with open(obj, "rb") as f:
        elf = ELFFile(f)
        if elf["e_machine"] != "EM_X86_64":
            return None
        code = {i: sec.data() for i, sec in enumerate(elf.iter_sections())
                if sec["sh_flags"] & 0x4 and sec["sh_type"] == "SHT_PROGBITS"}  # SHF_EXECINSTR
        masks = {i: bytearray(len(data)) for i, data in code.items()}
        for sec in elf.iter_sections():
            if isinstance(sec, RelocationSection) and sec["sh_info"] in masks:
                for rel in sec.iter_relocations():
                    kind, at = rel["r_info_type"], rel["r_offset"]
                    lo, hi = at - (2 if kind in _RELAXABLE else 0), at + (8 if kind in _WIDE else 4)
                    masks[sec["sh_info"]][lo:hi] = b"\1" * (hi - lo)
        out = {}
        for sym in elf.get_section_by_name(".symtab").iter_symbols():
            i, start, size = sym["st_shndx"], sym["st_value"], sym["st_size"]
            if sym["st_info"]["type"] == "STT_FUNC" and size and i in code:
                out[sym.name] = (code[i][start:start + size], bytes(masks[i][start:start + size]))
        return out


def _linked_matches(exe: Path, functions: dict[str, tuple[bytes, bytes]],
                    timed: str = "k_run") -> tuple[int, tuple[str, ...], set[str]]:
    """The timed function's address modulo a page in a linked executable, the object's functions in
    address order, and the names of the functions whose linked bytes equal the object's
    outside the relocated fields."""
    with open(exe, "rb") as f:
        elf = ELFFile(f)
        segments = [s for s in elf.iter_segments() if s["p_type"] == "PT_LOAD"]

        def read(addr: int, size: int) -> bytes:
            seg = next(s for s in segments if s["p_vaddr"] <= addr < s["p_vaddr"] + s["p_filesz"])
            f.seek(seg["p_offset"] + addr - seg["p_vaddr"])
            return f.read(size)

        offset, same, at = -1, set(), {}
        for sym in elf.get_section_by_name(".symtab").iter_symbols():
            if sym.name == timed:
                offset = sym["st_value"] % PAGE
            want = functions.get(sym.name)
            if want and sym["st_info"]["type"] == "STT_FUNC":
                at[sym.name] = sym["st_value"]
            if want and sym["st_info"]["type"] == "STT_FUNC" and sym["st_size"] == len(want[0]):
                got = read(sym["st_value"], sym["st_size"])
                if all(g == w for g, w, m in zip(got, *want) if not m):
                    same.add(sym.name)
        return offset, tuple(sorted(at, key=at.get)), same


def inspect(art: Artifact, placements: int) -> Placements | None:
    """The first `placements` placements of an artifact (linked if they are not yet), or
    None when its objects are not x86-64."""
    return inspect_linked(kernel_objects(Path(art.path).parent), [Path(place(art, i)) for i in range(placements)])


def inspect_program(relink: Relink, layouts: list[int]) -> Placements | None:
    """A relinked program's layouts (compile/relink.py), as `inspect` reads a kernel's: its
    objects' functions, `main`'s offset in a page."""
    return inspect_linked([Path(o) for o in relink.objects()], [Path(relink.place(i)) for i in layouts], "main")


def inspect_linked(objects: list[Path], exes: list[Path], timed: str = "k_run") -> Placements | None:
    """Linked executables read against the objects they were linked from; None when the
    objects are not x86-64."""
    read = [_object_functions(o) for o in objects]
    if any(r is None for r in read):
        return None
    functions = {name: f for r in read for name, f in r.items()}
    offsets, orders, differing = [], [], set()
    for exe in exes:
        offset, order, same = _linked_matches(exe, functions, timed)
        offsets.append(offset)
        orders.append(order)
        differing |= set(functions) - same
    return Placements(tuple(offsets), tuple(orders), len(functions), tuple(sorted(differing)))
