"""Which machine an artifact's code is for, and the emulator that runs it when it is not this one.

A cross artifact (an ARM variant built here) runs natively on a machine of its ISA, else
under qemu-user called explicitly (not through binfmt: the argv then says what ran it).
The decision reads the executable's ELF header, so it holds for custom variants too.
Results measured under an emulator are flagged `emulated`: their times say how fast
qemu translates, not how fast an ARM core runs.
"""
from __future__ import annotations

import platform
import shutil

# ELF e_machine -> the ISA name qemu-user uses for it.
ELF_MACHINES = {3: "i386", 62: "x86_64", 40: "arm", 183: "aarch64"}
# What each host runs without help.
NATIVE = {"x86_64": {"x86_64", "i386"}, "i686": {"i386"}, "aarch64": {"aarch64", "arm"},
          "armv7l": {"arm"}, "armv6l": {"arm"}}
QEMU_PACKAGE = "qemu-user"


class CannotRun(Exception):
    """The artifact is for another ISA and no emulator for it is installed."""


def elf_isa(header: bytes) -> str:
    """The ISA of an ELF header's e_machine ('arm', 'x86_64' ...), '' if not ELF or unknown."""
    if len(header) < 20 or header[:4] != b"\x7fELF":
        return ""
    order = "little" if header[5] == 1 else "big"
    return ELF_MACHINES.get(int.from_bytes(header[18:20], order), "")


def emulator_for(artifact_path: str, host: str | None = None) -> tuple[str, ...]:
    """() when this machine runs the artifact itself, else the qemu-user argv prefix.
    Raises CannotRun naming the package when the emulator is missing."""
    with open(artifact_path, "rb") as f:
        isa = elf_isa(f.read(20))
    host = host or platform.machine()
    if not isa or isa in NATIVE.get(host, {host}):
        return ()
    # The static build first: the shared one loads some 20 libraries of its own at each
    # start, 3.5-4 ms of a harness process's 18 under qemu-arm (Xeon guest, model 167)
    qemu = shutil.which(f"qemu-{isa}-static") or shutil.which(f"qemu-{isa}")
    if not qemu:
        raise CannotRun(f"{isa} code on a {host} machine needs qemu-{isa} (install {QEMU_PACKAGE})")
    return (qemu,)
