"""`cpulab ci BASE..HEAD`: a plan's programs at two commits, as one plan measured in one run.

Each `[program]` whose source is a git work tree is exported at both commits (git archive:
the work tree itself is never touched) and built twice, as the variants `base` and `head`
(copies of the experiment's variant), so that the two builds meet in the same rounds, in
turns, under the plan's budget and looks: the method issue's way to compare within one
run rather than against yesterday's run on a drifting host.
"""
from __future__ import annotations

import dataclasses
import shutil
import subprocess
import tempfile
from pathlib import Path

from cpulab import paths
from cpulab.plan.plan import Experiment, Plan, PlanError, validate

GIT_TIMEOUT_S = 600


@dataclasses.dataclass(frozen=True)
class Range:
    base: str
    head: str


def parse_range(text: str) -> Range:
    base, sep, head = text.partition("..")
    if not sep or not base or not head or head.startswith("."):
        raise PlanError(f"{text!r}: expected BASE..HEAD, two git revisions (e.g. main..HEAD)")
    return Range(base, head)


def _git(repo: Path, *args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, timeout=GIT_TIMEOUT_S, **kw)


def commit_of(repo: Path, ref: str) -> str:
    p = _git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", text=True)
    if p.returncode != 0:
        raise PlanError(f"{repo}: {ref!r} is not a commit there")
    return p.stdout.strip()


def exported_tree(repo: Path, commit: str) -> Path:
    """The files of one commit, exported once into the cache (never the work tree itself)."""
    dest = paths.cache_dir() / "ci-trees" / commit
    if dest.is_dir():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{commit[:12]}-", dir=dest.parent))
    archive = _git(repo, "archive", "--format=tar", commit)
    if archive.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise PlanError(f"{repo}: git archive {commit[:12]} failed: {archive.stderr.decode(errors='replace').strip()}")
    subprocess.run(["tar", "-x", "-C", str(tmp)], input=archive.stdout, check=True, timeout=GIT_TIMEOUT_S)
    try:
        tmp.rename(dest)
    except OSError:  # another export of the same commit won: it is the same files
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def ci_plan(plan: Plan, refs: Range, variant: str | None = None) -> tuple[Plan, dict[str, dict[str, str]]]:
    """The plan of `cpulab ci` and, per program, the two commits measured."""
    if not plan.programs:
        raise PlanError(f"plan {plan.name}: cpulab ci measures [program] tables; this plan has none")
    programs, commits = {}, {}
    for name, p in plan.programs.items():
        repo = Path(p.source)
        if not repo.is_dir() or _git(repo, "rev-parse", "--git-dir").returncode != 0:
            raise PlanError(f"program.{name}.source: {repo} is not a git work tree")
        base, head = commit_of(repo, refs.base), commit_of(repo, refs.head)
        commits[name] = {"base": base, "head": head}
        programs[name] = dataclasses.replace(p, sources={"base": str(exported_tree(repo, base)),
                                                         "head": str(exported_tree(repo, head))})
    chosen = [e for e in plan.experiments if any(w in programs for w in e.workloads)]
    if not chosen:
        raise PlanError(f"plan {plan.name}: no experiment measures its programs")
    try:
        built_as = plan.variant(variant or chosen[0].baseline)
    except KeyError as e:
        raise PlanError(f"--variant: {e.args[0]}") from None
    custom = {**plan.custom_variants,
              "base": dataclasses.replace(built_as, name="base", description=f"{refs.base}, built as {built_as.name}"),
              "head": dataclasses.replace(built_as, name="head", description=f"{refs.head}, built as {built_as.name}")}
    experiments = []
    for e in chosen:
        names = [w for w in e.workloads if w in programs]
        experiments.append(Experiment(e.name, names, ["base", "head"], "base", params=e.params, title=e.title,
                                      processes=e.processes, samples=e.samples))
    ci = dataclasses.replace(plan, name=f"ci {refs.base}..{refs.head}", experiments=experiments, programs=programs,
                             custom_variants=custom, probe_tables=[])
    return validate(ci, f"cpulab ci {refs.base}..{refs.head}"), commits
