"""Plans: loading, the built-in plans, and one-line errors naming the field."""
import json

import pytest

from cpulab.plan import plan as plans
from cpulab.spec import policy
from cpulab.spec.policy import DecisionPolicy
from cpulab.machine import toolchains


def write(tmp_path, text):
    p = tmp_path / "p.toml"
    p.write_text(text)
    return str(p)


GOOD = """
runs = 3
[variants.unrolled]
cflags = ["-O2", "-funroll-loops"]
[[experiment]]
name = "x"
workloads = ["sha256"]
variants = ["O2", "unrolled"]
baseline = "O2"
[experiment.params.sha256]
size = "1024..4096"
"""


def test_good_plan_loads(tmp_path):
    p = plans.load(write(tmp_path, GOOD))
    assert p.settings.processes == 3 and p.variant("unrolled").cflags == ("-O2", "-funroll-loops")
    assert p.experiments[0].params == {"sha256": {"size": ["1024", "2048", "4096"]}}


def test_builtin_plans_validate():
    for f in plans.PLAN_DIR.glob("*.toml"):
        assert plans.load(f.stem).experiments


def test_baseline_in_order_of_preference_is_the_first_buildable_here(tmp_path):
    ghost = '[variants.ghost]\ncompiler = "cpulab-no-such-cc"\npackage = "nothing"\n'
    text = GOOD.replace('"unrolled"]', '"unrolled", "ghost"]').replace("[[experiment]]", ghost + "[[experiment]]")
    for baseline, want in (('["ghost", "unrolled", "O2"]', "unrolled"), ('["O2", "unrolled"]', "O2"),
                           ('["ghost"]', "ghost")):  # none buildable: the first, whose rows say why
        p = plans.load(write(tmp_path, text.replace('baseline = "O2"', f"baseline = {baseline}")))
        assert p.experiments[0].baseline == want


def test_seeds_plan_compares_with_a_baseline_this_machine_builds():
    from cpulab.plan import toolchain
    seed001 = next(e for e in plans.load("seeds").experiments if e.name == "float-abi")
    x87 = toolchains.unavailable_reason(toolchain.BUILTIN["i386-x87"])
    assert seed001.baseline == ("O2" if x87 else "i386-x87")


@pytest.mark.parametrize("text, words", [
    ("runs = [", ["malformed TOML"]),
    ("colour = 3\n" + GOOD, ["unknown key 'colour'"]),
    (GOOD.replace('"unrolled"]', '"O9"]'), ["variants", "unknown variant 'O9'"]),
    (GOOD.replace('baseline = "O2"', 'baseline = "O3"'), ["baseline", "'O3'"]),
    (GOOD.replace('baseline = "O2"', 'baseline = ["O2", "O3"]'), ["baseline", "'O3'"]),
    (GOOD.replace("size =", "sise ="), ["params.sha256.sise", "no parameter 'sise'"]),
    (GOOD.replace('["sha256"]', '["sha512"]'), ["unknown workload 'sha512'"]),
    (GOOD.replace("runs = 3", "runs = 0"), ["processes", "1..10000"]),
    (GOOD.replace("runs = 3", "runs = 1000000000"), ["processes", "1..10000"]),
    (GOOD.replace("runs = 3", 'runs = "many"'), ["processes", "whole number"]),
    (GOOD.replace("runs = 3", "runs = true"), ["processes", "whole number"]),
    (GOOD.replace("runs = 3", "runs = 3.0"), ["processes", "whole number"]),
    (GOOD.replace("runs = 3", "warmup = -5"), ["warmup", "0.0..60.0"]),
    (GOOD.replace("runs = 3", "samples = 20000"), ["samples"]),
    (GOOD.replace("runs = 3", 'min_sample_time = "0.1"'), ["min_sample_time", "seconds"]),
    (GOOD.replace("runs = 3", "min_sample_time = nan"), ["min_sample_time"]),
    (GOOD.replace("runs = 3", "timeout = 0"), ["timeout"]),
    (GOOD.replace("runs = 3", "measure_identical = 1"), ["measure_identical", "true or false"]),
    (GOOD.replace("runs = 3", "name = 5"), ["name", "string"]),
    (GOOD.replace('baseline = "O2"', 'baseline = "O2"\nruns = 0'), ["experiment 'x'", "processes"]),
    (GOOD.replace('"1024..4096"', '"4096..1024"'), ["params.sha256.size", "range"]),
    (GOOD.replace('"1024..4096"', '"1e6"'), ["params.sha256.size", "'1e6' is not a size"]),
    (GOOD.replace('"1024..4096"', '"010"'), ["params.sha256.size", "leading zeros"]),
    (GOOD.replace('"1024..4096"', '"1.5K"'), ["params.sha256.size", "fractions"]),
    (GOOD.replace('"1024..4096"', "1.5"), ["params.sha256.size", "float"]),
    (GOOD.replace('"1024..4096"', "true"), ["params.sha256.size", "bool"]),
    (GOOD.replace('"1024..4096"', '["1K", "1024"]'), ["params.sha256.size", "1024 is listed twice"]),
    (GOOD.replace('"1024..4096"', '"4096T"'), ["sha256 size=4503599627370496", "memory"]),
    (GOOD.replace('["sha256"]', '["sha256-file"]').replace("params.sha256]", "params.sha256-file]")
         .replace('"1024..4096"', '"4096T"'), ["sha256-file size=4503599627370496", "free"]),
    (GOOD.replace('"unrolled"]', '"unrolled", "O2"]'), ["variants", "'O2' is listed twice"]),
    (GOOD.replace('["sha256"]', '["sha256", "sha256"]'), ["workloads", "'sha256' is listed twice"]),
    (GOOD + GOOD[GOOD.index("[[experiment]]"):], ["experiment names", "'x' is listed twice"]),
    (GOOD.replace("[variants.unrolled]", "[variants.O2]").replace('"unrolled"]', '"O3"]'),
     ["variants.O2", "built-in"]),
    (GOOD.replace('cflags = ["-O2", "-funroll-loops"]', "cflags = [2]"), ["cflags", "list of strings"]),
])
def test_bad_plans_name_the_problem(tmp_path, text, words):
    with pytest.raises(plans.PlanError) as e:
        plans.load(write(tmp_path, text))
    msg = str(e.value)
    assert "\n" not in msg and str(tmp_path) in msg
    for w in words:
        assert w in msg


def test_missing_plan_file():
    with pytest.raises(plans.PlanError, match="no such plan"):
        plans.load("/nonexistent/plan.toml")


@pytest.mark.parametrize("value, canonical", [
    ('"16K"', ["16384"]), ("4096", ["4096"]), ('["1K", "2KiB"]', ["1024", "2048"]),
    ('"1K..4K"', ["1024", "2048", "4096"]), ('"64, 1M"', ["64", "1048576"]),
])
def test_plan_params_are_stored_canonical(tmp_path, value, canonical):
    p = plans.load(write(tmp_path, GOOD.replace('"1024..4096"', value)))
    assert p.experiments[0].params == {"sha256": {"size": canonical}}


def test_param_flags():
    assert plans.parse_param_flags(["size=16..128", "n=1"]) == {"size": "16..128", "n": "1"}
    for flags, words in [(["novalue"], "key=value"), (["size=1", "size=2"], "given twice")]:
        with pytest.raises(plans.PlanError, match=words):
            plans.parse_param_flags(flags)
    p = plans.from_flags(["sha256", "memlat"], ["O2"], {"size": "16K", "pages": "thp"}, None)
    assert p.experiments[0].params == {"sha256": {"size": ["16384"]}, "memlat": {"size": ["16384"], "pages": ["thp"]}}
    with pytest.raises(plans.PlanError, match="--param pages: 'tlb' is not one of 4k, thp, huge"):
        plans.from_flags(["memlat"], ["O2"], {"pages": "tlb"}, None)


def test_built_in_plans_can_reach_a_verdict():
    """At each plan's first look, complete separation must be able to be significant after
    Holm over the experiment's comparisons, at the first look's level: by round, by the
    t-test (from stats.MEAN_ROUNDS rounds) where the signed rank cannot; the command-line default too."""
    from cpulab import stats
    for plan in [plans.load(f.stem) for f in plans.PLAN_DIR.glob("*.toml")] + [plans.from_flags([], [], {}, None)]:
        policy = plan.record().policy
        for e in plan.experiments:
            comparisons = plan.comparisons_of(e)
            if comparisons:
                n = plan.processes_of(e.name)
                # unpaired: Mann-Whitney's floor; by round (turns, paired): the signed-rank floor 2 / 2^n
                one = stats.p_floor(n, n) if policy.method == "unpaired" else 2 * 0.5 ** n
                by_mean = policy.method != "unpaired" and n >= stats.MEAN_ROUNDS
                assert by_mean or one * comparisons < policy.level(n, n), (plan.name, e.name, n, one * comparisons)


def test_old_keys_read_as_the_new_words(tmp_path):
    """`runs` (now `processes`) and `profile` (now `grid`) in plans written before; both at once is refused."""
    f = tmp_path / "old.toml"
    f.write_text(GOOD.replace("runs = 3", "runs = 4\nprofile = \"full\""))
    p = plans.load(str(f))
    assert p.settings.processes == 4 and p.settings.grid == "full"
    f.write_text(GOOD.replace("runs = 3", "runs = 4\nprocesses = 5"))
    with pytest.raises(plans.PlanError, match="'runs' is the old name of 'processes'"):
        plans.load(str(f))


def test_origin_is_the_commit_of_the_first_directory_git_knows(tmp_path):
    import shutil
    import subprocess

    from cpulab.plan.origin import origin_of
    if not shutil.which("git"):
        pytest.skip("install git")
    repo, plain = tmp_path / "repo", tmp_path / "plain"
    repo.mkdir(), plain.mkdir()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(repo)]
    subprocess.run([*git, "init", "-q"], check=True)
    (repo / "f").write_text("1")
    subprocess.run([*git, "add", "f"], check=True)
    subprocess.run([*git, "commit", "-qm", "one"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    o = origin_of([plain, repo])
    assert o["commit"] == head and o["dirty"] is False and o["dir"] == str(repo)
    (repo / "f").write_text("2")
    assert origin_of([repo])["dirty"] is True
    assert origin_of([plain]) == {}


def test_cpulabs_own_checkout_is_one_that_tracks_its_code_not_any_work_tree_around_it(tmp_path):
    """An installed cpulab inside another work tree (pyenv's site-packages) has no origin;
    a checkout of cpulab is its own."""
    import shutil
    import subprocess

    from cpulab.plan.origin import own_checkout
    if not shutil.which("git"):
        pytest.skip("install git")
    here = tmp_path / "src" / "cpulab" / "plan" / "origin.py"
    here.parent.mkdir(parents=True)
    here.write_text("# origin\n")
    subprocess.run(["git", "-C", str(tmp_path), "init", "-q"], check=True)
    assert own_checkout(here) == []  # inside a work tree that does not track it
    subprocess.run(["git", "-C", str(tmp_path), "add", str(here)], check=True)
    assert own_checkout(here) == [tmp_path]


def test_the_instruction_metric_counts_every_experiment_and_names_a_bad_one(tmp_path):
    p = plans.load(write(tmp_path, 'metric = "instructions"\n' + GOOD))
    assert p.settings.metric == "instructions" and p.counts_instructions("x")
    assert p.record().policy.metric == "instructions"
    assert not plans.load(write(tmp_path, GOOD)).counts_instructions("x")
    with pytest.raises(plans.PlanError, match="metric: expected one of time, instructions, memory, got 'cycles'"):
        plans.load(write(tmp_path, 'metric = "cycles"\n' + GOOD))


@pytest.mark.parametrize("budget, method, family, rounds", [
    (60.0, "turns", 1, 5),     # by round: FIRST_ROUNDS, where the t-test decides what the signed rank cannot
    (60.0, "turns", 81, 5),    # float-abi: 27 points x 3 comparisons, the same
    (0.0, "paired", 1, 5),
    (60.0, "unpaired", 1, 5),  # twice Mann-Whitney's floor at the first look's 0.025: 4/C(10,5) < 0.025
    (60.0, "unpaired", 10, 7),  # 4/C(14,7) < 0.0025; 4/C(12,6) is not
    (0.0, "unpaired", 1, 5),   # one look at 0.05: 4/C(10,5) < 0.05; 4/C(8,4) is not
])
def test_the_first_look_is_the_fewest_rounds_that_can_decide(budget, method, family, rounds):
    assert DecisionPolicy.of_settings(budget, 0.01, method).first_look(family) == rounds


def test_a_plan_without_processes_sizes_each_experiment_by_its_family(tmp_path):
    p = plans.load(write(tmp_path, GOOD.replace("runs = 3", "")))
    e = p.experiments[0]
    assert p.settings.processes is None and p.comparisons_of(e) == 3  # 1 variant x 3 sizes
    assert p.processes_of("x") == p.settings.policy.first_look(3) == policy.FIRST_ROUNDS
    assert plans.load(write(tmp_path, GOOD)).processes_of("x") == 3  # given: as given


def test_an_experiment_spends_its_own_budget_in_budget_mode(tmp_path):
    """An experiment's budget stands in for the plan's; a plan without one (0: a fixed
    count, as --budget 0 asks) holds every experiment to its first look."""
    text = GOOD.replace("runs = 3", "runs = 3\nbudget = 30") + GOOD[GOOD.index("[[experiment]]"):].replace(
        '"x"', '"y"').replace('baseline = "O2"', 'baseline = "O2"\nbudget = 4.5')
    p = plans.load(write(tmp_path, text))
    assert p.schedule().budget == {"x": 30.0, "y": 4.5}
    assert p.given(budget=0.0).schedule().budget == {"x": 0.0, "y": 0.0}
    stored = plans.from_stored(p.record(seed=1), "run 1")  # resumed alike
    assert stored.schedule().budget == p.schedule().budget


def test_settings_from_the_command_line_make_a_new_plan_and_leave_the_old_one():
    """`run --processes 5 --samples 7 --baseline O3`: the plan's settings and every
    experiment's own counts and baseline give way; the plan read from the file is not
    changed (it was, in place)."""
    from cpulab.plan.overrides import Overrides
    p = plans.load("seeds")
    before = p.as_dict()
    q = Overrides(processes=5, samples=7, baseline="O3").apply(p)
    assert p.as_dict() == before
    assert (q.settings.processes, q.settings.samples, q.settings.budget) == (5, 7, 0.0)
    assert all(e.processes is None and e.samples is None and e.baseline == "O3" for e in q.experiments)


def _other_value(name: str):
    """A valid value of a run setting other than its default, from its declaration."""
    import typing
    from cpulab.plan.model import bounds
    from cpulab.spec.settings import Settings
    f = Settings.model_fields[name]
    if typing.get_origin(f.annotation) is typing.Literal:
        return next(v for v in typing.get_args(f.annotation) if v != f.default)
    if f.default is False:
        return True
    if f.default == []:
        return ["page-faults", "task-clock"]
    lo, hi, _ = bounds(f)
    return lo + 1 if isinstance(lo, int) and not isinstance(f.default, float) else (lo + hi) / 2


def test_a_setting_declared_once_is_a_plan_key_a_flag_and_stored(tmp_path):
    """Each field of spec/settings.py, and nothing else, is read from a plan, kept in the run's
    record, read back for --resume, and (where it names flags) a flag of `cpulab run`."""
    from cpulab.cli.run import run
    from cpulab.spec.record import RunRecord
    from cpulab.spec.settings import Settings, declared
    flags = {p.name: p.opts + p.secondary_opts for p in run.params}
    for name in Settings.model_fields:
        value, d = _other_value(name), declared(name)
        assert set(d["flags"]) == set(flags.get(name, ())), name
        toml = str(value).lower() if isinstance(value, bool) else json.dumps(value) if isinstance(value, list) \
            else repr(value)
        text = f"{name} = {toml}\n" + GOOD.replace(
            "runs = 3", "" if name == "processes" else "runs = 3")
        if not d["plan"]:
            with pytest.raises(plans.PlanError, match=f"{name}: not a plan key; give it on the command line"):
                plans.load(write(tmp_path, text))
            continue
        p = plans.load(write(tmp_path, text))
        assert getattr(p.settings, name) == value, name
        stored = RunRecord.of_stored(p.record().stored)
        assert stored.stored[name] == value and getattr(plans.from_stored(stored, "run").settings, name) == value


def test_the_docs_table_of_plan_keys_is_made_from_the_declarations():
    from pathlib import Path
    from cpulab.plan.model import keys_table
    doc = (Path(__file__).resolve().parents[1] / "docs" / "plan.md").read_text()
    assert keys_table() in doc, "docs/plan.md: paste `cpulab schema --keys` between its markers"


def test_plan_files_meet_the_schema_editors_read():
    import tomllib
    from pathlib import Path
    import jsonschema
    from cpulab.plan.model import schema
    s = schema()
    examples = Path(__file__).resolve().parents[1] / "examples"
    files = [*plans.PLAN_DIR.glob("*.toml"), *examples.rglob("*.toml")]
    assert len(files) >= 4
    for f in files:
        jsonschema.validate(tomllib.loads(f.read_text()), s)
    jsonschema.validate({"variants": {"v": {"cflags": "-O3"}}, "experiment": [{"variants": "O2"}]}, s)  # one string
    for bad in ({"colour": 3}, {"processes": 0}, {"processes": 2.5}, {"grid": "huge"}, {"against": 1},
                {"experiment": [{"share_machine": "yes"}]}, {"kernel": {"k": {"unit": "bytes"}}}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, s)
