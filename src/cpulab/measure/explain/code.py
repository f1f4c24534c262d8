"""The generated code read back from an executable: the kernel's functions, their
instructions, and the loops in them (backward branches) with each loop's alignment.

Only symbols that come from the kernel's objects (kernel.o, a user's library sources) count.  Two listings are aligned row by row with
difflib on the instruction text with absolute addresses replaced by symbol+offset and
branch targets inside the region by their position in it; registers, displacements and
sizes are kept.
"""
from __future__ import annotations

import difflib
import re
import shutil
import subprocess
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from cpulab.compile.artifacts import kernel_objects
from cpulab.measure.symbols import machine, symbols

_LINE = re.compile(r"^\s*([0-9a-f]+):\s+(.*)$")
_FUNC = re.compile(r"^([0-9a-f]+) <(.+)>:$")
_BRANCH = re.compile(r"^(j[a-z]+|loop\w*)\s+([0-9a-f]+)\b")


# objdump's "jne 1234 <f+0x14>" and "lea rax,[rip+0x2e3c]        # 5010 <table>"
_TARGET = re.compile(r"\b[0-9a-f]+ (<[^>]+>)")
_RIP_COMMENT = re.compile(r"\[rip([+-]0x[0-9a-f]+)?\](.*?)\s*#\s*[0-9a-f]+ (<[^>]+>)\s*$")


@dataclass
class Instruction:
    address: int
    text: str  # as objdump prints it, Intel syntax
    samples: int = 0

    @property
    def display(self) -> str:
        """Operands intact (registers, displacements, sizes); only absolute addresses are
        replaced by symbol+offset, which is what two builds can share."""
        t = _RIP_COMMENT.sub(lambda m: f"[rip+{m.group(3)}]{m.group(2)}", self.text)
        t = _TARGET.sub(lambda m: m.group(1), t)
        return " ".join(t.split())

    @property
    def normalised(self) -> str:
        """The display text with symbol offsets dropped, for aligning two listings."""
        return re.sub(r"<([^>+]+)\+0x[0-9a-f]+>", r"<\1+?>", self.display)

    @property
    def mnemonic(self) -> str:
        return self.text.split(None, 1)[0] if self.text else ""

    def kinds(self) -> set[str]:
        """What the instruction does, for counts per iteration: load, store, branch,
        fp-scalar (x87 or ...ss/...sd), vector (packed SIMD)."""
        m, ops = self.mnemonic, self.text.split(None, 1)[1] if " " in self.text else ""
        out = set()
        if m.startswith("j") or m in ("call", "ret", "loop"):
            out.add("branch")
        elif m not in ("lea", "nop") and not m.startswith("prefetch") and "[" in ops:
            dst, _, src = ops.partition(",")
            if "[" in src or (m.startswith(("cmp", "test", "push")) and "[" in dst):
                out.add("load")
            if "[" in dst and not m.startswith(("cmp", "test")):
                out.add("store")
                if m not in ("mov", "movs", "stos") and not m.startswith(("mov", "vmov")):
                    out.add("load")  # read-modify-write
        if m.startswith("f") or re.search(r"(ss|sd)$", m):
            out.add("fp-scalar")
        elif re.search(r"[xyz]mm", ops):
            out.add("vector")
        return out


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


def kernel_symbols(obj: Path) -> set[str]:
    """Names of the functions defined in an object."""
    return {s.name for s in symbols(obj) if s.type == "STT_FUNC" and s.defined and s.name}


def is_x86(executable: Path) -> bool:
    return machine(executable) in (62, 3)  # EM_X86_64, EM_386


def disassemble(executable: Path, span: tuple[int, int | None] | None = None) -> dict[str, Function]:
    """Every function of an executable (or those starting in `span`, [start, stop) in
    link-time addresses, stop None: to the end), Intel syntax, via objdump (another
    machine's code, an ARM cross build's, via llvm-objdump, which reads every
    architecture)."""
    x86 = is_x86(executable)
    tool = (shutil.which("objdump") if x86 else None) or shutil.which("llvm-objdump")
    if tool is None:
        raise RuntimeError("no objdump: install binutils (or llvm for another machine's code)")
    within = []
    if span:
        within = [f"--start-address={span[0]:#x}"] + ([f"--stop-address={span[1]:#x}"] if span[1] else [])
    p = subprocess.run([tool, "-d", "--no-show-raw-insn", *(["-M", "intel"] if x86 else []), *within,
                        str(executable)], capture_output=True, text=True, timeout=120)
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
    LTO and GCC clones add suffixes such as .constprop.0 or .lto_priv.0: match the stem.
    Only their span is disassembled (_span): a static build's libc took 0.3 s of objdump
    and parsing per read (model 167; 19 reads in the seeds), its kernel 0.01-0.1."""
    exe = Path(artifact_path)
    names = set().union(*(kernel_symbols(o) for o in kernel_objects(exe.parent)))
    stems = {n.split(".")[0] for n in names}
    listed = disassemble(exe, _span(exe, stems))
    return {n: f for n, f in listed.items() if n.split(".")[0] in stems and f.instructions}


def _span(executable: Path, stems: set[str]) -> tuple[int, int | None] | None:
    """[start, stop) of the addresses where the executable's functions named by `stems`
    are listed: from the first one's start to the next symbol after the last one (objdump
    lists a function up to the next symbol, its alignment padding too), or None when the
    symbol table names none of them."""
    # ARM's mapping symbols ($a, $t, $d: code or data follows) start no listing; a Thumb
    # function's value is its address plus one
    thumb = ~1 if machine(executable) == 40 else ~0  # EM_ARM
    listed = [(s.value & thumb, s.type, s.name) for s in symbols(executable)
              if s.value and s.type not in ("STT_FILE", "STT_SECTION") and not s.name.startswith("$")]
    starts = sorted({a for a, kind, name in listed if kind == "STT_FUNC" and name.split(".")[0] in stems})
    if not starts:
        return None
    after = [a for a, _, _ in listed if a > starts[-1]]
    return starts[0], min(after) if after else None


_CALL = re.compile(r"^(?:call|jmp|bl|b)\s+(?:0x)?[0-9a-f]+ <([^>+]+)>")


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


_VREG = re.compile(r"\b([xyz])mm(\d+)\b")
_WIDTH = {"x": 128, "y": 256, "z": 512}


def vector_bits(listing: list[Instruction]) -> int:
    """The widest SIMD register the packed instructions of a listing use (0: none, the
    floating point is scalar or x87): how many lanes a vector build actually got."""
    return max((_WIDTH[m.group(1)] for i in listing if "vector" in i.kinds() for m in _VREG.finditer(i.text)),
               default=0)


def is_x87(listing: list[Instruction]) -> bool:
    return any(i.mnemonic.startswith("f") and "fp-scalar" in i.kinds() for i in listing)


def carried_chain(listing: list[Instruction]) -> list[str] | None:
    """The longest loop-carried chain of a loop through one SIMD register: the
    instructions writing a register that every writer also reads (an accumulator: `addsd
    xmm0, xmm1`, `vaddsd xmm0, xmm0, xmm1`, any FMA), each waiting for the one before,
    across iterations too.  Its length times its instructions' latency bounds the
    iteration from below, however wide the core.  None for x87 code, whose stack
    registers this does not follow."""
    if is_x87(listing):
        return None
    writers: dict[str, list[tuple[str, bool]]] = {}
    for i in listing:
        ops = i.text.split(None, 1)[1] if " " in i.text else ""
        regs = [f"v{m.group(2)}" for m in _VREG.finditer(ops)]
        if not regs or not _VREG.match(ops.strip()):  # the destination is not a SIMD register
            continue
        dest, sources = regs[0], regs[1:]
        two_operand = not i.mnemonic.startswith("v")  # SSE: the destination is a source
        reads = (two_operand and not i.mnemonic.startswith(("mov", "cvt", "pxor", "xorp", "unpck", "shuf")))\
            or "fma" in i.mnemonic or dest in sources
        writers.setdefault(dest, []).append((i.mnemonic, reads))
    chains = [[m for m, _ in w] for w in writers.values() if all(r for _, r in w)]
    return max(chains, key=len, default=[])


# The helpers by which a soft-float build does its floating point: libgcc's and the ARM
# EABI's (__adddf3, __aeabi_dmul, ...).
_SOFT_FLOAT = re.compile(r"<(__aeabi_[dfl][a-z0-9]*|__(?:add|sub|mul|div|neg|cmp|fix|float|extend|trunc)"
                         r"[a-z]*[sd]f[0-9a-z]*)>")
_FP_MNEMONIC = re.compile(r"^(v[a-z]+\.f(?:32|64)|f(?:add|sub|mul|div|madd|msub|nmul|sqrt)\b|vf?n?m[la][as]\.f)")


def float_style(funcs: dict[str, Function]) -> dict:
    """How the timed code does its floating point, for a build read without a profile
    (a cross build): the soft-float helpers it calls and its floating-point instructions
    (ARM VFP's vmla.f64, AArch64's fmadd), each with how often it appears."""
    calls: Counter = Counter()
    fp: Counter = Counter()
    for f in timed_functions(funcs).values():
        for i in f.instructions:
            if m := _SOFT_FLOAT.search(i.text):
                calls[m.group(1)] += 1
            elif _FP_MNEMONIC.match(i.text):
                fp[i.mnemonic] += 1
    return {"soft_float_calls": dict(calls.most_common()), "fp_instructions": dict(fp.most_common(6))}


def loop_listing(f: Function, lp: Loop) -> list[Instruction]:
    return [i for i in f.instructions if lp.start <= i.address <= lp.end]


# ---- the sampled profile ----------------------------------------------------------------

def side_by_side(a: list[Instruction], b: list[Instruction]) -> list[tuple[str, str, str]]:
    """Rows (left, right, tag): tag is '=' same, '~' changed, '<' only left, '>' only right."""
    sm = difflib.SequenceMatcher(a=[i.normalised for i in a], b=[i.normalised for i in b], autojunk=False)
    rows = []
    for op, i1, i2, j1, j2 in sm.get_opcodes():
        if op == "equal":
            rows += [(a[i].display, b[j].display, "=") for i, j in zip(range(i1, i2), range(j1, j2))]
        else:
            n = max(i2 - i1, j2 - j1)
            for k in range(n):
                left = a[i1 + k].display if i1 + k < i2 else ""
                right = b[j1 + k].display if j1 + k < j2 else ""
                rows.append((left, right, "~" if left and right else "<" if left else ">"))
    return rows


# ---- whole programs (explain --program) ---------------------------------------------------

def size_differences(funcs_a: dict[str, Function], funcs_b: dict[str, Function], limit: int = 15) -> list[dict]:
    """The functions whose code differs most between two builds (by symbol, clone
    suffixes aside): size in bytes and instructions on each side, largest change first."""
    by_stem = lambda funcs: {stem(n): f for n, f in funcs.items()}
    sa, sb = by_stem(funcs_a), by_stem(funcs_b)
    rows = []
    for name in set(sa) | set(sb):
        fa, fb = sa.get(name), sb.get(name)
        if fa and fb and [i.normalised for i in fa.instructions] == [i.normalised for i in fb.instructions]:
            continue
        rows.append({"function": name, "a_bytes": fa.size_bytes if fa else None, "b_bytes": fb.size_bytes if fb else None,
                     "a_instructions": len(fa.instructions) if fa else None,
                     "b_instructions": len(fb.instructions) if fb else None})
    rows.sort(key=lambda r: -abs((r["b_bytes"] or 0) - (r["a_bytes"] or 0)))
    return rows[:limit]


def stem(name: str) -> str:
    """A function's source name: GCC clone suffixes (.isra.0, .constprop.1) removed."""
    return name.split(".")[0]
