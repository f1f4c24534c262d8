"""Why two variants differ: where the time goes, sampled, then the code side by side.

For each artifact: the kernel's functions (symbols that come from kernel.o), their
instruction counts and code size, and the loops in them (backward branches) with the
alignment of each loop's first instruction.  The hot region comes from a sampled
profile (the harness's --profile-code: interrupted instruction addresses, taken after
the timed samples): the function holding most samples, narrowed to the smallest loop in
it that holds at least half of them.  Both builds are lined up on the same function (by
symbol, clone suffixes such as .isra.0 aside), so the side-by-side compares the same
source region.  Without a profile the region is a static guess (the largest loop of the
code k_run reaches).  Two listings are aligned row by row with difflib on the
instruction text with absolute addresses replaced by symbol+offset and branch targets
inside the region by their position in it; registers, displacements and sizes are kept.
"""
from __future__ import annotations

import difflib
import re
import shutil
import subprocess
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from elftools.elf.elffile import ELFFile

from cpulab.measure.execute import Executor, HarnessJob, default_executor
from cpulab.model import Status

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


# ---- the sampled profile ----------------------------------------------------------------

PROFILE_SECONDS = 1.0  # ~10,000 addresses on a quiet host; a loaded KVM host delivered the 97 us timer at ~1 kHz


def symbol_address(executable: str, name: str) -> int | None:
    with open(executable, "rb") as f:
        symtab = ELFFile(f).get_section_by_name(".symtab")
        for sym in symtab.iter_symbols() if symtab else ():
            if sym.name == name:
                return sym["st_value"]
    return None


def profile(artifact_path: str, params: dict[str, str] | None = None, seconds: float = PROFILE_SECONDS,
            executor: Executor | None = None) -> dict:
    """Sample where an artifact's kernel spends its time -> {"pcs": {link-time address:
    count}, "ticks", "cycles_per_unit", "timer"}.  Addresses are moved from run time to the
    executable's own by main's offset (a PIE loads anywhere)."""
    job = HarnessJob(artifact_path, dict(params or {}), samples=3, timeout=60 + 10 * seconds, profile_code=seconds)
    out = (executor or default_executor()).execute(job)
    if out.status != Status.OK:
        raise RuntimeError(f"profiling {artifact_path}: {out.status}: {out.error}")
    prof = out.data["profile"]
    shift = int(prof["main"], 16) - (symbol_address(artifact_path, "main") or 0)
    # The fastest sample: other tenants of the core only ever add time.
    cyc = [c / out.data["work"] for c in out.data["cycles"] if c is not None]
    return {"pcs": {int(a, 16) - shift: n for a, n in prof["pcs"]}, "ticks": prof["ticks"],
            "period_us": prof["period_us"], "timer": out.data["timer"],
            "cycles_per_unit": min(cyc) if cyc else None, "unit": out.data["unit"]}


def attribute(funcs: dict[str, Function], pcs: dict[int, int]) -> Counter:
    """Put each sampled address on its instruction (an interrupted address is an
    instruction boundary); returns samples per function.  Addresses outside the kernel
    (harness, libc) count under '(outside the kernel)'."""
    where = {i.address: (name, i) for name, f in funcs.items() for i in f.instructions}
    per_func: Counter = Counter()
    for f in funcs.values():
        for i in f.instructions:
            i.samples = 0
    for addr, n in pcs.items():
        hit = where.get(addr)
        if hit:
            hit[1].samples += n
            per_func[hit[0]] += n
        else:
            per_func["(outside the kernel)"] += n
    return per_func


def stem(name: str) -> str:
    """A function's source name: GCC clone suffixes (.isra.0, .constprop.1) removed."""
    return name.split(".")[0]


def sampled_region(f: Function) -> Loop | None:
    """The smallest loop of f holding at least half of f's samples (None: the whole function)."""
    total = sum(i.samples for i in f.instructions)
    best = None
    for lp in f.loops():
        held = sum(i.samples for i in loop_listing(f, lp))
        if total and held * 2 >= total and (best is None or lp.instructions < best.instructions):
            best = lp
    return best


def region_summary(name: str, f: Function, lp: Loop | None, total: int) -> dict:
    insns = loop_listing(f, lp) if lp else f.instructions
    held = sum(i.samples for i in insns)
    kinds = Counter(k for i in insns for k in i.kinds())
    return {"function": name, "start": hex(insns[0].address), "loop": lp is not None,
            "instructions": len(insns), "bytes": lp.bytes if lp else f.size_bytes,
            "alignment": (lp.alignment if lp else Loop(insns[0].address, 0, 0, 0).alignment),
            "sample_share": held / total if total else None,
            "kinds": {k: kinds.get(k, 0) for k in ("load", "store", "branch", "vector", "fp-scalar")},
            "listing": [i.display for i in insns], "samples": [i.samples for i in insns],
            "_instructions": insns}


def mca_estimate(listing: list[str]) -> dict | None:
    """llvm-mca's cycles per iteration of a loop listing (a model, not a measurement)."""
    from cpulab.measure.probes.mca import mca_predict
    body = [re.sub(r"\s*<[^>]*>", "", t) for t in listing]
    # The closing backward branch goes to the loop top; other branches are dropped (the
    # model does not take them anyway).
    stmts = [t for t in body[:-1] if not t.split()[0].startswith("j")]
    last = body[-1].split()[0] if body else ""
    if not stmts:
        return None
    if last.startswith("j"):
        stmts.append(f"{last} 1b")
    return mca_predict("\n".join(stmts), as_loop=last.startswith("j"))


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


def summary_of(funcs: dict[str, Function], prof: dict | None = None, function: str | None = None) -> dict:
    """One build's code (a kernel's functions, or a program's); with a profile, the
    sampled region (in `function`'s stem when given, else in the hottest function)."""
    out = {
        "functions": [{"name": n, "instructions": len(f.instructions), "bytes": f.size_bytes,
                       "loops": len(f.loops())} for n, f in sorted(funcs.items())],
        "kernel_instructions": sum(len(f.instructions) for f in funcs.values()),
        "kernel_bytes": sum(f.size_bytes for f in funcs.values()),
        "hot_loop": None, "profile": None,
    }
    if prof:
        per_func = attribute(funcs, prof["pcs"])
        total = sum(per_func.values())
        ranked = [n for n, _ in per_func.most_common() if n in funcs]
        out["profile"] = {"ticks": total, "cycles_per_unit": prof["cycles_per_unit"], "unit": prof["unit"],
                          "functions": [{"name": n, "share": c / total} for n, c in per_func.most_common()]}
        same = [n for n in ranked if function and stem(n) == stem(function)]
        name = (same or ranked or [None])[0]
        if name:
            lp = sampled_region(funcs[name])
            out["hot_loop"] = region_summary(name, funcs[name], lp, total)
            out["hot_loop"]["lined_up"] = bool(same) or function is None
        return out
    hot = hot_loop(funcs)
    if hot:
        name, lp = hot
        out["hot_loop"] = region_summary(name, funcs[name], lp, 0)
    return out


def why(a_name: str, b_name: str, a: dict, b: dict) -> str:
    """One sentence from the evidence: the region, its share of samples, instructions per
    iteration, what kind they are, alignment, and the measured cycles per unit."""
    ha, hb = a["hot_loop"], b["hot_loop"]
    if not ha or not hb:
        return "no hot region found in one of the builds"
    what = "loop" if ha["loop"] and hb["loop"] else "function"
    parts = [f"hot {what} {'in ' if what == 'loop' else ''}{ha['function']}"
             + (f" / {hb['function']}" if hb["function"] != ha["function"] else "")]
    if ha["sample_share"] is not None and hb["sample_share"] is not None:
        parts[0] += f" ({ha['sample_share']:.0%} / {hb['sample_share']:.0%} of samples)"
    if not hb.get("lined_up", True):
        parts.append(f"{a_name}'s {ha['function']} has no counterpart in {b_name} (inlined or renamed)")
    n_a, n_b = ha["instructions"], hb["instructions"]
    parts.append(f"{n_a} -> {n_b} instructions per iteration" + (f" ({n_b / n_a:.1f}x)" if n_a and n_a != n_b else ""))
    diffs = [f"{k} {ha['kinds'][k]} -> {hb['kinds'][k]}" for k in ha["kinds"] if ha["kinds"][k] != hb["kinds"][k]]
    if diffs:
        parts.append(", ".join(diffs))
    if ha["alignment"] != hb["alignment"]:
        parts.append(f"alignment {ha['alignment']} vs {hb['alignment']}")
    pa, pb = a.get("profile") or {}, b.get("profile") or {}
    if pa.get("cycles_per_unit") and pb.get("cycles_per_unit"):
        parts.append(f"measured {pa['cycles_per_unit']:.3g} -> {pb['cycles_per_unit']:.3g} cycles/{pa['unit'].rstrip('s')}")
    return f"{b_name} against {a_name}: " + "; ".join(parts) + "."


def explain(artifact_a: str, artifact_b: str, params: dict[str, str] | None = None, profile_code: float = 0.0,
            names: tuple[str, str] = ("A", "B"), executor: Executor | None = None) -> dict:
    """Both builds' kernel code, their hot regions lined up on the same function and
    aligned side by side, and a sentence of why.  profile_code: seconds of sampled
    profile of each artifact at `params` to find the regions (0: the static guess)."""
    pa = profile(artifact_a, params, profile_code, executor) if profile_code else None
    pb = profile(artifact_b, params, profile_code, executor) if profile_code else None
    return compare_code(kernel_functions(artifact_a), kernel_functions(artifact_b), pa, pb, names,
                        Path(artifact_a).read_bytes() == Path(artifact_b).read_bytes())


def compare_code(funcs_a: dict[str, Function], funcs_b: dict[str, Function], pa: dict | None, pb: dict | None,
                 names: tuple[str, str], identical: bool) -> dict:
    """Two builds' code summaries, their hot regions lined up on the same function (B on
    A's hottest) and aligned side by side, and the sentence of why."""
    a = summary_of(funcs_a, pa)
    b = summary_of(funcs_b, pb, a["hot_loop"]["function"] if a["hot_loop"] else None)
    rows = []
    if a["hot_loop"] and b["hot_loop"]:
        rows = side_by_side(a["hot_loop"].pop("_instructions"), b["hot_loop"].pop("_instructions"))
        for side in (a, b):
            if side["hot_loop"]["loop"] and shutil.which("llvm-mca"):
                side["hot_loop"]["mca"] = mca_estimate(side["hot_loop"]["listing"])
    for side in (a, b):
        if side["hot_loop"]:
            side["hot_loop"].pop("_instructions", None)
    return {"a": a, "b": b, "rows": rows, "why": why(*names, a, b), "profiled": pa is not None and pb is not None,
            "identical": identical}


# ---- whole programs (explain --program) ---------------------------------------------------

PRELOAD_SOURCE = Path(__file__).resolve().parents[2] / "native" / "profile_preload.c"


def file_offset_to_address(executable: str, offset: int) -> int | None:
    """The link-time address of a byte of the file, through its PT_LOAD segments."""
    with open(executable, "rb") as f:
        for seg in ELFFile(f).iter_segments():
            if seg["p_type"] == "PT_LOAD" and seg["p_offset"] <= offset < seg["p_offset"] + seg["p_filesz"]:
                return offset - seg["p_offset"] + seg["p_vaddr"]
    return None


def read_program_profile(text: str, executable: str) -> dict[int, int] | None:
    """A preload profile file -> {link-time address in `executable`: samples}, or None if
    this process did not map the executable (the launcher, a shell in between)."""
    real = str(Path(executable).resolve())
    maps, pcs = [], Counter()
    for line in text.splitlines():
        kind, _, rest = line.partition(" ")
        if kind == "pc":
            pcs[int(rest, 16)] += 1
        elif kind == "map":
            f = rest.split(maxsplit=5)
            if len(f) == 6 and f[5].strip() == real:
                lo, hi = (int(x, 16) for x in f[0].split("-"))
                maps.append((lo, hi, int(f[2], 16)))
    if not maps:
        return None
    out: Counter = Counter()
    for pc, n in pcs.items():
        for lo, hi, off in maps:
            if lo <= pc < hi and (addr := file_offset_to_address(executable, pc - lo + off)) is not None:
                out[addr] += n
                break
    return dict(out)


def profile_program(executable: str, argv: list[str], env: dict[str, str] | None = None, timeout: float = 300,
                    executor: Executor | None = None) -> dict:
    """Run a built program once with the sampling preload library -> a profile of the
    addresses in its own binary (CPU time, 1 ms ticks)."""
    import tempfile

    from cpulab.build.artifacts import build_tool
    from cpulab.measure.processes import ProcessJob, launcher
    lib = build_tool(PRELOAD_SOURCE, ("-O2", "-shared", "-fPIC"), headers=(PRELOAD_SOURCE.parent / "profile.h",))
    with tempfile.TemporaryDirectory(prefix="cpulab-profile-") as d:
        job = ProcessJob(argv, launcher(), check=None, timeout=timeout,
                         env={**(env or {}), "LD_PRELOAD": str(lib), "CPULAB_PROFILE_OUT": f"{d}/profile"})
        out = (executor or default_executor()).execute(job)
        if out.status != Status.OK:
            raise RuntimeError(f"profiling {argv[0]}: {out.status}: {out.error}")
        found = [p for f in sorted(Path(d).iterdir())
                 if (p := read_program_profile(f.read_text(), executable)) is not None]
    if not found:
        raise RuntimeError(f"profiling {argv[0]}: no profile of {executable} came back "
                           "(it is not the program run, or it left by _exit or a signal)")
    pcs = found[0]
    if not pcs:
        raise RuntimeError(f"profiling {argv[0]}: it used less than one tick (1 ms) of CPU time in its own "
                           "code: nothing to sample; give it more work")
    return {"pcs": pcs, "ticks": sum(pcs.values()), "period_us": 1000, "timer": "itimer-prof",
            "cycles_per_unit": None, "unit": "runs", "wall_s": out.data.get("wall_s")}


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


def explain_programs(exe_a: str, argv_a: list[str], exe_b: str, argv_b: list[str], names: tuple[str, str],
                     profile_code: bool = True, executor: Executor | None = None) -> dict:
    """Two builds of a program: the functions that differ most, and (profiled) the hot
    region of each lined up on the same function, side by side."""
    funcs_a = {n: f for n, f in disassemble(Path(exe_a)).items() if f.instructions}
    funcs_b = {n: f for n, f in disassemble(Path(exe_b)).items() if f.instructions}
    pa = profile_program(exe_a, argv_a, executor=executor) if profile_code else None
    pb = profile_program(exe_b, argv_b, executor=executor) if profile_code else None
    doc = compare_code(funcs_a, funcs_b, pa, pb, names, Path(exe_a).read_bytes() == Path(exe_b).read_bytes())
    doc["differences"] = size_differences(funcs_a, funcs_b)
    return doc
