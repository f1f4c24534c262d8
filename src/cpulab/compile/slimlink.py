"""Placement links to the same bytes in three fifths of the time (20 -> 12 ms of CPU here).

A link reads the whole dynamic symbol table of every shared library it is given
(libc.so.6's 3,000 symbols and libm.so.6's 1,200: most of the 20 ms a placement's link
takes here, the compiler driver's included), though the executable imports a few dozen
of them, and a run links a placement for every process (1,600 in the seeds plan).

So the first placement of each build's link in a process is linked as the build links,
traced (ld -t: the files it opened).  Each shared library it opened then gets a *slim
copy*: the library with its dynamic symbol table cut to the names the executable's own
table holds, in their order (ld records an import in its library's order), and without
its code (the file is sparse: a linker never reads a library's code).  The copies, and
the linker scripts that named the libraries (libc.so, libm.so) rewritten to name the
copies, go in a folder of the cache, named by the libraries and the names (the next run
finds them), put first on the link's library path.  ld orders the executable's
symbols by walking its symbol hash table, whose size the whole link grew it to, so the
slim link is run with that size (--hash-size), tried from bfd's sizes.  A slim link is
kept for a build only when it writes the first placement's bytes exactly; otherwise (a
static link, a collision in the table, a linker that is not GNU ld) each placement is
linked as the build links it.

A slim link is then run as the linker itself where that writes the same bytes too: the
command the compiler driver would run (its -### line; gcc's collect2 replaced by the ld
it runs, without the LTO plugin, which reads no plain object), with each placement's
output and script in it.  The driver and collect2 are two processes a link (2.6 of
12.6 ms of CPU here).
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import re
import shlex
import shutil
import struct
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile

from cpulab import paths

# bfd's hash table sizes that --hash-size can set (it rounds up to one of these); None: its
# default, 4051.  A link against glibc here grows its table to 16381.
HASH_SIZES = (16381, None, 8191, 32749, 65537)


@dataclass(frozen=True)
class Slim:
    """How a build's link is run slim: the folder of slim copies (first on the library
    path), the link's arguments that named a copied file, and the hash table size; and
    the linker's own command where it writes the same bytes (`direct`: the first
    placement's, with where its output and its script stand in it)."""
    folder: str
    renamed: tuple[tuple[str, str], ...]
    hash_size: int | None
    direct: tuple[str, ...] = ()
    direct_at: tuple[int, int] = (0, 0)

    def argv(self, argv: list[str]) -> list[str]:
        """The slim form of a placement's link (the driver's command `argv`)."""
        if self.direct:
            cmd = list(self.direct)
            cmd[self.direct_at[0]], cmd[self.direct_at[1]] = argv[argv.index("-o") + 1], _script(argv)
            return cmd
        renamed = dict(self.renamed)
        return [argv[0], f"-L{self.folder}", *(renamed.get(a, a) for a in argv[1:]),
                *([f"-Wl,--hash-size={self.hash_size}"] if self.hash_size else [])]


def _script(argv: list[str]) -> str | None:
    """The placement's linker script a driver's command names (-Wl,-T,FILE), if one does."""
    scripts = [a[len("-Wl,-T,"):] for a in argv if a.startswith("-Wl,-T,")]
    return scripts[0] if len(scripts) == 1 else None


_slim: dict[tuple, Slim | None] = {}  # a build's link -> how it is run slim (None: as it is)
_locks: dict[tuple, threading.Lock] = {}
_guard = threading.Lock()


def link(build: tuple, argv: list[str], cwd: str | None, run: Callable[..., str]) -> None:
    """Run a placement's link `argv` (in `cwd`; its -o names the output) of the build
    whose link is `build`: slim once its first placement showed that the slim link writes
    the same bytes.  run(argv, cwd) runs a link and returns what it printed."""
    out = argv[argv.index("-o") + 1]
    with _guard:
        lock = _locks.setdefault(build, threading.Lock())
    with lock:
        if build not in _slim:
            _slim[build] = _first(argv, out, cwd, run)
            return
    slim = _slim[build]
    run(slim.argv(argv) if slim else argv, cwd)


def _first(argv: list[str], out: str, cwd: str | None, run: Callable[..., str]) -> Slim | None:
    """Link `argv` as it is, traced; then its slim form, if one writes the same bytes (None:
    none does, or its copies cannot be made, in an unwritable cache say)."""
    try:
        printed = run([*argv, "-Wl,-t"], cwd)
    except Exception:  # a link command that takes no -Wl,-t (not a compiler driver): as it is
        run(argv, cwd)
        return None
    try:
        return _slim_form(argv, out, printed, cwd, lambda a: run(a, cwd))
    except (OSError, ELFError):
        return None


def _slim_form(argv: list[str], out: str, printed: str, cwd: str | None,
               run: Callable[[list[str]], str]) -> Slim | None:
    """The slim form of a link (run in `cwd`) that wrote `out` and printed its trace, tried
    into a file beside `out`."""
    at = functools.partial(os.path.join, cwd or "")  # a path the link names, from here
    opened = list(dict.fromkeys(p for p in (ln.strip() for ln in printed.splitlines()) if p and os.path.isfile(at(p))))
    kinds = {p: _kind(at(p)) for p in opened}
    libraries = [p for p in opened if kinds[p] == "library"]
    scripts = [p for p in opened if kinds[p] == "script"]
    names = _dynamic_names(at(out))
    if not libraries or names is None or (copies := _copies(libraries, scripts, names, at)) is None:
        return None
    trial = f"{out}.slim"
    trial_argv = [trial if a == out else a for a in argv]
    try:
        for size in HASH_SIZES:
            slim = Slim(*copies, size)
            try:
                run(slim.argv(trial_argv))
            except Exception:  # the linker takes no slim copy (a BuildError): link as the build does
                return None
            if _same(at(out), at(trial)):
                return _direct(slim, trial_argv, out, cwd, run)
        return None
    finally:
        Path(at(trial)).unlink(missing_ok=True)


def _direct(slim: Slim, trial_argv: list[str], out: str, cwd: str | None,
            run: Callable[[list[str]], str]) -> Slim:
    """`slim` with the linker's own command, where the driver says it (-###) and that
    command writes the first placement's bytes too; else `slim` as it is."""
    at = functools.partial(os.path.join, cwd or "")
    driver, trial, script = slim.argv(trial_argv), trial_argv[trial_argv.index("-o") + 1], _script(trial_argv)
    cmd = _linker_command(driver, cwd)
    if not cmd or script is None or cmd.count(trial) != 1 or cmd.count(script) != 1:
        return slim
    Path(at(trial)).unlink(missing_ok=True)  # written anew, or the trial fails
    try:
        run(cmd)
    except Exception:  # a linker that needs what its driver gives it besides its arguments
        return slim
    if not (os.path.exists(at(trial)) and _same(at(out), at(trial))):
        return slim
    return dataclasses.replace(slim, direct=tuple(cmd), direct_at=(cmd.index(trial), cmd.index(script)))


def _linker_command(driver: list[str], cwd: str | None) -> list[str] | None:
    """The command a compiler driver's link runs (the last line of its -###), gcc's
    collect2 replaced by the ld it runs and the LTO plugin's arguments dropped; None
    where the driver does not say."""
    try:
        p = subprocess.run([*driver, "-###"], capture_output=True, text=True, cwd=cwd, timeout=60)
        lines = [ln for ln in p.stderr.splitlines() if ln.startswith(" ")]
        if p.returncode or not lines:
            return None
        cmd = shlex.split(lines[-1])
        if os.path.basename(cmd[0]) == "collect2":
            ld = subprocess.run([driver[0], "-print-prog-name=ld"], capture_output=True, text=True,
                                timeout=60).stdout.strip()
            plugin = {i + 1 for i, a in enumerate(cmd) if a == "-plugin"}
            cmd = [shutil.which(ld) or ld, *(a for i, a in enumerate(cmd[1:], 1)
                                             if a != "-plugin" and i not in plugin and not a.startswith("-plugin-opt="))]
        return cmd
    except (OSError, ValueError, subprocess.SubprocessError):
        return None


def _same(a: str, b: str) -> bool:
    with open(a, "rb") as f, open(b, "rb") as g:
        return f.read() == g.read()


def _copies(libraries: list[str], scripts: list[str], names: frozenset[str],
            at: Callable[[str], str]) -> tuple[str, tuple[tuple[str, str], ...]] | None:
    """The folder holding a slim copy of each library and a rewritten copy of each linker
    script (by base name: none when two share one), and their paths renamed to them."""
    bases = [os.path.basename(p) for p in libraries + scripts]
    if len(set(bases)) < len(bases):
        return None
    files = [(p, st.st_mtime_ns, st.st_size) for p in libraries + scripts for st in [os.stat(at(p))]]
    digest = hashlib.sha256(repr((sorted(names), files)).encode()).hexdigest()[:24]
    folder = str(paths.cache_dir() / "slim" / digest)  # kept: the same libraries and names, the same copies
    renamed = {p: os.path.join(folder, os.path.basename(p)) for p in libraries + scripts}
    if not os.path.isdir(folder):
        tmp = f"{folder}.{os.getpid()}.{threading.get_ident()}"
        os.makedirs(tmp, exist_ok=True)
        for p in libraries:
            _slim_copy(at(p), names, os.path.join(tmp, os.path.basename(p)))
        for p in scripts:
            text = Path(at(p)).read_text(errors="replace")
            Path(tmp, os.path.basename(p)).write_text(_renamed_in_script(text, renamed))
        try:
            os.replace(tmp, folder)
        except OSError:  # another thread made the same copies first
            shutil.rmtree(tmp, ignore_errors=True)
            if not os.path.isdir(folder):
                raise
    return folder, tuple(renamed.items())


def _renamed_in_script(text: str, renamed: dict[str, str]) -> str:
    """A linker script naming each library by its copy (by path, or by bare name)."""
    for path, copy in renamed.items():
        for name in (path, os.path.basename(path)):
            text = re.sub(rf"(?<![\w/.+-]){re.escape(name)}(?![\w/.+-])", copy, text)
    return text


def _kind(path: str) -> str:
    """What a file a link opened is, from its first bytes: "library" (ELF ET_DYN), "script"
    (text), or "other" (an object, an archive, an executable)."""
    with open(path, "rb") as f:
        head = f.read(18)
    if head.startswith(b"!<arch>"):
        return "other"
    if not head.startswith(b"\x7fELF"):
        return "script"
    if len(head) < 18:
        return "other"
    return "library" if int.from_bytes(head[16:18], "little" if head[5] == 1 else "big") == 3 else "other"  # ET_DYN


def _dynamic_names(exe: str) -> frozenset[str] | None:
    """The names in an executable's dynamic symbol table (None: it has none: static)."""
    with open(exe, "rb") as f:
        table = ELFFile(f).get_section_by_name(".dynsym")
        return None if table is None else frozenset(s.name for s in table.iter_symbols())


@dataclass(frozen=True)
class _Library:
    """What a slim copy is made from: the dynamic symbols' names by index, the .dynsym and
    .gnu.version section headers (each with its header's offset in the file), whether the
    file is 64-bit, and the byte ranges a linker reads (all but code)."""
    names: tuple[str, ...]
    dynsym: tuple[dict, int]
    versions: tuple[dict, int] | None
    wide: bool
    ranges: tuple[tuple[int, int], ...]


@functools.lru_cache(maxsize=64)
def _library(path: str, _mtime_ns: int, _size: int) -> _Library:
    with open(path, "rb") as f:
        elf = ELFFile(f)
        headers, ranges = {}, [(0, elf["e_phoff"] + elf["e_phnum"] * elf["e_phentsize"]),
                               (elf["e_shoff"], elf["e_shoff"] + elf["e_shnum"] * elf["e_shentsize"])]
        for i, sec in enumerate(elf.iter_sections()):
            if sec.name in (".dynsym", ".gnu.version"):
                headers[sec.name] = (dict(sec.header), elf["e_shoff"] + i * elf["e_shentsize"])
            if sec["sh_type"] != "SHT_NOBITS" and not (sec["sh_type"] == "SHT_PROGBITS" and sec["sh_flags"] & 0x4):
                ranges.append((sec["sh_offset"], sec["sh_offset"] + sec["sh_size"]))  # all but code (SHF_EXECINSTR)
        names = tuple(sym.name for sym in elf.get_section_by_name(".dynsym").iter_symbols())
        return _Library(names, headers[".dynsym"], headers.get(".gnu.version"), elf.elfclass == 64, tuple(ranges))


def _slim_copy(real: str, names: frozenset[str], out: str) -> None:
    """A sparse copy of a shared library with its dynamic symbols cut to `names` (its
    local ones kept), in their order, their versions with them."""
    st = os.stat(real)
    lib = _library(real, st.st_mtime_ns, st.st_size)
    dynsym = lib.dynsym[0]
    keep = [i for i, n in enumerate(lib.names) if i < dynsym["sh_info"] or n in names]
    if len(keep) <= dynsym["sh_info"]:  # it defines nothing the executable uses: ld takes an empty table amiss
        shutil.copyfile(real, out)
        return
    size_at, word = (32, "<Q") if lib.wide else (20, "<I")  # sh_size within a section header
    tables = [(*lib.dynsym, dynsym["sh_entsize"])] + ([(*lib.versions, 2)] if lib.versions else [])
    with open(real, "rb") as src, open(out, "wb") as dst:
        dst.truncate(st.st_size)
        for start, end in lib.ranges:
            src.seek(start)
            dst.seek(start)
            dst.write(src.read(end - start))
        for header, at, entry in tables:
            src.seek(header["sh_offset"])
            table = src.read(header["sh_size"])
            dst.seek(header["sh_offset"])
            dst.write(b"".join(table[i * entry:(i + 1) * entry] for i in keep))
            dst.seek(at + size_at)
            dst.write(struct.pack(word, len(keep) * entry))
