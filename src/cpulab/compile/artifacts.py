"""Building artifacts: variant + kernel source -> an executable, cached by content hash.

The harness is compiled with fixed flags (plus the variant's ABI flags); only the kernel
gets the variant's flags.  The cache key covers every source byte, every flag and the
compiler's version, so an artifact is rebuilt exactly when one of those changes.

A kernel's artifact also comes in *placements*: the same harness.o and kernel.o linked
again under a linker script of its own (layout_script), drawn at random: every function
of both objects (each in its own section, -ffunction-sections) in a random order, each
behind a random gap at 16-byte steps or the build's own larger alignment, the first
anywhere within a page; the read-only, writable and zeroed data behind random pads at
cache-line steps.  The code's bytes stay those of the one compiled kernel.o (only
relocated fields differ: placement.py checks).  Placement i of an artifact is drawn from
its input hash and i, linked when first asked for (place) and kept beside it, so the
rounds of a comparison each run a placement of their own however many rounds its looks
reach (Mytkowicz et al., ASPLOS 2009: where code and data sit moves results by a few
percent, so a verdict must average over it).
"""
from __future__ import annotations

import fcntl
import functools
import hashlib
import inspect
import json
import os
import random
import re
import shutil
import subprocess
import tempfile
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from elftools.elf.elffile import ELFFile

from cpulab import paths
from cpulab.compile import slimlink
from cpulab.model import Status
from cpulab.machine.toolchains import compiler_version, cxx_driver
from cpulab.plan.toolchain import Variant
from cpulab.workloads import CXX_SUFFIXES, KERNEL_DIR, Workload

NATIVE_DIR = Path(__file__).resolve().parents[1] / "native"
HARNESS_SOURCES = [NATIVE_DIR / "harness.c", NATIVE_DIR / "cpulab.h", NATIVE_DIR / "profile.h", NATIVE_DIR / "coreclock.h",
                   NATIVE_DIR / "stepcount.h", NATIVE_DIR / "events.h"]
HARNESS_CFLAGS = ("-O2", "-std=gnu11")
# Every function in a section of its own, so that a placement can order them: the same
# instructions (a call between two functions of one file gets a relocation instead of a
# resolved offset, of the same length).
SECTION_FLAGS = ("-ffunction-sections",)
BUILD_TIMEOUT_S = 300
# A link of a placement: 12 ms dynamic (slim), 36 ms static.  A build links none; a run links
# those its rounds will need (measure/schedule/targets.py), or a round its own.  Code moves by
# multiples of CODE_STEP (the compilers' usual function alignment; a larger one a build asks for
# is kept: the linker rounds a gap up to it), data by cache lines, within a page.
CODE_STEP, DATA_STEP, PAGE = 16, 64, 4096
GAP_LIMIT = 256  # the gap before each further function: up to four lines


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
    placeable: bool = False  # placements can be linked (module docstring): not LTO, objects kept

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Artifact":
        """An artifact as stored or sent (lists for tuples).  Stores before placements
        were drawn per round kept a list of pads instead: placeable all the same."""
        d = {**d, "commands": tuple(tuple(c) for c in d["commands"])}
        d["placeable"] = bool(d.pop("placements", None) or d.get("placeable"))  # popped either way
        return cls(**d)

    def placement_path(self, i: int) -> str:
        """The executable of placement i (linked by `place`) for this process: a run draws
        placements of its own, and removes them when it ends (remove_placements)."""
        return f"{self.path}.layout{i}.{os.getpid()}"


# The placements this process linked (and their scripts): a run's own, removed when it ends.
_linked: set[Path] = set()
_linked_lock = threading.Lock()


def remove_placements() -> None:
    """Remove the placements this process linked (`place`): each run draws its own."""
    with _linked_lock:
        for f in _linked:
            f.unlink(missing_ok=True)
        _linked.clear()


def layout_script(key: str, i: int, sections: dict[str, list[str]]) -> str:
    """Placement i's linker script (GNU ld, INSERTed into the default one): the code
    sections of each object (its file pattern, as the linker matches it against the
    names on the link's command line -> its sections) in a random order, each behind a
    random gap (the first anywhere in a page), and the objects' read-only, writable and
    zeroed data each behind a random pad.  Drawn from the artifact's input hash and i: a
    rebuild places alike, any other build independently."""
    rng = random.Random(f"{key}:{i}")
    code = [(obj, name) for obj, names in sorted(sections.items()) for name in names]
    rng.shuffle(code)
    lines = []
    for n, (obj, name) in enumerate(code):
        lines.append(f"    . += {rng.randrange(0, PAGE if n == 0 else GAP_LIMIT, CODE_STEP)};")
        lines.append(f"    {obj}({name})")
    objs = sorted(sections)

    def data(out: str, patterns: str, where: str) -> str:
        inputs = " ".join(f"{obj}({patterns})" for obj in objs)
        return (f"SECTIONS {{ {out} : {{ . += {rng.randrange(0, PAGE, DATA_STEP)}; {inputs} }} }}"
                f" INSERT {where};\n")
    rest = " ".join(f"{obj}(.text .text.*)" for obj in objs)  # any section not listed, in its order
    # Each function's section keeps the alignment its build gave it (-falign-functions=64,
    # or a loop's .p2align 5, which raises its function's section to 32): the linker
    # rounds a drawn gap up to it, so a function moves by multiples of its own alignment
    # and only what the build leaves open is drawn.  (A SUBALIGN here once erased them:
    # align64 and align32 builds then ran the same bytes in the same places.)
    return ("SECTIONS\n{\n  .text.placed :\n  {\n" + "\n".join(lines) + f"\n    {rest}\n  }}\n}} INSERT BEFORE .text;\n"
            + data(".rodata.placed", ".rodata .rodata.*", "AFTER .rodata")
            + data(".data.placed", ".data .data.[!r]*", "AFTER .data")  # .data.rel.ro* stays read-only
            + data(".bss.placed", ".bss .bss.* COMMON", "AFTER .bss"))


def linked_objects(art: Artifact) -> list[str]:
    """The objects its link takes (the harness's, the kernel's, its library's)."""
    return [a for a in art.commands[-1] if a.endswith(".o")]


def code_sections(obj: Path) -> list[str]:
    """The names of an object's non-empty code sections, in file order: read once per
    version of the file (pyelftools, ~10 ms an object, was 15 s of CPU over the seeds' links)."""
    st = obj.stat()
    return list(_code_sections(obj, st.st_mtime_ns, st.st_size))


@functools.lru_cache(maxsize=4096)
def _code_sections(obj: Path, _mtime_ns: int, _size: int) -> tuple[str, ...]:
    with open(obj, "rb") as f:
        return tuple(s.name for s in ELFFile(f).iter_sections()
                     if s["sh_flags"] & 0x4 and s["sh_type"] == "SHT_PROGBITS" and s["sh_size"])  # SHF_EXECINSTR


def place(art: Artifact, i: int) -> str:
    """The executable of the artifact's placement i, linked now if it is not yet: the
    build's own link run again under layout i (link_in_layout), beside the artifact."""
    exe = Path(art.placement_path(i))
    if not exe.exists():
        link_in_layout(list(art.commands[-1]), exe, art.hash, i,
                       {f"*/{Path(o).name}": Path(o) for o in linked_objects(art)})
    return str(exe)


def link_in_layout(link: list[str], out: Path, key: str, i: int, objects: dict[str, Path],
                   cwd: str | None = None) -> None:
    """Run a link again (in `cwd`; slim, to the same bytes: slimlink.py) into `out`, under
    layout i's script (layout_script: from `key` and i) beside it; `objects` maps each
    object's pattern in the script to its file.  Atomic (a concurrent linker of the same
    layout writes the same bytes); the run's remove_placements removes both files."""
    script, tmp = Path(f"{out}.ld"), f".{os.getpid()}.{threading.get_ident()}"
    sections = {pattern: code_sections(o) for pattern, o in objects.items()}
    Path(f"{script}{tmp}").write_text(layout_script(key, i, sections))
    os.replace(f"{script}{tmp}", script)
    with _linked_lock:
        _linked.update((out, script))
    slimlink.link((*link, cwd), [*with_output(link, f"{out}{tmp}"), f"-Wl,-T,{script}"], cwd, run_step)
    os.replace(f"{out}{tmp}", out)


def output_at(argv: list[str]) -> int | None:
    """Where a link's arguments name its output: the index of -o (or of -oFILE)."""
    return next((i for i, a in enumerate(argv)
                 if a == "-o" and i + 1 < len(argv) or a.startswith("-o") and len(a) > 2), None)


def with_output(argv: list[str], out: str) -> list[str]:
    """A link's arguments writing `out` instead of what they wrote."""
    i = output_at(argv)
    return [*argv, "-o", out] if i is None else [*argv[:i], "-o", out, *argv[i + (2 if argv[i] == "-o" else 1):]]


def _input_hash(sources: list[Path], variant: Variant, libs: tuple[str, ...], version: str) -> str:
    h = hashlib.sha256()
    for f in HARNESS_SOURCES + sorted(sources):
        h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    h.update(json.dumps([variant.compiler, version, list(HARNESS_CFLAGS), list(variant.cflags),
                         list(variant.ldflags), list(variant.abi_flags), list(libs)]).encode())
    return h.hexdigest()


def kernel_objects(folder: Path) -> list[Path]:
    """A build's own objects, the kernel's and its library sources' (not the harness's)."""
    return [folder / "kernel.o", *sorted(folder.glob("lib[0-9]*-*.o"))]


def _object_name(i: int, source: Path) -> str:
    """The object of a kernel's i-th library source: unique in its build, and never a
    suffix of another's (the placements' scripts name objects as */NAME)."""
    return f"lib{i}-{source.stem}.o"


def _commands(kernel: Path, variant: Variant, libs: tuple[str, ...], out: Path,
              include_dirs: tuple[Path, ...] = (), sections: bool = False,
              library: tuple[Path, ...] = ()) -> list[list[str]]:
    """Compile the harness (with its own folder's headers alone: one harness.o for every
    kernel of a compiler and ABI), the kernel and its library sources once each (each
    function in its own section where the artifact is to be placed; C++ with the
    variant's C++ driver), then link them (with the C++ driver when any source is C++)."""
    cc, abi, own = variant.compiler, list(variant.abi_flags), ["-I", str(NATIVE_DIR)]
    inc = own + [a for d in (kernel.parent, *include_dirs) for a in ("-I", str(d))]
    placed = list(SECTION_FLAGS) if sections else []
    cxx = any(f.suffix in CXX_SUFFIXES for f in (kernel, *library))
    objects = [(kernel, out.parent / "kernel.o")] + [(f, out.parent / _object_name(i, f)) for i, f in enumerate(library)]
    harness_o = out.parent / "harness.o"
    return [
        [cc, *HARNESS_CFLAGS, *placed, *abi, *own, "-c", str(NATIVE_DIR / "harness.c"), "-o", str(harness_o)],
        *([cxx_driver(cc) if f.suffix in CXX_SUFFIXES else cc, *variant.cflags, *placed, *abi, *inc, "-c", str(f),
           "-o", str(o)] for f, o in objects),
        [cxx_driver(cc) if cxx else cc, *abi, str(harness_o), *(str(o) for _, o in objects), "-o", str(out),
         *variant.ldflags, *libs, "-lm"],
    ]


def headers_read(compile_cmd: list[str]) -> list[Path]:
    """The files a compile step reads besides its source (-MM: the user's headers, not the
    system's), as the compiler finds them under the step's own flags; [] where the
    compiler cannot say (the compile then fails with its own words)."""
    cmd = compile_cmd[:compile_cmd.index("-o")] + ["-MM"]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return []
    if p.returncode != 0:
        return []
    names = p.stdout.replace("\\\n", " ").replace("\\ ", "\0").partition(":")[2].split()
    return [Path(n.replace("\0", " ")).resolve() for n in names[1:]]  # the first is the source itself


def run_step(cmd: list[str], cwd: str | None = None) -> str:
    """One compile or link (in `cwd`: a program's relink, relink.py): what it printed;
    BuildError with the compiler's first lines when it fails."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, cwd=cwd)
    except subprocess.TimeoutExpired:
        raise BuildError(f"build timed out after {BUILD_TIMEOUT_S}s: {' '.join(cmd)}") from None
    except FileNotFoundError:
        raise BuildError(f"compiler {cmd[0]!r} not found") from None
    if p.returncode != 0:
        if m := re.search(r"undefined reference to [`'](k_\w+)'", p.stderr):  # the harness's call
            raise BuildError(f"the kernel defines no {m[1]} (cpulab.h: a kernel defines k_unit, k_setup, k_run "
                             "and k_work, with C linkage)")
        lines = [ln for ln in p.stderr.splitlines() if ln.strip()][:6]
        raise BuildError("; ".join(lines) or f"{cmd[0]} exited with {p.returncode}")
    return p.stdout


def _compile_once(cmd: list[str], sources: list[Path], work: Path, root: Path, version: str) -> None:
    """One compile step of a build (cmd writes an object into work), copied from the
    object cache when another build ran the same command (bar the work folder) on the
    same sources with the same compiler (`version`): one harness.o serves every build of
    a compiler and ABI, link variants share their kernel.o (0.3-3.5 s a compile).  A
    compiler writes no path of the output into an object: a copy has a compile's bytes."""
    h = hashlib.sha256(json.dumps([[a.replace(str(work), "") for a in cmd], version]).encode())
    for f in sources:
        h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    cached, out = root / "objects" / f"{h.hexdigest()[:24]}.o", cmd[cmd.index("-o") + 1]
    _made_once(cached, lambda tmp: (run_step(cmd), shutil.copyfile(out, tmp)))
    if not os.path.exists(out):  # another build compiled it
        shutil.copyfile(cached, out)


def _made_once(target: Path, make: Callable[[str], object]) -> None:
    """`target`, made by make(a temporary path beside it) unless it exists, renamed into
    place whole: one maker at a time over threads and processes (a lock file beside it,
    released on close, a failed make's too): the others wait for it, not make it too."""
    if target.exists():
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{target}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not target.exists():
            tmp = target.with_name(f".{target.name}.{os.getpid()}.{threading.get_ident()}")
            make(str(tmp))
            os.replace(tmp, target)


def build_executable(kernel: Path, variant: Variant, *, libs: tuple[str, ...] = (),
                     extra_sources: tuple[Path, ...] = (), include_dirs: tuple[Path, ...] = (),
                     library: tuple[Path, ...] = (), scan_headers: bool = False,
                     cache_dir: Path | None = None, placeable: bool = False) -> Artifact:
    """Build harness + one kernel file (+ its library sources) under a variant, or return
    the cached artifact.

    extra_sources are files the kernel includes: they only enter the hash; scan_headers
    adds every header the compiler reads under the variant's flags (a user's kernel).
    include_dirs are searched for them besides the harness's and the kernel's own.
    library: sources compiled under the variant beside the kernel, and linked with it.
    placeable: compiled for placements (module docstring), linked by `place`.
    """
    kernel, library = Path(kernel), tuple(Path(f) for f in library)
    version = compiler_version(variant.compiler)  # a subprocess: asked once per build
    headers = list(extra_sources)
    if scan_headers:  # ~10 ms a source, cached builds too: a header edited is a new build
        for cmd in _commands(kernel, variant, tuple(libs), Path("scan", kernel.stem), tuple(include_dirs),
                             placeable, library)[1:-1]:
            headers += headers_read(cmd)
    headers = sorted(set(headers) - {kernel, *library})
    key = _input_hash([kernel, *library, *headers], variant, tuple(libs), version)
    if placeable:  # placements kept beside the artifact are redrawn when their drawing changes
        key = hashlib.sha256(f"{key}:{SECTION_FLAGS}:{inspect.getsource(layout_script)}".encode()).hexdigest()
    root = Path(cache_dir or paths.artifact_dir())
    final = root / key[:24]
    meta = final / "artifact.json"
    if meta.exists():
        return Artifact.from_dict(json.loads(meta.read_text()))
    root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".build-", dir=root))
    try:
        exe = work / kernel.stem
        cmds = _commands(kernel, variant, tuple(libs), exe, tuple(include_dirs), placeable, library)
        _compile_once(cmds[0], HARNESS_SOURCES, work, root, version)
        for cmd, source in zip(cmds[1:-1], (kernel, *library)):
            _compile_once(cmd, HARNESS_SOURCES + [source, *headers], work, root, version)
        run_step(cmds[-1])
        data = exe.read_bytes()
        # Paths inside the commands name the final place, not the temporary one.
        final_cmds = tuple(tuple(a.replace(str(work), str(final)) for a in c) for c in cmds)
        art = Artifact(path=str(final / kernel.stem), hash=key, code_hash=hashlib.sha256(data).hexdigest(),
                       size_bytes=len(data), compiler_version=version, commands=final_cmds, placeable=placeable)
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
                            include_dirs=tuple(Path(d) for d in workload.include_dirs),
                            library=tuple(Path(f) for f in workload.library_sources),
                            scan_headers=bool(workload.declared_in),
                            cache_dir=cache_dir, placeable=can_place(variant))


def can_place(variant: Variant) -> bool:
    """Whether a variant's builds get placements: not a link-time-optimised one, whose
    code is generated at each link (1.5 s for rc5-72), so that its placements would not
    be the same code; its comparisons keep the policy's effect floor."""
    return not any(f.startswith("-flto") for f in (*variant.cflags, *variant.ldflags))


def build_tool(source: Path, cflags: tuple[str, ...] = ("-O2",), compiler: str = "gcc",
               cache_dir: Path | None = None, headers: tuple[Path, ...] = ()) -> Path:
    """A standalone helper program of cpulab's own (one C file, no harness), built once
    and cached by its source, the headers it includes, flags and compiler version."""
    h = hashlib.sha256(b"".join(Path(f).read_bytes() for f in (source, *headers)))
    h.update(json.dumps([compiler, compiler_version(compiler), list(cflags)]).encode())
    root = Path(cache_dir or paths.artifact_dir())
    exe = root / f"tool-{h.hexdigest()[:24]}" / Path(source).stem
    _made_once(exe, lambda tmp: run_step([compiler, *cflags, str(source), "-o", tmp]))
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
        art = Artifact.from_dict(d["artifact"]) if d["artifact"] else None
        return cls(Status(d["status"]), d["error"], art, tuple(d["emulator"]))
