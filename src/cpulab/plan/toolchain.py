"""Variants -> compiler and linker command lines; discovery of the toolchains here.

A variant is a compiler, the flags its kernel is compiled with, link flags, ABI flags
(which apply to the harness too, e.g. -m32) and an optional environment.  Whether a
variant can be built on this machine is found by building a tiny program with it once.
"""
from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path


@dataclass(frozen=True)
class Variant:
    name: str
    compiler: str = "gcc"
    cflags: tuple[str, ...] = ("-O2",)  # the kernel only
    ldflags: tuple[str, ...] = ()  # the link
    abi_flags: tuple[str, ...] = ()  # harness, kernel and link alike (-m32 ...)
    env: tuple[tuple[str, str], ...] = ()  # extra environment when it runs
    package: str = ""  # the Debian package that provides what it needs
    description: str = ""
    isa: str = ""  # a cross variant's instruction set ("arm", "aarch64"); "" = this machine's

    def as_dict(self) -> dict:
        return {"name": self.name, "compiler": self.compiler, "cflags": list(self.cflags),
                "ldflags": list(self.ldflags), "abi_flags": list(self.abi_flags),
                "env": dict(self.env), "package": self.package, "description": self.description,
                "isa": self.isa}


# The i386 variants build with `gcc -m32` where gcc-multilib is installed, else with
# Debian's i686 cross compiler (which, unlike gcc-multilib, installs beside the ARM cross
# compilers), linked statically: its output then runs natively on x86-64 with no i386 libc.
I686_CROSS = "i686-linux-gnu-gcc"
I386_PACKAGES = "gcc-multilib or gcc-i686-linux-gnu"


def _v(name, compiler="gcc", cflags=("-O2",), ldflags=(), abi=(), package="", description="", isa=""):
    return Variant(name, compiler, tuple(cflags), tuple(ldflags), tuple(abi), (), package, description, isa)


BUILTIN: dict[str, Variant] = {v.name: v for v in [
    _v("O0", cflags=["-O0"], description="gcc, no optimisation"),
    _v("O1", cflags=["-O1"], description="gcc -O1"),
    _v("O2", cflags=["-O2"], description="gcc -O2 (the usual release build)"),
    _v("O3", cflags=["-O3"], description="gcc -O3"),
    _v("Os", cflags=["-Os"], description="gcc, optimised for size"),
    _v("O3-native", cflags=["-O3", "-march=native"], description="gcc -O3 for this CPU's instruction sets"),
    _v("static", ldflags=["-static"], description="gcc -O2, statically linked"),
    _v("pie", cflags=["-O2", "-fPIE"], ldflags=["-pie"], description="gcc -O2, position-independent executable"),
    _v("nopie", cflags=["-O2", "-fno-pie"], ldflags=["-no-pie"], description="gcc -O2, fixed-address executable"),
    _v("lto", cflags=["-O2", "-flto"], ldflags=["-O2", "-flto"], description="gcc -O2 with link-time optimisation"),
    _v("clang-O2", "clang", ["-O2"], package="clang", description="clang -O2"),
    _v("clang-O3", "clang", ["-O3"], package="clang", description="clang -O3"),
    _v("musl-static", "musl-gcc", ["-O2"], ["-static"], package="musl-tools",
       description="gcc -O2 against musl libc, statically linked"),
    _v("i386-x87", cflags=["-O2", "-mfpmath=387"], abi=["-m32"], package=I386_PACKAGES,
       description="32-bit x86, scalar x87 floating point (the old ABI)"),
    _v("i386-sse2", cflags=["-O2", "-msse2", "-mfpmath=sse"], abi=["-m32"], package=I386_PACKAGES,
       description="32-bit x86, SSE2 floating point"),
    # Seed 001's question on ARM: Debian's cross compilers, static so that qemu-user
    # needs no target libraries.  armel's default CPU (armv5te) has no FPU: every
    # double operation is a libgcc call; armel-softfp uses VFP instructions but passes
    # doubles in integer registers (the soft-float calling convention); armhf passes
    # them in VFP registers.
    _v("armel", "arm-linux-gnueabi-gcc", ["-O2", "-mfloat-abi=soft"], ["-static"],
       package="gcc-arm-linux-gnueabi", isa="arm",
       description="32-bit ARM EABI, soft-float: floating point in library calls"),
    _v("armel-softfp", "arm-linux-gnueabi-gcc", ["-O2", "-march=armv7-a", "-mfpu=vfpv3-d16", "-mfloat-abi=softfp"],
       ["-static"], package="gcc-arm-linux-gnueabi", isa="arm",
       description="32-bit ARM EABI, VFP instructions with the soft-float calling convention"),
    _v("armhf", "arm-linux-gnueabihf-gcc", ["-O2"], ["-static"], package="gcc-arm-linux-gnueabihf", isa="arm",
       description="32-bit ARMv7 EABI, VFP hard-float"),
    _v("aarch64", "aarch64-linux-gnu-gcc", ["-O2"], ["-static"], package="gcc-aarch64-linux-gnu", isa="aarch64",
       description="64-bit ARM (AArch64), static"),
]}

# The variants `cpulab run` measures when a plan names none: every built-in one for the
# native ABI (the -m32 builds answer a different question: seed 001's float ABI).
DEFAULT_VARIANTS = [name for name, v in BUILTIN.items() if not v.abi_flags]


def get(name: str, custom: dict[str, Variant] | None = None) -> Variant:
    """A variant by name, as this machine builds it (resolved)."""
    table = {**BUILTIN, **(custom or {})}
    try:
        return resolved(table[name])
    except KeyError:
        raise KeyError(f"unknown variant {name!r} (known: {', '.join(table)})") from None


def resolved(v: Variant) -> Variant:
    """The variant as this machine builds it: a `gcc -m32` one becomes the static i686
    cross build when gcc cannot build -m32 here and i686-linux-gnu-gcc can."""
    if v.compiler != "gcc" or "-m32" not in v.abi_flags or not _try_build("gcc", ("-m32",)) \
            or _try_build(I686_CROSS, ("-static",)):
        return v
    return dataclasses.replace(v, compiler=I686_CROSS, abi_flags=tuple(f for f in v.abi_flags if f != "-m32"),
                               ldflags=v.ldflags if "-static" in v.ldflags else (*v.ldflags, "-static"),
                               description=f"{v.description} ({I686_CROSS}, static)".strip())


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


def unavailable_reason(v: Variant) -> str:
    """Why this variant cannot be built here ('' if it can), naming the package to install."""
    v = resolved(v)
    why = _try_build(v.compiler, tuple(v.abi_flags) + tuple(v.ldflags))
    if not why:
        return ""
    hint = f"install {v.package}" if v.package else "toolchain missing"
    return f"{hint} ({why})"


def library_reason(v: Variant, header: str, libs: tuple[str, ...], package: str) -> str:
    """'' if a program including `header` links with `libs` under this variant, else why.
    Linking matters: -m32 finds the 64-bit headers but has no 32-bit library to link."""
    flags = tuple(v.abi_flags) + tuple(v.ldflags)
    why = _try_build(v.compiler, flags, f"#include <{header}>\nint main(void) {{ return 0; }}\n", tuple(libs),
                     " ".join(("against", header, *libs)))
    if not why:
        return ""
    return f"install {package}{':i386' if '-m32' in v.abi_flags else ''} ({why})"


def libraries_reason(v: Variant, requires: dict[str, str], libs: tuple[str, ...]) -> str:
    """Why a kernel that includes `requires` (header -> Debian package) and links `libs`
    cannot be built under this variant here; '' if it can."""
    return "; ".join(why for header, package in requires.items()
                     if (why := library_reason(v, header, libs, package)))
