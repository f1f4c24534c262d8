"""The variants: a compiler, the flags its kernel is compiled with, link flags, ABI flags
(which apply to the harness too, e.g. -m32) and an optional environment; the built-in
ones by name.  Whether one can be built on this machine, and how, is the machine's to
say (machine/toolchains.py), by building a tiny program with it once.
"""
from __future__ import annotations

from dataclasses import dataclass

from cpulab.machine.toolchains import resolved


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
# Debian's i686 cross compiler (machine/toolchains.py resolved).
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
    _v("O3-native-fastmath", cflags=["-O3", "-march=native", "-ffast-math"],
       description="gcc -O3 for this CPU, -ffast-math: a sum may be reordered into vector accumulators"),
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
