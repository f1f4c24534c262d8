"""The body of a probe: statements, the rules a body must follow, and GNU as.

A body is x86-64 assembly, Intel (default) or AT&T syntax, statements separated by ';'
or newlines.  assemble() runs the body alone through GNU as and objdump: a body that
does not assemble fails with the assembler's own message before anything is built.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path


class ProbeError(Exception):
    """The body does not assemble, breaks the rules, or the probe could not run.
    The message is the assembler's (or harness's) own first lines."""


GPR64 = ["rax", "rbx", "rcx", "rdx", "rsi", "rdi", "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15"]
_ALIASES = {
    "rax": "eax ax al ah", "rbx": "ebx bx bl bh", "rcx": "ecx cx cl ch", "rdx": "edx dx dl dh",
    "rsi": "esi si sil", "rdi": "edi di dil",
    **{f"r{i}": f"r{i}d r{i}w r{i}b" for i in range(8, 16)},
}
# Any name of a general register -> its 64-bit name.
TO64 = {alias: r for r, names in _ALIASES.items() for alias in [r, *names.split()]}


def split_body(body: str) -> list[str]:
    """Statements of a body: separated by ';' or newlines; blank ones dropped."""
    return [s.strip() for s in re.split(r"[;\n]", body) if s.strip()]


def expand_loop(stmt: str) -> str:
    """An operand spelled LOOP (not the mnemonic) becomes the local label 1b."""
    head, _, rest = stmt.partition(" ")
    if not rest:
        return stmt
    return head + " " + re.sub(r"\bLOOP\b", "1b", rest)


def check_rules(stmts: list[str], as_loop: bool, counter: str) -> None:
    text = " ".join(stmts).lower()
    bad = re.findall(r"(?<![\w.])%?(rsp|esp|spl|rbp|ebp|bpl|sp|bp)\b", text)
    if bad:
        raise ProbeError(f"the body may not name {bad[0]}: rsp/rbp belong to the compiler "
                         "(balanced push/pop are allowed)")
    if not as_loop and re.search(r"(?<![\w.])%?r15[dwb]?\b", text):
        raise ProbeError("r15 is the probe's loop counter: the body may not use it "
                         "(or pass as_loop=True with its own loop control)")
    if as_loop and not re.search(r"\b1b\b", text):
        raise ProbeError("as_loop=True: the body must branch back to the loop top with "
                         "'jnz 1b' (or 'jnz LOOP')")
    if as_loop and TO64.get(counter) in (None, "rsi"):
        raise ProbeError(f"counter must be a general register other than rsi/rsp/rbp, got {counter!r}")
    if as_loop:
        names = [TO64[counter], *_ALIASES[TO64[counter]].split()]
        if not re.search(r"(?<![\w.])%?(" + "|".join(names) + r")\b", text):
            raise ProbeError(f"as_loop=True: the body never touches its counter {counter} "
                             "(pass counter= the register its loop counts down)")


def assemble(stmts: list[str], syntax: str = "intel", as_loop: bool = False) -> list[str]:
    """Assemble the body alone (GNU as, x86-64) and disassemble it: the instruction list.

    Raises ProbeError with the assembler's own message (statement k is line k) if it
    does not assemble.
    """
    if syntax not in ("intel", "att"):
        raise ProbeError(f"syntax must be 'intel' or 'att', got {syntax!r}")
    asm = shutil.which("as")
    objdump = shutil.which("objdump")
    if not asm or not objdump:
        raise ProbeError("GNU as and objdump are needed (install binutils)")
    lines = list(stmts)
    if as_loop:
        lines[0] = "1: " + lines[0]  # same line: line numbers stay statement numbers
    flags = ["--64", "-msyntax=intel", "-mnaked-reg"] if syntax == "intel" else ["--64", "-msyntax=att"]
    with tempfile.TemporaryDirectory(prefix="cpulab-probe-") as d:
        Path(d, "body.s").write_text("\n".join(lines) + "\n")
        p = subprocess.run([asm, *flags, "body.s", "-o", "body.o"], cwd=d, capture_output=True, text=True)
        if p.returncode != 0:
            msg = [ln for ln in p.stderr.splitlines() if ln.strip() and "Assembler messages" not in ln]
            raise ProbeError("\n".join(msg[:4]) or "the assembler rejected the body")
        out = subprocess.run([objdump, "-d", "-M", "intel", "--no-show-raw-insn", "body.o"],
                             cwd=d, capture_output=True, text=True, check=True).stdout
    insns = []
    for ln in out.splitlines():
        m = re.match(r"^\s+[0-9a-f]+:\s+(.+)$", ln)
        if m:
            insns.append(re.sub(r"\s+", " ", m.group(1).strip()))
    if not insns:
        raise ProbeError("the body holds no instructions")
    return insns
