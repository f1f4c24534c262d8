"""Building a user's program (plan.programs.Program) under a variant.

Each (program, variant) is built in its own out-of-tree copy, cached by the hash of the
source tree, the templates, the variant's flags and the compiler's version; the log and
the exact commands are kept beside it.  The build steps are shell commands by nature and
run with /bin/sh in the copy; the run template is split into words first and each word
filled, so nothing passes through a shell.
"""
from __future__ import annotations

import fcntl
import hashlib
import io
import json
import os
import shlex
import shutil
import subprocess
import tarfile
import threading
from dataclasses import dataclass
from pathlib import Path

from cpulab import paths
from cpulab.compile import relink
from cpulab.model import Status
from cpulab.plan.programs import Program
from cpulab.plan.toolchain import Variant
from cpulab.machine import toolchains

BUILD_STEP_TIMEOUT_S = 3600  # configure + make of a real project on a slow machine


LOG_TAIL_LINES = 8


def source_hash(source: Path) -> str:
    """Every file's relative path, executable bit and bytes (symlinks: their target), in
    sorted order; a tarball is its bytes.  Version-control directories are left out."""
    h = hashlib.sha256()
    if source.is_file():
        h.update(source.read_bytes())
        return h.hexdigest()
    for root, dirs, files in os.walk(source):
        dirs[:] = sorted(d for d in dirs if d not in (".git", ".hg", ".svn"))
        for name in sorted(files):
            p = Path(root, name)
            rel = p.relative_to(source).as_posix().encode()
            if p.is_symlink():
                h.update(b"L" + rel + b"\0" + os.readlink(p).encode() + b"\0")
            else:
                h.update(b"F" + rel + b"\0" + bytes([os.access(p, os.X_OK)]) + p.read_bytes() + b"\0")
    return h.hexdigest()


@dataclass
class ProgramBuild:
    status: Status  # OK, BUILD_FAILED or SKIPPED (no toolchain here)
    tree: str  # the built copy: {build}
    hash: str  # of the inputs
    commands: list[str]  # the exact shell commands, in order
    log: str  # path of the build log
    error: str = ""
    exe: str = ""  # the run template's program, when it is a built file
    code_hash: str = ""  # of that file
    size_bytes: int = 0
    compiler_version: str = ""
    # The link that made `exe`, which each round runs again in a layout of its own
    # (compile/relink.py); None, and why in `one_layout`, where it cannot be.
    link: dict | None = None
    one_layout: str = ""

    def artifact(self) -> dict:
        return {"hash": self.hash, "code_hash": self.code_hash, "path": self.exe or self.tree,
                "size_bytes": self.size_bytes, "compiler_version": self.compiler_version, "commands": self.commands}

    def as_dict(self) -> dict:
        return {**self.__dict__, "status": str(self.status)}

    @classmethod
    def from_dict(cls, d: dict) -> "ProgramBuild":
        return cls(**{**d, "status": Status(d["status"])})


def template_values(v: Variant, tree: Path) -> dict[str, str]:
    return {"cc": v.compiler, "cxx": toolchains.cxx_driver(v.compiler), "cflags": " ".join((*v.abi_flags, *v.cflags)),
            "ldflags": " ".join((*v.abi_flags, *v.ldflags)), "jobs": str(os.cpu_count() or 1), "build": str(tree)}


def run_argv(p: Program, values: dict[str, str]) -> list[str]:
    """The run template split into words, then each word filled: no shell involved."""
    return [w.format_map(values) for w in shlex.split(p.run)]


def build_key(p: Program, v: Variant) -> str:
    h = hashlib.sha256(source_hash(Path(p.source_for(v.name))).encode())
    h.update(json.dumps([list(p.build), p.run, v.compiler, toolchains.compiler_version(v.compiler),
                         list(v.cflags), list(v.ldflags), list(v.abi_flags), relink.WRAPPER]).encode())
    return h.hexdigest()


def _copy_source(source: Path, tree: Path) -> None:
    """An out-of-tree copy: a directory is copied, a tarball unpacked (its single top
    directory, if it has one, becomes the tree)."""
    if source.is_dir():
        shutil.copytree(source, tree, symlinks=True, ignore=shutil.ignore_patterns(".git"))
        return
    unpack = tree.with_name("unpack")
    with tarfile.open(source) as tf:
        tf.extractall(unpack, filter="data")
    tops = list(unpack.iterdir())
    (tops[0] if len(tops) == 1 and tops[0].is_dir() else unpack).rename(tree)
    shutil.rmtree(unpack, ignore_errors=True)


def build_program(p: Program, v: Variant, cache_dir: Path | None = None) -> ProgramBuild:
    """Build (or find) the program under this variant.  A failed step is build-failed
    with the last lines of its log; failures are not cached, so a fix is retried."""
    key = build_key(p, v)
    home = Path(cache_dir or paths.cache_dir() / "programs") / f"{p.name}-{key[:20]}"
    home.parent.mkdir(parents=True, exist_ok=True)
    with open(home.parent / f".{home.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one builder per key; the others wait and reuse
        done = home / "build.json"
        if done.exists():
            return ProgramBuild.from_dict(json.loads(done.read_text()))
        shutil.rmtree(home, ignore_errors=True)
        home.mkdir()
        tree, log = home / "tree", home / "build.log"
        values = template_values(v, tree)
        # {cc} and {cxx} record the links (compile/relink.py): the program is relinked per round
        commands = [s.format_map({**values, **relink.write_wrappers(home, values["cc"], values["cxx"])})
                    for s in p.build]
        _copy_source(Path(p.source_for(v.name)), tree)
        failed = ""
        with open(log, "w") as f:
            for cmd in commands:
                f.write(f"$ {cmd}\n")
                f.flush()
                try:
                    r = subprocess.run(["/bin/sh", "-c", cmd], cwd=tree, stdout=f, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL, timeout=BUILD_STEP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    failed = f"{cmd}: timed out after {BUILD_STEP_TIMEOUT_S}s"
                    break
                if r.returncode != 0:
                    failed = f"{cmd}: exit status {r.returncode}"
                    break
        b = ProgramBuild(Status.OK, str(tree), key, commands, str(log),
                         compiler_version=toolchains.compiler_version(v.compiler))
        if failed:
            tail = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()][-LOG_TAIL_LINES:]
            b.status, b.error = Status.BUILD_FAILED, failed + " | " + " | ".join(tail)
            kept = home.with_name(home.name + ".failed.log")
            shutil.copyfile(log, kept)
            shutil.rmtree(home, ignore_errors=True)
            b.log, b.tree = str(kept), ""
            return b
        exe = Path(run_argv(p, {**values, **{k: "" for k in p.inputs}})[0])
        if exe.is_file():
            data = exe.read_bytes()
            b.code_hash, b.size_bytes, b.exe = hashlib.sha256(data).hexdigest(), len(data), str(exe)
            b.link, b.one_layout = relink.program_link(home, b.exe)
        else:
            b.one_layout = f"one layout: {exe.name} is not a file the build made"
        done.write_text(json.dumps(b.as_dict()))
        return b


def built_here(p: Program, v: Variant) -> ProgramBuild:
    """The program under this variant on this machine, or SKIPPED saying which toolchain
    is missing here."""
    if why := toolchains.unavailable_reason(v):
        return ProgramBuild(Status.SKIPPED, "", "", [], "", error=why)
    return build_program(p, v)


def packed_source(source: Path) -> bytes:
    """A program's source as a tarball, for a machine that cannot see this one's files."""
    if source.is_file():
        return source.read_bytes()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:  # not gzip: its header would date every copy
        tf.add(source, arcname=source.name, filter=lambda t: None if t.name.split("/")[-1] in (".git", ".hg", ".svn")
               else t)
    return buf.getvalue()


def unpacked_source(data: bytes, digest: str) -> Path:
    """Where a packed source lands on this machine (once per digest): a tarball that
    build_program unpacks like any other."""
    path = paths.cache_dir() / "program-sources" / f"{digest}.tar"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
        tmp.write_bytes(data)
        os.replace(tmp, path)
    return path
