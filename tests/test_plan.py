"""Plans: loading, the built-in plans, and one-line errors naming the field."""
import pytest

from cpulab import plan as plans


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
    assert p.runs == 3 and p.variant("unrolled").cflags == ("-O2", "-funroll-loops")
    assert p.experiments[0].params == {"sha256": {"size": ["1024", "2048", "4096"]}}


def test_builtin_plans_validate():
    for f in plans.PLAN_DIR.glob("*.toml"):
        assert plans.load(f.stem).experiments


@pytest.mark.parametrize("text, words", [
    ("runs = [", ["malformed TOML"]),
    ("colour = 3\n" + GOOD, ["unknown key 'colour'"]),
    (GOOD.replace('"unrolled"]', '"O9"]'), ["variants", "unknown variant 'O9'"]),
    (GOOD.replace('baseline = "O2"', 'baseline = "O3"'), ["baseline", "'O3'"]),
    (GOOD.replace("size =", "sise ="), ["params", "no parameter 'sise'"]),
    (GOOD.replace('["sha256"]', '["sha512"]'), ["unknown workload 'sha512'"]),
    (GOOD.replace("runs = 3", "runs = 0"), ["runs"]),
    (GOOD.replace("runs = 3", 'runs = "many"'), ["runs"]),
    (GOOD.replace('"1024..4096"', '"4096..1024"'), ["range"]),
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


def test_param_values():
    assert plans.parse_param_values("16..128") == ["16", "32", "64", "128"]
    assert plans.parse_param_values("a, b") == ["a", "b"]
    with pytest.raises(plans.PlanError):
        plans.parse_param_flags(["novalue"])


def test_built_in_plans_can_reach_a_verdict():
    """At each plan's first look, complete separation must be significant after Holm over
    the experiment's comparisons, at the level the plan tests at (0.05/3 in budget mode);
    the command-line default too."""
    from cpulab import stats
    for plan in [plans.load(f.stem) for f in plans.PLAN_DIR.glob("*.toml")] + [plans.from_flags([], [], {}, None)]:
        for e in plan.experiments:
            comparisons = len(e.variants) - 1
            if comparisons:
                n = plan.runs_of(e.name)
                floor = stats.p_floor(n, n) * comparisons
                assert floor < stats.look_alpha(plan.budget > 0), (plan.name, e.name, n, floor)
