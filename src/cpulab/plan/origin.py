"""Where the measured code came from: the git commit of the directory it was built from.

A `[program]` plan's source tree, else the plan file's directory, else (the built-in plans)
cpulab's own checkout, when it runs from one: an installed cpulab (`pip install .`) has
none, though its site-packages may lie in some other work tree (pyenv's is one: every
run then named pyenv's commit).  A directory outside git, or a machine without git, gives
{}: a run records what it can learn and nothing is refused for it.
"""
from __future__ import annotations

import subprocess
from pathlib import Path

from cpulab.plan.plan import Plan

GIT_TIMEOUT_S = 10


def _git(directory: Path, *args: str) -> str | None:
    try:
        p = subprocess.run(["git", "-C", str(directory), *args], capture_output=True, text=True,
                           timeout=GIT_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return p.stdout.strip() if p.returncode == 0 else None


def git_origin(directory: Path) -> dict:
    """{dir, commit, dirty, commit_time, branch} of the git work tree holding `directory`."""
    commit = _git(directory, "rev-parse", "HEAD")
    if not commit:
        return {}
    status = _git(directory, "status", "--porcelain", "--untracked-files=no")
    when = _git(directory, "log", "-1", "--format=%ct")
    return {"dir": str(directory), "commit": commit, "dirty": bool(status),
            "commit_time": int(when) if when and when.isdigit() else None,
            "branch": _git(directory, "rev-parse", "--abbrev-ref", "HEAD") or ""}


def source_dirs(plan: Plan, plan_file: str | None) -> list[Path]:
    """Where to look, in order: the programs' source trees, the plan file's directory, cpulab's checkout."""
    dirs = [Path(p.source) for p in plan.programs.values() if Path(p.source).is_dir()]
    if plan_file and Path(plan_file).is_file():
        dirs.append(Path(plan_file).resolve().parent)
    return dirs + own_checkout(Path(__file__).resolve())


def own_checkout(here: Path) -> list[Path]:
    """cpulab's checkout (src/cpulab/plan/origin.py is `here`), if git tracks this file
    there: else cpulab is installed, wherever that is."""
    tracked = _git(here.parent, "ls-files", "--error-unmatch", here.name)
    return [here.parents[3]] if tracked else []


def origin_of(dirs: list[Path]) -> dict:
    """The first of these directories that git knows."""
    for d in dirs:
        if found := git_origin(d):
            return found
    return {}
