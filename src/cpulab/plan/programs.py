"""Your own programs in a plan: the `[program.NAME]` tables, read and checked.

    [program.hashdeep]
    source = "~/src/hashdeep"                # a directory or a tarball; never modified
    build = ["sh bootstrap.sh", "./configure CC={cc} CXX={cxx} CFLAGS='{cflags}'", "make -j{jobs}"]
    run = "{build}/src/sha256deep {file}"
    check = { exit = 0, stdout_regex = "^[0-9a-f]{64} " }
    [program.hashdeep.inputs]
    file = { random_file = ["10M", "100M", "1G"] }

Templates are filled by cpulab with str.format from a fixed set of fields (cc, cxx,
cflags, ldflags, jobs, build, and the program's input names; '{{' is a literal brace).  Every
template, the regex, the source and the inputs' disk space are checked here, before
anything is built (build.programs builds, measure.programs times).
"""
from __future__ import annotations

import itertools
import re
import shlex
import shutil
import string
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

from cpulab import params
from cpulab.paths import input_dir, random_file_path

BUILD_FIELDS = ("cc", "cxx", "cflags", "ldflags", "jobs", "build")
# Inputs may not fill the disk: keep this much free after writing them.
FREE_SPACE_MARGIN = 1 << 30


class CommandError(Exception):
    """Bad input for a command or a program: one line naming it."""


@dataclass(frozen=True)
class Check:
    """What a correct run looks like: its exit status, and a regex its stdout must match
    (re.search, multiline) when one is given."""
    exit: int | None = 0
    stdout_regex: str | None = None

    def failure(self, exit_code: int, stdout: str | None) -> str:
        if self.exit is not None and exit_code != self.exit:
            return f"exit status {exit_code}, expected {self.exit}"
        if self.stdout_regex is not None and stdout is not None \
                and not re.search(self.stdout_regex, stdout, re.MULTILINE):
            return f"stdout does not match {self.stdout_regex!r}: {stdout.strip()[:120]!r}"
        return ""


def compile_regex(text: str, where: str) -> None:
    try:
        re.compile(text)
    except re.error as e:
        raise CommandError(f"{where}: not a valid regular expression: {e}") from None


@dataclass(frozen=True)
class Program:
    name: str
    source: str  # absolute path of a directory or a tarball
    build: tuple[str, ...]
    run: str
    check: Check = Check()
    inputs: dict[str, tuple[str, ...]] = field(default_factory=dict)  # name -> sizes of random files
    # A variant that builds another tree of the program (cpulab ci: the base and the head
    # commit, as the variants "base" and "head"); the others build `source`.
    sources: dict[str, str] = field(default_factory=dict)

    def source_for(self, variant: str) -> str:
        return self.sources.get(variant, self.source)

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
    """One [program.NAME] table (its shape read by the plan's model, plan/model.py) ->
    Program; its source, inputs, templates and regex are checked here, before anything is
    built."""
    source = Path(d["source"]).expanduser()
    if not source.exists():
        raise CommandError(f"{where}.source: {source} does not exist")
    if source.is_file() and not tarfile.is_tarfile(source):
        raise CommandError(f"{where}.source: {source} is neither a directory nor a tarball")
    inputs = {}
    for iname, spec in d["inputs"].items():
        at = f"{where}.inputs.{iname}"
        if not iname.isidentifier() or iname in BUILD_FIELDS:
            raise CommandError(f"{at}: an input name must be a plain name other than {', '.join(BUILD_FIELDS)}")
        for s in spec["random_file"]:
            parse_size(str(s), at)
        inputs[iname] = tuple(str(s) for s in spec["random_file"])
    for i, step in enumerate(d["build"]):
        _require_fields(step, set(BUILD_FIELDS), f"{where}.build[{i}]")
    _require_fields(d["run"], set(BUILD_FIELDS) | set(inputs), f"{where}.run")
    try:
        shlex.split(d["run"])
    except ValueError as e:
        raise CommandError(f"{where}.run: {e}") from None
    check = d["check"]
    if check["stdout_regex"] is not None:
        compile_regex(check["stdout_regex"], f"{where}.check.stdout_regex")
    return Program(name, str(source.resolve()), tuple(d["build"]), d["run"],
                   Check(check["exit"], check["stdout_regex"]), inputs)


def parse_programs(tables: dict, where: str) -> dict[str, Program]:
    return {name: parse_program(name, d.model_dump(), f"{where}: program.{name}") for name, d in tables.items()}


def parse_size(text: str, where: str) -> int:
    try:
        return params.parse_size(text)
    except params.ParamError as e:
        raise CommandError(f"{where}: {e}") from None


# ---- inputs ------------------------------------------------------------------------

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


# ---- building ----------------------------------------------------------------------

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
