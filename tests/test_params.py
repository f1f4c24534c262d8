"""Parameter values: each accepted form has one canonical text, each bad form is refused
naming the key, and no input, however odd, is misread or crashes the command line."""
import contextlib
import io
import json
import sys

import pytest
from hypothesis import event, given, settings, strategies as st

from cpulab.cli import main as cli
from cpulab.plan import plan as plans
from cpulab.plan import toolchain
from cpulab import workloads
from cpulab.params import INT64_MAX, Param, ParamError

SIZE = Param("1", "size", min=0)
COUNT = Param("1", min=1, max=1000)
CHOICE = Param("a", "choice", choices=("a", "b"))
TEXT = Param("", "text")
UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}


@pytest.mark.parametrize("param, value, canonical", [
    (SIZE, "4096", "4096"), (SIZE, "16K", "16384"), (SIZE, "16KiB", "16384"), (SIZE, "16k", "16384"),
    (SIZE, "1M", "1048576"), (SIZE, "2G", "2147483648"), (SIZE, "1T", "1099511627776"), (SIZE, " 64K ", "65536"),
    (SIZE, "0", "0"), (SIZE, 4096, "4096"), (COUNT, "1000", "1000"), (COUNT, 7, "7"),
    (CHOICE, "b", "b"), (TEXT, "/tmp/a,b.bin", "/tmp/a,b.bin"),
])
def test_good_forms_are_canonical(param, value, canonical):
    assert param.parse(value) == canonical
    assert param.parse(canonical) == canonical  # canonical text reads as itself


@pytest.mark.parametrize("param, value, words", [
    (SIZE, "1e6", "not a size"), (SIZE, "010", "no leading zeros"), (SIZE, "1.5K", "fractions"),
    (SIZE, "0x10", "not a size"), (SIZE, "16 K", "not a size"), (SIZE, "16KB", "not a size"),
    (SIZE, "16iB", "not a size"), (SIZE, "-1", "not a size"), (SIZE, "", "not a size"), (SIZE, "1_000", "not a size"),
    (SIZE, "١٢", "not a size"), (SIZE, "8388608T", "out of range"),
    (COUNT, "1e3", "not a decimal integer"), (COUNT, "010", "no leading zeros"), (COUNT, "+5", "not a decimal"),
    (COUNT, "0", "out of range 1..1000"), (COUNT, "1001", "out of range"), (COUNT, "1K", "not a decimal"),
    (COUNT, True, "bool"), (COUNT, 1.0, "float"), (SIZE, 1.5, "float"), (SIZE, None, "NoneType"),
    (CHOICE, "c", "not one of a, b"), (CHOICE, True, "bool"),
])
def test_bad_forms_are_refused(param, value, words):
    with pytest.raises(ParamError, match=words):
        param.parse(value)


def test_sweeps():
    assert SIZE.values("1K..4K") == ["1024", "2048", "4096"]
    assert SIZE.values("16..100") == ["16", "32", "64"]  # powers of two from the low end, up to high
    assert SIZE.values("1K, 64K") == ["1024", "65536"]
    assert SIZE.values(["1K", 2048]) == ["1024", "2048"]
    assert SIZE.values(4096) == ["4096"]
    assert TEXT.values("a,b") == ["a,b"]  # a path may hold commas: never split
    for spec, words in [("1K,1024", "listed twice"), ("1K,,2K", "empty value"), ("4K..1K", "low <= high"),
                        ("0..4", "low <= high"), ("1..x", "not a size"), ([], "no values")]:
        with pytest.raises(ParamError, match=words):
            SIZE.values(spec)
    with pytest.raises(ParamError, match="only numbers and sizes"):
        CHOICE.values("a..b")


def test_every_declared_default_and_grid_value_is_canonical():
    for w in workloads.registry().values():
        for grid in (w.quick, w.full):
            for product in (grid if isinstance(grid, list) else [grid]):
                for key, values in product.items():
                    assert w.params[key].values(values) == values, (w.name, key)


def test_a_workload_param_must_be_declared():
    with pytest.raises(TypeError, match="Param"):
        workloads.Workload("w", "w.c", "bytes", "", params={"size": "16"})
    with pytest.raises(ValueError, match="not canonical"):
        Param("16K", "size")


def _oracle_size(text: str) -> int | None:
    """The documented grammar, written a second way: digits without leading zeros, then
    nothing, K, M, G or T, optionally followed by iB (any case)."""
    t = text.strip()
    for suffix in ("KiB", "MiB", "GiB", "TiB", "K", "M", "G", "T", ""):
        if t.upper().endswith(suffix.upper()):
            digits = t[:len(t) - len(suffix)]
            if digits.isascii() and digits.isdigit() and (digits == "0" or digits[0] != "0"):
                return int(digits) * UNITS[suffix[:1].upper()]
    return None


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2**40), st.sampled_from(["", "K", "M", "G", "T", "KiB", "MiB", "GiB", "TiB", "k", "mib"]))
def test_size_with_a_suffix_is_exactly_that_many_bytes(n, suffix):
    expected = n * UNITS[suffix[:1].upper()]
    if expected <= INT64_MAX:
        assert SIZE.parse(f"{n}{suffix}") == str(expected)
    else:
        with pytest.raises(ParamError, match="out of range"):
            SIZE.parse(f"{n}{suffix}")


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=12), st.text(alphabet="0123456789KMGTiBkmgtxe.-+_ ", max_size=10)))
def test_any_text_is_read_as_the_grammar_says_or_refused(text):
    want = _oracle_size(text)
    if want is None or want > INT64_MAX:
        with pytest.raises(ParamError):
            SIZE.parse(text)
    else:
        assert SIZE.parse(text) == str(want)


# ---- whole plans and the command line ------------------------------------------------

PARAM_VALUES = st.one_of(
    st.integers(-2, 2**45).map(str), st.integers(-2, 2**45),
    st.builds(lambda n, u: f"{n}{u}", st.integers(0, 5000), st.sampled_from(list(UNITS) + ["KiB", "x", "e3", ".5K"])),
    st.sampled_from(["1e6", "010", "0x10", "1K..64K", "16..1024", "4..2", "a,b", "", "float", "double", "table",
                     "simd", "warm", "cold", "4k", "thp", "random", "read", "l2", "4096T", "1,1", "-1"]),
    st.booleans(), st.floats(allow_nan=True), st.lists(st.sampled_from(["1K", "64", 7, "float", True]), max_size=3),
)
WORKLOAD_NAMES = st.sampled_from(sorted(workloads.registry()) + ["nope"])
VARIANT_NAMES = st.sampled_from(["O0", "O2", "O3", "mine", "O9"])
PARAM_KEYS = st.sampled_from(sorted({k for w in workloads.registry().values() for k in w.params}) + ["colour"])
SETTINGS = {"runs": st.one_of(st.integers(-1, 20000), st.booleans(), st.just("5")),
            "samples": st.one_of(st.integers(-1, 20000), st.floats()),
            "min_sample_time": st.one_of(st.floats(), st.integers(-1, 100)),
            "warmup": st.one_of(st.floats(), st.integers(-5, 100)),
            "timeout": st.one_of(st.floats(), st.integers(-1, 10**6)),
            "profile": st.sampled_from(["quick", "full", "slow"]), "timer": st.sampled_from(["auto", "tsc", "x"]),
            "measure_identical": st.one_of(st.booleans(), st.integers(0, 1)), "name": st.one_of(st.text(max_size=5), st.integers())}


def experiment_tables():
    return st.fixed_dictionaries(
        {"workloads": st.lists(WORKLOAD_NAMES, min_size=1, max_size=2),
         "variants": st.lists(VARIANT_NAMES, min_size=1, max_size=3)},
        optional={"name": st.sampled_from(["a", "b"]), "baseline": VARIANT_NAMES,
                  "runs": st.one_of(st.integers(-1, 20000), st.booleans()),
                  "params": st.dictionaries(WORKLOAD_NAMES, st.dictionaries(PARAM_KEYS, PARAM_VALUES, max_size=2),
                                            max_size=2),
                  "colour": st.just(1)})


PLANS = st.fixed_dictionaries(
    {"experiment": st.lists(experiment_tables(), min_size=1, max_size=2)},
    optional={**SETTINGS, "variants": st.dictionaries(VARIANT_NAMES, st.fixed_dictionaries(
        {}, optional={"cflags": st.one_of(st.lists(st.sampled_from(["-O2", "-O1"])), st.integers())}), max_size=1)})


def assert_canonical(params: dict) -> None:
    """Every parameter value of an experiment is the canonical text of itself."""
    for w, values_of in params.items():
        for key, values in values_of.items():
            assert values == [workloads.get(w).params[key].parse(v) for v in values]


@settings(max_examples=200, deadline=None)
@given(PLANS)
def test_any_plan_is_valid_or_one_line_naming_the_file(d):
    try:
        p = plans.from_dict(d, "p.toml")
    except plans.PlanError as e:
        msg = str(e)
        assert msg.startswith("p.toml: ") and "\n" not in msg
        event("refused")
        return
    event("valid")
    for e in p.experiments:
        assert_canonical(e.params)
    assert 0 <= p.settings.warmup <= 60 and isinstance(p.settings.measure_identical, bool)
    for e in p.experiments:  # given, or the first look the experiment's family needs
        assert 1 <= p.processes_of(e.name) <= 10000
    for e in p.experiments:
        assert len(set(e.variants)) == len(e.variants) and len(set(e.workloads)) == len(e.workloads)
    assert len({e.name for e in p.experiments}) == len(p.experiments)
    assert not set(p.custom_variants) & set(toolchain.BUILTIN)


def run_cli(args: list[str]) -> tuple[int, str, str]:
    """cpulab's real entry point (cli.main), in this process: exit status, stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()
    old_argv, sys.argv = sys.argv, ["cpulab", *args]
    code = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            cli.main()
    except SystemExit as e:
        code = e.code
    finally:
        sys.argv = old_argv
    return code, out.getvalue(), err.getvalue()


def flag_lists():
    def param_flag(key, value):
        return ["-p", f"{key}={value}" if not isinstance(value, list) else f"{key}={','.join(map(str, value))}"]
    return st.lists(st.one_of(
        st.tuples(st.just("-w"), WORKLOAD_NAMES).map(list),
        st.tuples(st.just("-v"), VARIANT_NAMES).map(list),
        st.builds(param_flag, PARAM_KEYS, PARAM_VALUES),
        st.tuples(st.sampled_from(["--runs", "--samples", "--min-sample-time"]),
                  st.one_of(st.integers(-1, 20000).map(str), st.sampled_from(["nan", "1e3", "0.5", "x", ""]))).map(list),
        st.tuples(st.sampled_from(["--profile", "--timer", "--baseline"]),
                  st.sampled_from(["quick", "full", "tsc", "O2", "O0", "nope"])).map(list),
        st.sampled_from([["-p", "novalue"], ["-p", "=5"], ["--frob"], ["core"]]),
    ), max_size=5).map(lambda groups: [a for g in groups for a in g])


@settings(max_examples=120, deadline=None)
@given(flag_lists())
def test_any_command_line_is_a_plan_or_one_error_line(tmp_path_factory, args):
    db = tmp_path_factory.getbasetemp() / "never-written.sqlite"
    code, out, err = run_cli(["run", "--dry-run", "--json", "--db", str(db), *args])
    event(f"exit {code}")
    if code == 0:
        for e in json.loads(out)["experiments"]:
            assert_canonical(e["params"])
    else:
        lines = err.splitlines()
        assert code == 2 and len(lines) == 1 and lines[0].startswith("cpulab: error: "), (code, err)
    assert not db.exists()


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 2**20), st.sampled_from(["", "K", "KiB", "M", "MiB"]))
def test_a_size_flag_reaches_the_plan_as_the_intended_integer(n, suffix):
    code, out, err = run_cli(["run", "--dry-run", "--json", "-w", "sha256", "-v", "O2", "-p", f"size={n}{suffix}"])
    want = n * UNITS[suffix[:1]]
    if want > 2**32:  # over MemAvailable on some machines: refused, never misread
        assert code == 0 or "memory" in err
        return
    assert code == 0, err
    assert json.loads(out)["experiments"][0]["params"] == {"sha256": {"size": [str(want)]}}
