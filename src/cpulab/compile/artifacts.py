"""Building artifacts: variant + kernel source -> an executable, cached by content hash.

The harness is compiled with fixed flags (plus the variant's ABI flags); only the kernel
gets the variant's flags.  The cache key covers every source byte, every flag and the
compiler's version, so an artifact is rebuilt exactly when one of those changes.

A kernel's artifact also comes in PLACEMENTS *placements*: the same harness.o and kernel.o
linked again with a pad object of random size between them, so the kernel's code (and the
data behind it) sits at other offsets within cache lines, fetch windows and pages while
its bytes stay those of the one compiled kernel.o (only relocated fields differ).  Each
measured process runs one placement, so a verdict covers where the code happens to sit
(Mytkowicz et al., ASPLOS 2009: placement alone moves results by a few percent).
"""
from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import subprocess
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

from cpulab import paths
from cpulab.model import Status
from cpulab.machine.toolchains import compiler_version
from cpulab.plan.toolchain import Variant
from cpulab.workloads import KERNEL_DIR, Workload

NATIVE_DIR = Path(__file__).resolve().parents[1] / "native"
HARNESS_SOURCES = [NATIVE_DIR / "harness.c", NATIVE_DIR / "cpulab.h", NATIVE_DIR / "profile.h"]
HARNESS_CFLAGS = ("-O2", "-std=gnu11")
BUILD_TIMEOUT_S = 300
# Placements per kernel artifact; a process draws one, without replacement over the
# first PLACEMENTS rounds (runner), so that many rounds see independent placements.
PLACEMENTS = 16
# Pads are multiples of this (the compilers' function alignment), below one page: each
# shift keeps the code's own alignment and moves it within lines and pages.
PAD_STEP, PAD_LIMIT = 16, 4096


class BuildError(Exception):
    """A compile or link failed; the message is the compiler's own first lines."""


@dataclass(frozen=True)
class Artifact:
    path: str
    hash: str  # of the inputs: sources, flags, compiler version
    code_hash: str  # of the executable's bytes: equal hashes mean identical code
    size_bytes: int
    compiler_version: str
    commands: tuple[tuple[str, ...], ...]  # the exact command lines, in order
    placements: tuple[int, ...] = ()  # the pad bytes before kernel.o in each placement's link

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Artifact":
        """An artifact as stored or sent (lists for tuples; placements absent in older stores)."""
        return cls(**{**d, "commands": tuple(tuple(c) for c in d["commands"]),
                      "placements": tuple(d.get("placements") or ())})

    def placement_path(self, i: int) -> str:
        """The executable of placement i (the same code behind placements[i] bytes of pad)."""
        return f"{self.path}.p{i}"


def placement_pads(key: str, count: int) -> tuple[int, ...]:
    """Pad sizes drawn at random, seeded by the artifact's input hash (a rebuild places
    alike): independent of the pads of any other build."""
    rng = random.Random(key)
    return tuple(rng.randrange(0, PAD_LIMIT, PAD_STEP) for _ in range(count))


def _input_hash(sources: list[Path], variant: Variant, libs: tuple[str, ...], version: str) -> str:
    h = hashlib.sha256()
    for f in HARNESS_SOURCES + sorted(sources):
        h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    h.update(json.dumps([variant.compiler, version, list(HARNESS_CFLAGS),
                         list(variant.cflags), list(variant.ldflags), list(variant.abi_flags),
                         list(libs)]).encode())
    return h.hexdigest()


def _commands(kernel: Path, variant: Variant, libs: tuple[str, ...], out: Path,
              include_dirs: tuple[Path, ...] = (), pads: tuple[int, ...] = ()) -> list[list[str]]:
    """Compile the harness and the kernel once, link them, then each placement: a pad
    object (written by _write_pads) linked between them."""
    cc, abi = variant.compiler, list(variant.abi_flags)
    inc = [a for d in (NATIVE_DIR, kernel.parent, *include_dirs) for a in ("-I", str(d))]
    harness_o, kernel_o = out.parent / "harness.o", out.parent / "kernel.o"

    def link(*objs: Path, exe: Path) -> list[str]:
        return [cc, *abi, *map(str, objs), "-o", str(exe), *variant.ldflags, *libs, "-lm"]

    cmds = [
        [cc, *HARNESS_CFLAGS, *abi, *inc, "-c", str(NATIVE_DIR / "harness.c"), "-o", str(harness_o)],
        [cc, *variant.cflags, *abi, *inc, "-c", str(kernel), "-o", str(kernel_o)],
        link(harness_o, kernel_o, exe=out),
    ]
    for i in range(len(pads)):
        pad_s, pad_o = out.parent / f"pad{i}.s", out.parent / f"pad{i}.o"
        cmds += [[cc, *abi, "-c", str(pad_s), "-o", str(pad_o)],
                 link(harness_o, pad_o, kernel_o, exe=Path(f"{out}.p{i}"))]
    return cmds


def _write_pads(work: Path, pads: tuple[int, ...]) -> None:
    """pad{i}.s: nothing but `pad` bytes of .text (the linker lays input sections out in
    command-line order, so these come between the harness's code and the kernel's), and
    the note that keeps the stack non-executable.  Assembler source: the compiler driver
    runs only the assembler on it (5 ms, where C took 13)."""
    for i, pad in enumerate(pads):
        (work / f"pad{i}.s").write_text(f'.text\n.skip {pad}\n.section .note.GNU-stack,"",%progbits\n')


def _run_step(cmd: list[str]) -> None:
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise BuildError(f"build timed out after {BUILD_TIMEOUT_S}s: {' '.join(cmd)}") from None
    except FileNotFoundError:
        raise BuildError(f"compiler {cmd[0]!r} not found") from None
    if p.returncode != 0:
        lines = [ln for ln in p.stderr.splitlines() if ln.strip()][:6]
        raise BuildError("; ".join(lines) or f"{cmd[0]} exited with {p.returncode}")


def _compile_once(cmd: list[str], sources: list[Path], work: Path, root: Path, version: str) -> None:
    """One compile step of a build (cmd writes an object into work), copied from the
    object cache when an earlier build ran the same command (bar the work folder) on the
    same sources with the same compiler (`version`): one harness.o serves every build of
    a compiler and ABI, and link variants share their kernel.o (0.3 s and up to 3.5 s a
    compile; 39 builds of the seeds share 7 harness.o).  Compilers write no path of the
    output into an object, so a copied one has the bytes a compile would."""
    h = hashlib.sha256(json.dumps([[a.replace(str(work), "") for a in cmd], version]).encode())
    for f in sources:
        h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    cached, out = root / "objects" / f"{h.hexdigest()[:24]}.o", cmd[cmd.index("-o") + 1]
    if cached.exists():
        shutil.copyfile(cached, out)
        return
    _run_step(cmd)
    cached.parent.mkdir(exist_ok=True)
    tmp = cached.with_name(f".{cached.name}.{os.getpid()}.{threading.get_ident()}")
    shutil.copyfile(out, tmp)
    os.replace(tmp, cached)  # atomic: a concurrent build of the same object wrote the same bytes


def build_executable(kernel: Path, variant: Variant, *, libs: tuple[str, ...] = (),
                     extra_sources: tuple[Path, ...] = (), include_dirs: tuple[Path, ...] = (),
                     cache_dir: Path | None = None, placements: int = 0) -> Artifact:
    """Build harness + one kernel file under a variant, or return the cached artifact.

    extra_sources are files the kernel includes: they only enter the hash.
    include_dirs are searched for them besides the harness's and the kernel's own.
    placements: how many placements to link beside the executable (module docstring).
    """
    kernel = Path(kernel)
    version = compiler_version(variant.compiler)  # a subprocess: asked once per build
    key = _input_hash([kernel, *extra_sources], variant, tuple(libs), version)
    if placements:
        key = hashlib.sha256(f"{key}:placements={placements}".encode()).hexdigest()
    root = Path(cache_dir or paths.artifact_dir())
    final = root / key[:24]
    meta = final / "artifact.json"
    if meta.exists():
        return Artifact.from_dict(json.loads(meta.read_text()))
    root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".build-", dir=root))
    try:
        exe = work / kernel.stem
        pads = placement_pads(key, placements)
        _write_pads(work, pads)
        cmds = _commands(kernel, variant, tuple(libs), exe, tuple(include_dirs), pads)
        _compile_once(cmds[0], HARNESS_SOURCES, work, root, version)
        _compile_once(cmds[1], HARNESS_SOURCES + [kernel, *extra_sources], work, root, version)
        _run_step(cmds[2])
        # The placements' pads and links depend only on the objects: two at a time (both
        # CPUs: builds run before anything is measured).
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda pad_and_link: [_run_step(c) for c in pad_and_link], zip(cmds[3::2], cmds[4::2])))
        data = exe.read_bytes()
        # Paths inside the commands name the final place, not the temporary one.
        final_cmds = tuple(tuple(a.replace(str(work), str(final)) for a in c) for c in cmds)
        art = Artifact(path=str(final / kernel.stem), hash=key, code_hash=hashlib.sha256(data).hexdigest(),
                       size_bytes=len(data), compiler_version=version,
                       commands=final_cmds, placements=pads)
        (work / "artifact.json").write_text(json.dumps(art.as_dict(), indent=1))
        try:
            os.rename(work, final)  # atomic: a concurrent builder either wins or loses whole
        except OSError:
            if not meta.exists():
                raise
        return Artifact.from_dict(json.loads(meta.read_text()))  # ours, or a concurrent builder's
    finally:
        shutil.rmtree(work, ignore_errors=True)


def build_artifact(workload: Workload, variant: Variant, cache_dir: Path | None = None) -> Artifact:
    return build_executable(workload.source, variant, libs=workload.libs,
                            extra_sources=tuple(KERNEL_DIR / s for s in workload.extra_sources),
                            cache_dir=cache_dir, placements=placements_for(variant))


def placements_for(variant: Variant) -> int:
    """PLACEMENTS, or none for a link-time-optimised build: its code is generated at each
    link (1.5 s for rc5-72), so placements would not be the same code; its comparisons
    keep the policy's effect floor."""
    return 0 if any(f.startswith("-flto") for f in (*variant.cflags, *variant.ldflags)) else PLACEMENTS


def build_tool(source: Path, cflags: tuple[str, ...] = ("-O2",), compiler: str = "gcc",
               cache_dir: Path | None = None, headers: tuple[Path, ...] = ()) -> Path:
    """A standalone helper program of cpulab's own (one C file, no harness), built once
    and cached by its source, the headers it includes, flags and compiler version."""
    source = Path(source)
    h = hashlib.sha256(source.read_bytes())
    for f in headers:
        h.update(Path(f).read_bytes())
    h.update(json.dumps([compiler, compiler_version(compiler), list(cflags)]).encode())
    root = Path(cache_dir or paths.artifact_dir())
    exe = root / f"tool-{h.hexdigest()[:24]}" / source.stem
    if exe.exists():
        return exe
    exe.parent.mkdir(parents=True, exist_ok=True)
    tmp = exe.with_name(f".{source.stem}.{os.getpid()}.{threading.get_ident()}")  # threads of one process too
    cmd = [compiler, *cflags, str(source), "-o", str(tmp)]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise BuildError(f"{' '.join(cmd)}: {e}") from None
    if p.returncode != 0:
        raise BuildError("; ".join([ln for ln in p.stderr.splitlines() if ln.strip()][:6]))
    os.replace(tmp, exe)  # atomic: a concurrent builder's copy is the same program
    return exe


@dataclass(frozen=True)
class Built:
    """A workload under a variant, on the machine that will run it: PENDING with its
    artifact (and the qemu-user prefix a foreign ISA needs there), or SKIPPED /
    BUILD_FAILED with the reason."""
    status: Status
    error: str = ""
    artifact: Artifact | None = None
    emulator: tuple[str, ...] = ()

    def as_dict(self) -> dict:  # sent home by a cluster's worker
        return {"status": str(self.status), "error": self.error, "emulator": list(self.emulator),
                "artifact": self.artifact.as_dict() if self.artifact else None}

    @classmethod
    def from_dict(cls, d: dict) -> "Built":
        art = d["artifact"]
        return cls(Status(d["status"]), d["error"],
                   Artifact.from_dict(art) if art else None,
                   tuple(d["emulator"]))
