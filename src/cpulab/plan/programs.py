"""Your own programs in a plan: build any source tree under each variant, time its runs.

    [program.hashdeep]
    source = "~/src/hashdeep"                # a directory or a tarball; never modified
    build = ["sh bootstrap.sh", "./configure CC={cc} CFLAGS='{cflags}'", "make -j{jobs}"]
    run = "{build}/src/sha256deep {file}"
    check = { exit = 0, stdout_regex = "^[0-9a-f]{64} " }
    [program.hashdeep.inputs]
    file = { random_file = ["10M", "100M", "1G"] }

Templates are filled by cpulab with str.format from a fixed set of fields (cc, cflags,
ldflags, jobs, build, and the program's input names; '{{' is a literal brace).  The run
template is split into words first and each word filled, so nothing passes through a
shell; the build steps are shell commands by nature and run with /bin/sh in the copy.

Each (program, variant) is built in its own out-of-tree copy, cached by the hash of the
source tree, the templates, the variant's flags and the compiler's version; the log and
the exact commands are kept beside it.  Inputs are random files made once and cached.
"""
from __future__ import annotations

import fcntl
import hashlib
import itertools
import json
import os
import random
import shlex
import shutil
import string
import subprocess
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

from cpulab import params
from cpulab import paths
from cpulab.measure import processes
from cpulab.plan import variants as toolchain
from cpulab.measure.processes import Check, CommandError, ProcessTarget, Rounds
from cpulab.measure.rounds import Schedule
from cpulab.plan.variants import Variant

BUILD_FIELDS = ("cc", "cflags", "ldflags", "jobs", "build")
BUILD_STEP_TIMEOUT_S = 3600  # configure + make of a real project on a slow machine
LOG_TAIL_LINES = 8
# Inputs may not fill the disk: keep this much free after writing them.
FREE_SPACE_MARGIN = 1 << 30
_PROGRAM_KEYS = {"source", "build", "run", "check", "inputs", "timeout"}


@dataclass(frozen=True)
class Program:
    name: str
    source: str  # absolute path of a directory or a tarball
    build: tuple[str, ...]
    run: str
    check: Check = Check()
    inputs: dict[str, tuple[str, ...]] = field(default_factory=dict)  # name -> sizes of random files

    def grid(self, overrides: dict[str, list[str]] | None = None) -> list[dict[str, str]]:
        axes = {**self.inputs, **(overrides or {})}
        keys = list(axes)
        return [dict(zip(keys, combo)) for combo in itertools.product(*(axes[k] for k in keys))]


def template_fields(text: str, where: str) -> set[str]:
    try:
        names = {f for _, f, _, _ in string.Formatter().parse(text) if f is not None}
    except ValueError as e:
        raise CommandError(f"{where}: {e} in {text!r} (write {{{{ and }}}} for literal braces)") from None
    for n in names:
        if not n.isidentifier():
            raise CommandError(f"{where}: template field {{{n}}} is not a plain name")
    return names


def _require_fields(text: str, allowed: set[str], where: str) -> None:
    unknown = sorted(template_fields(text, where) - allowed)
    if unknown:
        raise CommandError(f"{where}: unknown template field {{{unknown[0]}}} (known: {', '.join(sorted(allowed))})")


def parse_program(name: str, d: dict, where: str) -> Program:
    """One [program.NAME] table -> Program; every template, the regex and the source
    are checked here, before anything is built."""
    if not isinstance(d, dict):
        raise CommandError(f"{where}: expected a table")
    unknown = sorted(set(d) - _PROGRAM_KEYS)
    if unknown:
        raise CommandError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(sorted(_PROGRAM_KEYS))})")
    for key in ("source", "run"):
        if not isinstance(d.get(key), str) or not d[key].strip():
            raise CommandError(f"{where}.{key}: required, a string")
    source = Path(d["source"]).expanduser()
    if not source.exists():
        raise CommandError(f"{where}.source: {source} does not exist")
    if source.is_file() and not tarfile.is_tarfile(source):
        raise CommandError(f"{where}.source: {source} is neither a directory nor a tarball")
    steps = d.get("build", [])
    if isinstance(steps, str):
        steps = [steps]
    if not isinstance(steps, list) or not all(isinstance(s, str) for s in steps):
        raise CommandError(f"{where}.build: expected a list of shell commands")
    inputs = {}
    for iname, spec in (d.get("inputs") or {}).items():
        at = f"{where}.inputs.{iname}"
        if not iname.isidentifier() or iname in BUILD_FIELDS:
            raise CommandError(f"{at}: an input name must be a plain name other than {', '.join(BUILD_FIELDS)}")
        if not isinstance(spec, dict) or set(spec) != {"random_file"}:
            raise CommandError(f"{at}: expected {{ random_file = [sizes] }}")
        sizes = spec["random_file"] if isinstance(spec["random_file"], list) else [spec["random_file"]]
        for s in sizes:
            parse_size(str(s), at)
        inputs[iname] = tuple(str(s) for s in sizes)
    for i, step in enumerate(steps):
        _require_fields(step, set(BUILD_FIELDS), f"{where}.build[{i}]")
    _require_fields(d["run"], set(BUILD_FIELDS) | set(inputs), f"{where}.run")
    try:
        shlex.split(d["run"])
    except ValueError as e:
        raise CommandError(f"{where}.run: {e}") from None
    check = d.get("check", {})
    if not isinstance(check, dict) or set(check) - {"exit", "stdout_regex"}:
        raise CommandError(f"{where}.check: expected {{ exit = 0, stdout_regex = \"...\" }}")
    if "exit" in check and not (isinstance(check["exit"], int) and not isinstance(check["exit"], bool)):
        raise CommandError(f"{where}.check.exit: expected an integer exit status")
    if "stdout_regex" in check:
        processes.compile_regex(str(check["stdout_regex"]), f"{where}.check.stdout_regex")
    return Program(name, str(source.resolve()), tuple(steps), d["run"],
                   Check(check.get("exit", 0), check.get("stdout_regex")), inputs)


def parse_programs(table, where: str) -> dict[str, Program]:
    if table is None:
        return {}
    if not isinstance(table, dict):
        raise CommandError(f"{where}: program: expected [program.NAME] tables")
    return {name: parse_program(name, d, f"{where}: program.{name}") for name, d in table.items()}


def parse_size(text: str, where: str) -> int:
    try:
        return params.parse_size(text)
    except params.ParamError as e:
        raise CommandError(f"{where}: {e}") from None


# ---- inputs ------------------------------------------------------------------------

def input_dir() -> Path:
    return paths.cache_dir() / "inputs"


def random_file_path(size: int) -> Path:
    return input_dir() / f"random-{size}.bin"


def check_inputs_fit(sizes: set[int], where: str) -> None:
    """The random files not made yet must fit on the disk, with a margin to spare."""
    missing = sum(s for s in sizes if not random_file_path(s).exists())
    if not missing:
        return
    d = input_dir()
    probe = next((p for p in [d, *d.parents] if p.exists()), Path("/"))
    free = shutil.disk_usage(probe).free
    if missing + FREE_SPACE_MARGIN > free:
        raise CommandError(f"{where}: inputs need {missing / 2**30:.1f} GiB but {probe} has "
                           f"{free / 2**30:.1f} GiB free (keeping {FREE_SPACE_MARGIN >> 30} GiB spare)")


def random_file(size: int) -> Path:
    """A file of random bytes of this size, made once (same bytes every time: seeded by size)."""
    path = random_file_path(size)
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    rng, left = random.Random(size), size
    with open(tmp, "wb") as f:
        while left:
            n = min(left, 1 << 22)
            f.write(rng.randbytes(n))
            left -= n
    os.replace(tmp, path)
    return path


# ---- building ----------------------------------------------------------------------

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
    status: str  # ok | build-failed
    tree: str  # the built copy: {build}
    hash: str  # of the inputs
    commands: list[str]  # the exact shell commands, in order
    log: str  # path of the build log
    error: str = ""
    exe: str = ""  # the run template's program, when it is a built file
    code_hash: str = ""  # of that file
    size_bytes: int = 0

    def artifact(self, compiler_version: str) -> dict:
        return {"hash": self.hash, "code_hash": self.code_hash, "path": self.exe or self.tree,
                "size_bytes": self.size_bytes, "compiler_version": compiler_version, "commands": self.commands}


def template_values(v: Variant, tree: Path) -> dict[str, str]:
    return {"cc": v.compiler, "cflags": " ".join((*v.abi_flags, *v.cflags)),
            "ldflags": " ".join((*v.abi_flags, *v.ldflags)), "jobs": str(os.cpu_count() or 1), "build": str(tree)}


def run_argv(p: Program, values: dict[str, str]) -> list[str]:
    """The run template split into words, then each word filled: no shell involved."""
    return [w.format_map(values) for w in shlex.split(p.run)]


def point_argv(p: Program, v: Variant, b: ProgramBuild, point: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """The input files of one parameter point (made once, cached) and the run's argv."""
    files = {k: str(random_file(parse_size(s, k))) for k, s in point.items()}
    return files, run_argv(p, {**template_values(v, Path(b.tree)), **files})


def build_key(p: Program, v: Variant) -> str:
    h = hashlib.sha256(source_hash(Path(p.source)).encode())
    h.update(json.dumps([list(p.build), p.run, v.compiler, toolchain.compiler_version(v.compiler),
                         list(v.cflags), list(v.ldflags), list(v.abi_flags)]).encode())
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
            d = json.loads(done.read_text())
            return ProgramBuild(**d)
        shutil.rmtree(home, ignore_errors=True)
        home.mkdir()
        tree, log = home / "tree", home / "build.log"
        values = template_values(v, tree)
        commands = [s.format_map(values) for s in p.build]
        _copy_source(Path(p.source), tree)
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
        b = ProgramBuild("ok", str(tree), key, commands, str(log))
        if failed:
            tail = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()][-LOG_TAIL_LINES:]
            b.status, b.error = "build-failed", failed + " | " + " | ".join(tail)
            kept = home.with_name(home.name + ".failed.log")
            shutil.copyfile(log, kept)
            shutil.rmtree(home, ignore_errors=True)
            b.log, b.tree = str(kept), ""
            return b
        exe = Path(run_argv(p, {**values, **{k: "" for k in p.inputs}})[0])
        if exe.is_file():
            data = exe.read_bytes()
            b.code_hash, b.size_bytes, b.exe = hashlib.sha256(data).hexdigest(), len(data), str(exe)
        done.write_text(json.dumps(b.__dict__))
        return b


# ---- in a plan ---------------------------------------------------------------------

def check_plan_programs(plan, where: str) -> None:
    """Parameters of program workloads name its inputs and are sizes; the inputs fit."""
    sizes: set[int] = set()
    for e in plan.experiments:
        for w in e.workloads:
            if w not in plan.programs:
                continue
            prog = plan.programs[w]
            for k, values in (e.params.get(w) or {}).items():
                if k not in prog.inputs:
                    raise CommandError(f"{where}: experiment {e.name!r}: params: program {w!r} has no input {k!r} "
                                       f"(it has: {', '.join(prog.inputs) or 'none'})")
            for point in prog.grid(e.params.get(w)):
                sizes |= {parse_size(s, f"{where}: program.{w}.inputs") for s in point.values()}
    check_inputs_fit(sizes, where)


def run_in_plan(plan, store, run_id: int, executor, progress, rng: random.Random) -> None:
    """Build every (program, variant) of the plan, then check and time their runs,
    one experiment at a time, in the one rounds loop with the plan's looks and budget."""
    schedule = Schedule.of_plan(plan.as_dict())
    for e in plan.experiments:
        names = [w for w in e.workloads if w in plan.programs]
        if not names:
            continue
        targets = _program_targets(plan, e, names, store, run_id, progress)
        how = Rounds(warmup=1, timeout=plan.timeout, cold=plan.cold)
        processes.measure(store, targets, how, schedule, executor, progress, rng)


def _program_targets(plan, e, names: list[str], store, run_id: int, progress) -> list[ProcessTarget]:
    targets = []
    progress.phase("build", len(names) * len(e.variants))
    for pname, vname in itertools.product(names, e.variants):
        p, v = plan.programs[pname], plan.variant(vname)
        cv = toolchain.compiler_version(v.compiler)
        store.add_variant(run_id, v.as_dict(), cv)
        status, error, b = "pending", "", None
        if why := toolchain.unavailable_reason(v):
            status, error = "skipped", why
        else:
            b = build_program(p, v)
            store.add_analysis(run_id, "program-build", {"status": b.status, "commands": b.commands, "log": b.log,
                                                         "tree": b.tree, "error": b.error}, key=f"{pname}/{vname}")
            if b.status == "ok":
                store.add_artifact(b.artifact(cv))
            else:
                status, error = b.status, b.error
        for point in p.grid(e.params.get(pname)):
            rid = store.add_result(run_id, pname, vname, point, processes.UNIT, status, error,
                                   b.hash if b and b.status == "ok" else None, experiment=e.name)
            if status != "pending":
                continue
            files, argv = point_argv(p, v, b, point)
            targets.append(ProcessTarget(rid, f"{pname} {vname} {' '.join(point.values())}",
                                         (e.name, pname, json.dumps(point, sort_keys=True)), argv, p.check,
                                         cold_files=list(files.values()), env=dict(v.env)))
        progress.advance(f"{pname} / {vname}" + (f": {status}" if status != "pending" else ""))
    return targets
