"""`cpulab ci BASE..HEAD`: a plan's programs and kernels at two commits, as one plan measured
in one run.

Each `[program]` whose source is a git work tree, and each `[kernel]` whose source file
lies in one, is exported at both commits (git archive: the work tree itself is never
touched) and built twice, as the variants `base` and `head` (copies of the experiment's
variant; a kernel's files are read from each commit's tree: Workload.for_variant), so that the two builds meet in the same rounds, in
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


def _repository(path: Path) -> Path | None:
    """The top of the git work tree a folder lies in, or None."""
    p = _git(path, "rev-parse", "--show-toplevel", text=True) if path.is_dir() else None
    return Path(p.stdout.strip()) if p is not None and p.returncode == 0 else None


def repository_of(plan: Plan) -> Path:
    """The git work tree of the plan's first program or kernel that lies in one."""
    for folder in [Path(p.source) for p in plan.programs.values()] + [Path(k["source"]).parent
                                                                       for k in plan.kernels.values()]:
        if (repo := _repository(folder)) is not None:
            return repo
    raise PlanError(f"plan {plan.name}: none of its [program] or [kernel] tables is in a git work tree")


def ci_plan(plan: Plan, refs: Range, variant: str | None = None) -> tuple[Plan, dict[str, dict[str, str]]]:
    """The plan of `cpulab ci` and, per program or kernel, the two commits measured."""
    programs, kernels, commits = {}, {}, {}
    for name, p in plan.programs.items():
        repo = Path(p.source)
        if not repo.is_dir() or _git(repo, "rev-parse", "--git-dir").returncode != 0:
            raise PlanError(f"program.{name}.source: {repo} is not a git work tree")
        base, head = commit_of(repo, refs.base), commit_of(repo, refs.head)
        commits[name] = {"base": base, "head": head}
        programs[name] = dataclasses.replace(p, sources={"base": str(exported_tree(repo, base)),
                                                         "head": str(exported_tree(repo, head))})
    for name, k in plan.kernels.items():
        if (repo := _repository(Path(k["source"]).parent)) is None:
            continue  # measured at both commits as it is now: not in the ci plan
        base, head = commit_of(repo, refs.base), commit_of(repo, refs.head)
        commits[name] = {"base": base, "head": head}
        kernels[name] = {**k, "root": str(repo), "trees": {"base": str(exported_tree(repo, base)),
                                                           "head": str(exported_tree(repo, head))}}
    if not commits:
        raise PlanError(f"plan {plan.name}: cpulab ci measures [program] tables, and [kernel] tables in a git work "
                        "tree; this plan has none")
    measured = {**programs, **kernels}
    chosen = [e for e in plan.experiments if any(w in measured for w in e.workloads)]
    if not chosen:
        raise PlanError(f"plan {plan.name}: no experiment measures its programs or kernels")
    try:
        built_as = plan.variant(variant or chosen[0].baseline)
    except KeyError as e:
        raise PlanError(f"--variant: {e.args[0]}") from None
    custom = {**plan.custom_variants,
              "base": dataclasses.replace(built_as, name="base", description=f"{refs.base}, built as {built_as.name}"),
              "head": dataclasses.replace(built_as, name="head", description=f"{refs.head}, built as {built_as.name}")}
    experiments = []
    for e in chosen:
        names = [w for w in e.workloads if w in measured]
        experiments.append(Experiment(e.name, names, ["base", "head"], "base", params=e.params, title=e.title,
                                      processes=e.processes, samples=e.samples))
    ci = dataclasses.replace(plan, name=f"ci {refs.base}..{refs.head}", experiments=experiments, programs=programs,
                             kernels=kernels, custom_variants=custom, probe_tables=[])
    return validate(ci, f"cpulab ci {refs.base}..{refs.head}"), commits
