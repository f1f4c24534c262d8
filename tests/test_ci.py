"""cpulab ci: the gate's exit statuses, and a toy repository with a known regression
measured at both commits in one run, its work tree untouched."""
from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from conftest import skip_unless_buildable
from cpulab.analysis.gate import NO_REGRESSION, REGRESSION, UNDECIDED, gate
from cpulab.model import Comparison
from cpulab.plan.ci import parse_range
from cpulab.plan.plan import PlanError


def comparison(verdict: str, ratio: float | None, instruction_ratio: float | None = None) -> Comparison:
    return Comparison("e", "prog", {}, "base", "head", verdict, ratio, instruction_ratio=instruction_ratio)


@pytest.mark.parametrize("verdict,ratio,threshold,fail_on_unclear,status", [
    ("slower", 0.95, 0.01, False, REGRESSION),
    ("slower", 0.95, 0.10, False, NO_REGRESSION),  # significant, but within the threshold
    ("faster", 1.20, 0.01, False, NO_REGRESSION),
    ("same", 1.00, 0.01, True, NO_REGRESSION),
    ("unclear", 0.97, 0.01, False, NO_REGRESSION),
    ("unclear", 0.97, 0.01, True, UNDECIDED),
    ("inconclusive", None, 0.01, True, UNDECIDED),
])
def test_the_gate_answers_with_its_documented_status(verdict, ratio, threshold, fail_on_unclear, status):
    assert gate([comparison(verdict, ratio)], threshold, fail_on_unclear).status == status


@pytest.mark.parametrize("verdict,instruction_ratio,fail_on_unclear,status", [
    ("same", 1.02, False, REGRESSION),  # more instructions: a regression whatever the noisy time says
    ("faster", 1.006, False, REGRESSION),
    ("slower", 1.004, False, NO_REGRESSION),  # the time's verdict does not decide here
    ("unclear", 0.98, True, NO_REGRESSION),
    ("same", None, False, NO_REGRESSION),  # no count: undecided
    ("same", None, True, UNDECIDED),
])
def test_the_instruction_metric_decides_by_count(verdict, instruction_ratio, fail_on_unclear, status):
    c = comparison(verdict, 0.9, instruction_ratio)
    assert gate([c], 0.005, fail_on_unclear, metric="instructions").status == status


def test_only_head_against_base_counts():
    other = Comparison("e", "prog", {}, "O2", "O3", "slower", 0.5)
    assert gate([other], 0.01).status == NO_REGRESSION


@pytest.mark.parametrize("text", ["main", "main..", "..HEAD", "a...b"])
def test_a_range_is_base_dot_dot_head(text):
    with pytest.raises(PlanError, match="BASE..HEAD"):
        parse_range(text)


TOY_C = """#include <stdio.h>
int main(void) {{
    volatile unsigned long x = 1;
    for (long i = 0; i < {work}L; i++) x = x * 6364136223846793005UL + 1442695040888963407UL;
    printf("%lu\\n", x & 1);
    return 0;
}}
"""


def toy_repository(tmp_path, works: dict[str, int]):
    """A git repository of one C program tagged at each amount of work, and a plan that
    builds and runs it."""
    skip_unless_buildable()
    if not shutil.which("make") or not shutil.which("git"):
        pytest.skip("install make and git")
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(repo)]
    subprocess.run([*git, "init", "-q"], check=True)
    (repo / "Makefile").write_text("toy: toy.c\n\t$(CC) $(CFLAGS) -o toy toy.c\n")
    for tag, work in works.items():
        (repo / "toy.c").write_text(TOY_C.format(work=work))
        subprocess.run([*git, "add", "."], check=True)
        subprocess.run([*git, "commit", "-qm", tag], check=True)
        subprocess.run([*git, "tag", tag], check=True)
    plan = tmp_path / "plan.toml"
    plan.write_text(f'name = "toy"\nprocesses = 10\nbudget = 30\n[program.toy]\nsource = "{repo}"\n'
                    'build = ["make CC={cc} CFLAGS=\'{cflags}\'"]\nrun = "{build}/toy"\n'
                    '[[experiment]]\nname = "toy"\nworkloads = ["toy"]\nvariants = ["O2"]\n')
    return git, plan


def test_a_known_regression_fails_the_gate_and_says_so(cli, tmp_path):
    git, plan = toy_repository(tmp_path, {"fast": 4_000_000, "slow": 8_000_000})  # twice the work: clear anywhere
    summary = tmp_path / "summary.md"
    p = cli("ci", "fast..slow", "--plan", str(plan), "--markdown", str(summary), timeout=600)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "REGRESSION: slower" in summary.read_text() and "## cpulab ci fast..slow" in p.stdout
    status = subprocess.run([*git, "status", "--porcelain"], capture_output=True, text=True).stdout
    head = subprocess.run([*git, "describe", "--tags"], capture_output=True, text=True).stdout.strip()
    assert status == "" and head == "slow"  # exported with git archive: the work tree is untouched
    runs = cli("runs", "--label", "ci fast..slow", "--json")
    assert '"ci fast..slow"' in runs.stdout


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed (Debian package valgrind)")
def test_two_percent_more_instructions_fail_the_instruction_gate(cli, tmp_path):
    """2% more work is a regression by count, exactly, whatever time could tell on this
    machine; main's function is named among those counted."""
    _, plan = toy_repository(tmp_path, {"base": 1_000_000, "more": 1_020_000})
    p = cli("ci", "base..more", "--plan", str(plan), "--metric", "instructions", "--processes", "6", timeout=600)
    assert p.returncode == 1, p.stdout + p.stderr
    # 2% more in main's loop; the loader's and libc's fixed instructions dilute it a little
    assert "by instruction count" in p.stdout and re.search(r"REGRESSION: \+(1\.9|2\.0)\d%", p.stdout)
    assert "where the instructions changed: main " in p.stdout
