"""The map by which native/stepcount.h counts a call's instructions with a stop at each
branch instead of each instruction: every instruction of an x86-64 executable, read by
GNU objdump, as one line "ADDRESS LENGTH KIND TARGET CONDITION" (stepcount.h's header
says what each kind means).

A kind is only as right as its reading, so the reading leans to `s` (single-stepped,
always exact): anything that moves control other than a direct jump, a direct call, a
conditional branch or a plain return is one, and so is an instruction whose successor
the map does not hold (its straight run would leave the map without a stop).
"""
from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from pathlib import Path

# x86's condition codes (the tttn field), by the mnemonics objdump prints for them
CONDITIONS = {cc: n for n, names in enumerate((
    "o", "no", "b c nae", "ae nb nc", "e z", "ne nz", "be na", "a nbe",
    "s", "ns", "p pe", "np po", "l nge", "ge nl", "le ng", "g nle")) for cc in names.split()}
# prefixes objdump prints before a mnemonic that change nothing of where control goes
PASSIVE = {"cs", "ds", "es", "ss", "fs", "gs", "data16", "data32", "addr32", "lock", "notrack", "bnd",
           "xacquire", "xrelease"}
STEPPED = {"syscall", "sysenter", "int", "int1", "int3", "into", "iret", "iretd", "iretq", "ud0", "ud1", "ud2",
           "hlt", "xbegin", "xabort", "xend", "jrcxz", "jecxz", "loop", "loope", "loopne", "loopz", "loopnz",
           "retf", "lret", "ljmp", "lcall", "enqcmd", "uiret"}
_LINE = re.compile(r"^\s*([0-9a-f]+):\t([0-9a-f ]+?)\s*\t(.*)$")
_DIRECT = re.compile(r"^([0-9a-f]+) <")
_FUNCTION = re.compile(r"^[0-9a-f]+ <([^>]*)>:$")
# The counter's own functions (native/stepcount.h), left out: a stop in them would trap
# inside its trap handler
COUNTER = "step_"


def read(executable: str | Path) -> list[tuple[int, int, str, int, int]]:
    """(address, length, kind, target, condition) of every instruction objdump decodes in
    the executable's code sections, by address."""
    objdump = shutil.which("objdump")
    if objdump is None:
        raise RuntimeError("no objdump (install binutils)")
    p = subprocess.run([objdump, "-d", "-M", "intel", "--insn-width=16", str(executable)],
                       capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        raise RuntimeError(f"objdump failed on {executable}: {p.stderr.strip()[:200]}")
    rows, counter = {}, False
    for line in p.stdout.splitlines():
        if m := _FUNCTION.match(line):
            counter = m.group(1).startswith(COUNTER)
        elif not counter and (m := _LINE.match(line)) and "(bad)" not in m.group(3):
            address, length = int(m.group(1), 16), len(m.group(2).split())
            rows[address] = (address, length, *_kind(m.group(3)))
    return [_closed(r, rows) for _, r in sorted(rows.items())]


def _kind(text: str) -> tuple[str, int, int]:
    """(kind, target, condition) of one instruction as objdump prints it (Intel syntax)."""
    words = text.split()
    while words and words[0] in PASSIVE:
        words.pop(0)
    if not words or words[0].startswith("rep"):
        return "s", 0, 0
    m, operands = words[0], " ".join(words[1:])
    direct = _DIRECT.match(operands)
    if m == "jmp":
        return ("j", int(direct.group(1), 16), 0) if direct else ("s", 0, 0)
    if m == "call":
        return ("c", int(direct.group(1), 16), 0) if direct else ("s", 0, 0)
    if m.startswith("j") and m[1:] in CONDITIONS and direct:
        return "b", int(direct.group(1), 16), CONDITIONS[m[1:]]
    if m == "ret" and not operands:
        return "r", 0, 0
    if m in STEPPED or m.startswith(("j", "call", "ret", "sys")):
        return "s", 0, 0
    return "n", 0, 0


def _closed(row: tuple[int, int, str, int, int], rows: dict) -> tuple[int, int, str, int, int]:
    """The row, single-stepped (s) where the instruction it leads to is not in the map: a
    straight run must end at a stop inside it."""
    address, length, kind, target, cond = row
    after = {"n": address + length, "j": target, "c": target}.get(kind)
    if after is not None and after not in rows:
        return address, length, "s", 0, 0
    return row


def write(executable: str | Path, path: Path) -> Path:
    """The map of `executable` written to `path`, as stepcount.h reads it."""
    st = os.stat(executable)
    path.write_text(_text(str(executable), st.st_mtime_ns, st.st_size))
    return path


@functools.lru_cache(maxsize=8)
def _text(executable: str, mtime_ns: int, size: int) -> str:
    """The map's text, read once for the calls of 1 and 2 repetitions that one count steps
    (objdump: 0.09 s for a kernel, 0.47 s for a static build with its libc); the file's
    time and size in the key, so an executable rebuilt in place is read again."""
    return "".join(f"{a:x} {n:x} {k} {t:x} {c}\n" for a, n, k, t, c in read(executable))
