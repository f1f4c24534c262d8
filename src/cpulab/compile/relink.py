"""A program relinked into a drawn layout every round, as kernels are placed (artifacts.py).

A program's build runs with `{cc}` and `{cxx}` as small wrappers of the variant's
compilers (WRAPPER): a compile gets every function a section of its own
(artifacts.SECTION_FLAGS: the same instructions), a link is run as asked and recorded
(its working directory, its arguments and the response files it names) in the build's
links.jsonl.  The link whose output is the program the run template starts is then the
program's link (`program_link`): each round links its objects again under a layout
script drawn for that round (artifacts.layout_script: functions in a random order behind
random gaps, data behind random pads), into an executable beside the built one.

A link that compiles sources in the same step is first done apart (_compiled_apart).  A
program keeps one layout, and its table says why (`program_link`'s reason), when no
recorded link made it (a prebuilt binary, a script), when its one-step link cannot be
done apart, when it is link-time optimised (the code would be generated anew at each
link), or linked by another linker than GNU ld.
"""
from __future__ import annotations

import hashlib
import json
import os
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from cpulab.compile.artifacts import SECTION_FLAGS, BuildError, link_in_layout, output_at, run_step
from cpulab.workloads import CXX_SUFFIXES

SOURCE_SUFFIXES = (".c", ".s", ".S", ".i", ".ii", ".m", ".f", ".f90", *CXX_SUFFIXES)
# Words of a one-step link that it is not done apart for (_compiled_apart).
UNSPLIT = ("-x", "-fprofile-use", "-fauto-profile", "-fwhole-program", "-combine")
NOT_A_LINK = ("-c", "-S", "-E", "-M", "-MM", "-v", "--version", "-dumpversion", "-dumpmachine", "-print-prog-name",
              "--help")

# The wrapper: the compiler itself for everything but a link, which it runs and records.
# `python -S`: 10 ms a call (a configure script calls it some hundred times).
WRAPPER = """#!{python} -S
import fcntl, json, os, subprocess, sys
REAL, LOG, SECTIONS, NOT_A_LINK = {real!r}, {log!r}, {sections!r}, {not_a_link!r}
args = sys.argv[1:]
if any(a in NOT_A_LINK or a.startswith("-print-") for a in args):
    if "-c" in args:
        args = [*args, *SECTIONS]
    os.execvp(REAL, [REAL, *args])
code = subprocess.call([REAL, *args])
if code == 0:
    rsp = {{}}
    for a in args:
        if a.startswith("@") and os.path.isfile(a[1:]):
            with open(a[1:]) as f:
                rsp[a] = f.read()
    with open(LOG, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.write(json.dumps({{"cwd": os.getcwd(), "argv": [REAL, *args], "rsp": rsp}}) + "\\n")
sys.exit(code)
"""


def write_wrappers(home: Path, cc: str, cxx: str) -> dict[str, str]:
    """The build's `{cc}` and `{cxx}`: wrappers recording links into home/links.jsonl."""
    out = {}
    for field, real in (("cc", cc), ("cxx", cxx)):
        path = home / f"cpulab-{field}"
        path.write_text(WRAPPER.format(python=sys.executable, real=real, log=str(home / "links.jsonl"),
                                       sections=list(SECTION_FLAGS), not_a_link=NOT_A_LINK))
        path.chmod(0o755)
        out[field] = str(path)
    return out


def _output(argv: list[str], cwd: str) -> Path:
    """The file a link writes."""
    i = output_at(argv)
    return Path(cwd, "a.out" if i is None else argv[i][2:] if argv[i] != "-o" else argv[i + 1]).resolve()


def program_link(home: Path, exe: str) -> tuple[dict | None, str]:
    """The recorded link that made the program `exe` (and ""), or None and why the
    program keeps one layout."""
    log = home / "links.jsonl"
    target = Path(exe).resolve()
    links = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    made = [ln for ln in links if _output(ln["argv"], ln["cwd"]) == target]
    if not made:
        return None, "one layout: no link of the build made it (a prebuilt program or a script)"
    link = made[-1]
    words = link["argv"][1:] + [w for text in link["rsp"].values() for w in shlex.split(text)]
    if any(w.startswith("-flto") and w != "-flto=none" and w != "-fno-lto" for w in words):
        return None, "one layout: link-time optimised (its code is generated at each link)"
    if any(w.startswith("-fuse-ld=") and w != "-fuse-ld=bfd" for w in words):
        return None, "one layout: linked by another linker than GNU ld"
    if any(_is_source(w) for w in words):
        if (link := _compiled_apart(home, link)) is None:
            return None, "one layout: compiled and linked in one step, which could not be done apart"
    if not _objects(link):
        return None, "one layout: its link names no object file"
    return link, ""


def _is_source(word: str) -> bool:
    return Path(word).suffix in SOURCE_SUFFIXES and not word.startswith("-")


def _compiled_apart(home: Path, link: dict) -> dict | None:
    """A link that compiles its sources in the same step (`cc -O2 -o prog prog.c`), done
    apart: each source compiled alone with the link's flags (and the section flags, as
    every compile of the build) into an object kept under home/apart, and the link
    naming the objects in their place: the same program, whose objects can be relinked.
    None where the words are not plain enough to split (a response file, a language
    given by -x), where a compile apart could make other code (a profile read by the
    object's name, -fprofile-use; one unit taken as the whole program), or where a
    compile fails."""
    argv, cwd = link["argv"], link["cwd"]
    if link["rsp"] or any(a.startswith(UNSPLIT) for a in argv[1:]):
        return None
    out = output_at(argv)
    output = set() if out is None else {out, out + 1} if argv[out] == "-o" else {out}
    sources = [i for i, a in enumerate(argv) if i and i not in output and _is_source(a)]
    # what only a link reads is left out of the compiles (gcc would ignore it there)
    flags = [a for i, a in enumerate(argv) if i and i not in output and i not in sources
             and not a.startswith("-l") and not a.endswith((".o", ".a")) and ".so" not in Path(a).name]
    apart = home / "apart"
    apart.mkdir(exist_ok=True)
    objects = {}
    for i in sources:
        key = hashlib.sha256(json.dumps([cwd, argv, i]).encode()).hexdigest()[:16]
        objects[i] = obj = str(apart / f"{key}-{Path(argv[i]).stem}.o")
        try:
            run_step([argv[0], *flags, *SECTION_FLAGS, "-c", argv[i], "-o", obj], cwd=cwd)
        except BuildError:  # failed, or timed out
            return None
    return {**link, "argv": [objects.get(i, a) for i, a in enumerate(argv)]}


def _objects(link: dict) -> dict[str, str]:
    """The object files a link names: as given -> absolute."""
    return {w: str(Path(link["cwd"], w).resolve()) for w in link["argv"][1:]
            if w.endswith(".o") and Path(link["cwd"], w).is_file()}


@dataclass(frozen=True)
class Relink:
    """One program build's link, to place anew: `place(i)` links layout i (once) beside
    the built executable and returns its path."""
    exe: str
    key: str  # the build's hash: with i, what a layout is drawn from
    link: dict

    def objects(self) -> list[str]:
        return list(_objects(self.link).values())

    def place(self, i: int) -> str:
        out = f"{self.exe}.layout{i}.{os.getpid()}"
        if os.path.exists(out):
            return out
        objects, cwd = _objects(self.link), self.link["cwd"]
        for at, text in self.link["rsp"].items():  # a response file the build removed since
            if not Path(cwd, at[1:]).exists():
                Path(cwd, at[1:]).write_text(text)
        # the objects named by their absolute paths, which the script's patterns match exactly
        link_in_layout([objects.get(w, w) for w in self.link["argv"]], Path(out), self.key, i,
                       {o: Path(o) for o in objects.values()}, cwd)
        return out
