"""What this machine can build: whether a variant's toolchain is here (a tiny program
built with it once, cached), why not in one line naming the package to install, and the
compiler's version.  A variant is anything with the fields of plan/toolchain.py's Variant.
"""
from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
import tempfile
from functools import cache
from pathlib import Path

# Debian's i686 cross compiler (which, unlike gcc-multilib, installs beside the ARM cross
# compilers) builds the -m32 variants where gcc cannot, linked statically: its output then
# runs natively on x86-64 with no i386 libc.
I686_CROSS = "i686-linux-gnu-gcc"


def resolved(v):
    """The variant as this machine builds it: a `gcc -m32` one becomes the static i686
    cross build when gcc cannot build -m32 here and i686-linux-gnu-gcc can."""
    if v.compiler != "gcc" or "-m32" not in v.abi_flags or not _try_build("gcc", ("-m32",)) \
            or _try_build(I686_CROSS, ("-static",)):
        return v
    return dataclasses.replace(v, compiler=I686_CROSS, abi_flags=tuple(f for f in v.abi_flags if f != "-m32"),
                               ldflags=v.ldflags if "-static" in v.ldflags else (*v.ldflags, "-static"),
                               description=f"{v.description} ({I686_CROSS}, static)".strip())


def cxx_driver(cc: str) -> str:
    """The C++ driver beside a C compiler: gcc -> g++, aarch64-linux-gnu-gcc ->
    aarch64-linux-gnu-g++, clang(-14) -> clang++(-14), cc -> c++."""
    for c, cxx in (("gcc", "g++"), ("clang", "clang++"), ("cc", "c++")):
        head, found, tail = cc.rpartition(c)
        if found and (not tail or tail.startswith("-")):
            return head + cxx + tail
    return cc


@cache
def compiler_version(compiler: str) -> str:
    """The first line of `compiler --version`, e.g. 'gcc (Debian 12.2.0-14) 12.2.0'."""
    try:
        out = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout.splitlines()[0].strip() if out.stdout else ""


# What every kernel needs of a toolchain: libc and libm, and <errno.h>, which needs the
# kernel's <asm/errno.h>: gcc-12-multilib without gcc-multilib (whose /usr/include/asm link
# finds it) builds a -m32 program without errno.h, but not the harness.
HELLO = ("#include <errno.h>\n#include <stdio.h>\n#include <math.h>\n"
         "int main(int c, char **v) { printf(\"%f\", sqrt((double)c)); return v[0][0] == 0; }\n")


def _gist(stderr: str, tmpdir: str) -> str:
    """A compiler's or linker's complaint in a few words: the first missing header or
    library, else the first error message; no file positions, no temporary paths."""
    lines = [ln.replace(tmpdir + "/", "").strip() for ln in stderr.splitlines() if ln.strip()]
    for ln in lines:
        if m := re.search(r"fatal error: '?([\w./+-]+)'?(?:: No such file or directory| file not found)", ln):
            return f"{m[1]} missing"
        if m := re.search(r"cannot find (\S+?)(?::|$)", ln):
            return f"cannot find {m[1]}"
    for ln in lines:
        if m := re.search(r"\berror: (.+)", ln):
            return m[1][:120]
    return lines[0][:120] if lines else "no message"


@cache
def _try_build(compiler: str, flags: tuple[str, ...], source: str = HELLO, libs: tuple[str, ...] = ("-lm",),
               what: str = "a test program") -> str:
    """'' if `compiler flags source.c libs` links, else one short line saying why, e.g.
    'gcc -m32 cannot build a test program: bits/libc-header-start.h missing'."""
    if not shutil.which(compiler):
        return f"{compiler} not found"
    cmd = " ".join((compiler, *flags))
    with tempfile.TemporaryDirectory(prefix="cpulab-probe-") as d:
        src = Path(d) / "t.c"
        src.write_text(source)
        try:
            p = subprocess.run([compiler, *flags, str(src), "-o", str(Path(d) / "t"), *libs],
                               capture_output=True, text=True, timeout=60)
        except subprocess.TimeoutExpired:
            return f"{cmd} timed out building {what}"
        if p.returncode != 0:
            return f"{cmd} cannot build {what}: {_gist(p.stderr, d)}"
    return ""


def unavailable_reason(v) -> str:
    """Why this variant cannot be built here ('' if it can), naming the package to install."""
    v = resolved(v)
    why = _try_build(v.compiler, tuple(v.abi_flags) + tuple(v.ldflags))
    if not why:
        return ""
    hint = f"install {v.package}" if v.package else "toolchain missing"
    return f"{hint} ({why})"


def library_reason(v, header: str, libs: tuple[str, ...], package: str) -> str:
    """'' if a program including `header` links with `libs` under this variant, else why.
    Linking matters: -m32 finds the 64-bit headers but has no 32-bit library to link."""
    flags = tuple(v.abi_flags) + tuple(v.ldflags)
    why = _try_build(v.compiler, flags, f"#include <{header}>\nint main(void) {{ return 0; }}\n", tuple(libs),
                     " ".join(("against", header, *libs)))
    if not why:
        return ""
    return f"install {package}{':i386' if '-m32' in v.abi_flags else ''} ({why})"


def libraries_reason(v, requires: dict[str, str], libs: tuple[str, ...]) -> str:
    """Why a kernel that includes `requires` (header -> Debian package) and links `libs`
    cannot be built under this variant here; '' if it can."""
    return "; ".join(why for header, package in requires.items()
                     if (why := library_reason(v, header, libs, package)))
