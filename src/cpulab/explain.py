"""Why two variants differ: the kernel's generated code side by side.

For each artifact: the kernel's functions (symbols that come from kernel.o), their
instruction counts and code size, the loops in them (backward branches) with the
alignment of each loop's first instruction, and the hot loop.  Two listings are aligned
row by row with difflib on the instruction text, addresses and symbol offsets removed,
so that what one compiler did and the other did not stands out.
"""
from __future__ import annotations

import difflib
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from elftools.elf.elffile import ELFFile

_LINE = re.compile(r"^\s*([0-9a-f]+):\s+(.*)$")
_FUNC = re.compile(r"^([0-9a-f]+) <(.+)>:$")
_BRANCH = re.compile(r"^(j[a-z]+|loop\w*)\s+([0-9a-f]+)\b")


@dataclass
class Instruction:
    address: int
    text: str  # as objdump prints it, Intel syntax

    @property
    def normalised(self) -> str:
        """The text without addresses and symbol annotations, for aligning two listings."""
        t = re.sub(r"<[^>]*>", "", self.text)
        t = re.sub(r"\b[0-9a-f]{4,}\b", "ADDR", t)
        return " ".join(t.split())


@dataclass
class Loop:
    start: int
    end: int  # address of the backward branch
    instructions: int
    bytes: int

    @property
    def alignment(self) -> int:
        """The largest power of two (up to 64) dividing the loop's first address."""
        a = 1
        while a < 64 and self.start % (a * 2) == 0:
            a *= 2
        return a


@dataclass
class Function:
    name: str
    instructions: list[Instruction] = field(default_factory=list)
    size_bytes: int = 0

    def loops(self) -> list[Loop]:
        addrs = [i.address for i in self.instructions]
        out = []
        for idx, ins in enumerate(self.instructions):
            m = _BRANCH.match(ins.text)
            if not m:
                continue
            target = int(m.group(2), 16)
            if addrs[0] <= target <= ins.address:
                first = addrs.index(target) if target in addrs else 0
                nxt = addrs[idx + 1] if idx + 1 < len(addrs) else ins.address + 2
                out.append(Loop(target, ins.address, idx - first + 1, nxt - target))
        return out


def kernel_symbols(kernel_object: Path) -> set[str]:
    """Names of the functions defined in kernel.o."""
    with open(kernel_object, "rb") as f:
        elf = ELFFile(f)
        symtab = elf.get_section_by_name(".symtab")
        if symtab is None:
            return set()
        return {s.name for s in symtab.iter_symbols()
                if s["st_info"]["type"] == "STT_FUNC" and s["st_shndx"] != "SHN_UNDEF" and s.name}


def disassemble(executable: Path) -> dict[str, Function]:
    """Every function of an executable, Intel syntax, via objdump."""
    tool = shutil.which("objdump") or shutil.which("llvm-objdump")
    if tool is None:
        raise RuntimeError("no objdump: install binutils")
    p = subprocess.run([tool, "-d", "--no-show-raw-insn", "-M", "intel", str(executable)],
                       capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        raise RuntimeError(f"{tool} failed on {executable}: {p.stderr.strip()[:200]}")
    funcs: dict[str, Function] = {}
    cur: Function | None = None
    for line in p.stdout.splitlines():
        if m := _FUNC.match(line):
            cur = funcs.setdefault(m.group(2), Function(m.group(2)))
        elif cur is not None and (m := _LINE.match(line)):
            text = m.group(2).strip()
            if text and not text.startswith("(bad)"):
                cur.instructions.append(Instruction(int(m.group(1), 16), text))
    for f in funcs.values():
        if f.instructions:
            f.size_bytes = f.instructions[-1].address - f.instructions[0].address + 1
    return funcs


def kernel_functions(artifact_path: str) -> dict[str, Function]:
    """The functions of an artifact that come from its kernel (not the harness or libc).
    LTO and GCC clones add suffixes such as .constprop.0 or .lto_priv.0: match the stem."""
    exe = Path(artifact_path)
    names = kernel_symbols(exe.parent / "kernel.o")
    stems = {n.split(".")[0] for n in names}
    return {n: f for n, f in disassemble(exe).items() if n.split(".")[0] in stems and f.instructions}


_CALL = re.compile(r"^(?:call|jmp)\s+[0-9a-f]+ <([^>+]+)>")


def timed_functions(funcs: dict[str, Function], root: str = "k_run") -> dict[str, Function]:
    """k_run and every kernel function it calls or jumps to, transitively: the timed code."""
    seen, todo = set(), [root]
    while todo:
        name = todo.pop()
        if name in seen or name not in funcs:
            continue
        seen.add(name)
        todo += [m.group(1) for i in funcs[name].instructions if (m := _CALL.match(i.text))]
    return {n: funcs[n] for n in seen}


def hot_loop(funcs: dict[str, Function]) -> tuple[str, Loop] | None:
    """The loop of the timed code that most likely carries the work: the largest loop that
    does not contain another loop holding more than half of its instructions."""
    cands = [(name, lp) for name, f in timed_functions(funcs).items() for lp in f.loops()]
    if not cands:
        return None

    def heavy_inner(name, lp):
        return any(o is not lp and on == name and lp.start <= o.start and o.end <= lp.end
                   and o.instructions > lp.instructions / 2 for on, o in cands)

    best = [(n, lp) for n, lp in cands if not heavy_inner(n, lp)] or cands
    return max(best, key=lambda c: c[1].instructions)


def loop_listing(f: Function, lp: Loop) -> list[Instruction]:
    return [i for i in f.instructions if lp.start <= i.address <= lp.end]


def side_by_side(a: list[Instruction], b: list[Instruction]) -> list[tuple[str, str, str]]:
    """Rows (left, right, tag): tag is '=' same, '~' changed, '<' only left, '>' only right."""
    sm = difflib.SequenceMatcher(a=[i.normalised for i in a], b=[i.normalised for i in b], autojunk=False)
    rows = []
    for op, i1, i2, j1, j2 in sm.get_opcodes():
        if op == "equal":
            rows += [(a[i].text, b[j].text, "=") for i, j in zip(range(i1, i2), range(j1, j2))]
        else:
            n = max(i2 - i1, j2 - j1)
            for k in range(n):
                left = a[i1 + k].text if i1 + k < i2 else ""
                right = b[j1 + k].text if j1 + k < j2 else ""
                rows.append((left, right, "~" if left and right else "<" if left else ">"))
    return rows


def summary_of(artifact_path: str) -> dict:
    funcs = kernel_functions(artifact_path)
    hot = hot_loop(funcs)
    out = {
        "functions": [{"name": n, "instructions": len(f.instructions), "bytes": f.size_bytes,
                       "loops": len(f.loops())} for n, f in sorted(funcs.items())],
        "kernel_instructions": sum(len(f.instructions) for f in funcs.values()),
        "kernel_bytes": sum(f.size_bytes for f in funcs.values()),
        "hot_loop": None,
    }
    if hot:
        name, lp = hot
        out["hot_loop"] = {"function": name, "start": hex(lp.start), "instructions": lp.instructions,
                           "bytes": lp.bytes, "alignment": lp.alignment,
                           "listing": [i.text for i in loop_listing(funcs[name], lp)]}
    return out


def explain(artifact_a: str, artifact_b: str) -> dict:
    """Both artifacts' kernel code summaries and their hot loops aligned side by side."""
    a, b = summary_of(artifact_a), summary_of(artifact_b)
    rows = []
    if a["hot_loop"] and b["hot_loop"]:
        la = [Instruction(0, t) for t in a["hot_loop"]["listing"]]
        lb = [Instruction(0, t) for t in b["hot_loop"]["listing"]]
        rows = side_by_side(la, lb)
    return {"a": a, "b": b, "rows": rows,
            "identical": Path(artifact_a).read_bytes() == Path(artifact_b).read_bytes()}
