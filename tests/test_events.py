"""Named events (--events): names resolved as perf lists them, counted around each sample
by the harness and around each process by the launcher, stored, compared and reported.
Software events open in every Linux guest, so the whole path runs here without a PMU;
the hardware path differs only in the codes, checked against the perf ABI."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import TEST_KERNELS, cpulab, run_artifact
from cpulab.analysis.gate import NO_REGRESSION, REGRESSION, UNDECIDED, gate
from cpulab.machine import events
from cpulab.model import Comparison

FAULTS = TEST_KERNELS / "faults.c"


@pytest.mark.parametrize("name, spec", [
    ("task-clock", "task-clock=1:0x1:0x0:0x0"), ("page-faults", "page-faults=1:0x2:0x0:0x0"),
    ("cs", "cs=1:0x3:0x0:0x0"), ("cycles", "cycles=0:0x0:0x0:0x0"), ("branch-misses", "branch-misses=0:0x5:0x0:0x0"),
    # PERF_TYPE_HW_CACHE: cache | op << 8 | result << 16 (perf_event_open(2))
    ("L1-dcache-load-misses", "L1-dcache-load-misses=3:0x10000:0x0:0x0"),
    ("LLC-stores", "LLC-stores=3:0x102:0x0:0x0"), ("dTLB-load-misses", "dTLB-load-misses=3:0x10003:0x0:0x0"),
    ("r01c2", "r01c2=4:0x1c2:0x0:0x0"),
])
def test_names_resolve_to_the_codes_perf_event_open_takes(name, spec):
    assert events.spec(events.resolve([name])) == spec


def fake_pmu(root: Path, name: str, type_: int, listed: dict[str, str], fmt: dict[str, str]) -> None:
    (root / name / "events").mkdir(parents=True)
    (root / name / "format").mkdir()
    (root / name / "type").write_text(f"{type_}\n")
    for k, v in listed.items():
        (root / name / "events" / k).write_text(v + "\n")
    for k, v in fmt.items():
        (root / name / "format" / k).write_text(v + "\n")


def test_a_pmus_events_are_encoded_by_its_format_files(tmp_path):
    fake_pmu(tmp_path, "cpu", 4, {"topdown-retiring": "event=0x00,umask=0x80", "mem-loads": "event=0xcd,umask=0x1,ldlat=3"},
             {"event": "config:0-7", "umask": "config:8-15", "ldlat": "config1:0-15", "split": "config:16-17,32-33"})
    assert events.resolve(["topdown-retiring"], tmp_path) == [events.Event("topdown-retiring", 4, 0x8000)]
    assert events.resolve(["cpu/mem-loads/"], tmp_path) == [events.Event("cpu/mem-loads/", 4, 0x1cd, 3)]
    # a field split over two ranges takes its low bits first
    assert events.resolve(["cpu/event=0x3c,split=0xf/"], tmp_path)[0].config == 0x3c | 0x3 << 16 | 0x3 << 32
    for bad, words in (("cpu/colour=1/", "not a field of cpu's format"), ("gpu/event=1/", "no PMU 'gpu'"),
                       ("made-up-event", "no PMU of this machine lists it"), ("a b", "names are")):
        with pytest.raises(events.EventError, match=words):
            events.resolve([bad], tmp_path)


def test_topdown_resolves_where_a_pmu_lists_it_and_says_why_not_elsewhere(tmp_path):
    with pytest.raises(events.EventError, match="topdown: not available here: no PMU lists"):
        events.resolve(["topdown"], tmp_path)
    fake_pmu(tmp_path, "cpu", 4, {n: f"event=0x00,umask={i + 1:#x}" for i, n in enumerate(events.TOPDOWN_METRICS)},
             {"event": "config:0-7", "umask": "config:8-15"})
    assert [e.name for e in events.resolve(["topdown"], tmp_path)] == list(events.TOPDOWN_METRICS)
    shares = events.level1({"slots": 400, "topdown-retiring": 100, "topdown-bad-spec": 20, "topdown-fe-bound": 80,
                            "topdown-be-bound": 200})
    assert shares == {"retiring": 0.25, "bad speculation": 0.05, "frontend bound": 0.2, "backend bound": 0.5}
    older = events.level1({"topdown-total-slots": 400, "topdown-slots-issued": 130, "topdown-slots-retired": 100,
                           "topdown-fetch-bubbles": 80, "topdown-recovery-bubbles": 10})
    assert older == pytest.approx({"retiring": 0.25, "bad speculation": 0.1, "frontend bound": 0.2,
                                   "backend bound": 0.45})
    assert events.level1({"task-clock": 1.0}) is None


def test_the_harness_counts_software_events_in_each_samples_window(build_kernel):
    """A call that touches 64 new pages takes 64 page faults, exactly, in every sample; the
    task clock of a sample is its thread's CPU time, never more than its wall time and
    what the reads around it add; an event that cannot open is named, and the samples
    are taken."""
    exe = build_kernel(str(FAULTS))
    spec = events.spec(events.resolve(["page-faults", "task-clock"])) + ",never=1:0x999"
    out = run_artifact(exe, "--param", "pages=64", "--samples", "20", "--min-sample-time", "0.002", "--timer",
                       "clock", "--events", spec)
    assert out["status"] == "ok" and len(out["events"]["page-faults"]) == 20
    assert all(f == out["work"] for f in out["events"]["page-faults"]), out["events"]["page-faults"]
    # Twice in ~15 suites beside a busy loop one sample's task clock passed the bound (which
    # one was not printed).  The counters are read just outside the clock's window; the
    # likeliest cause is a host preemption of the vCPU between the two reads, task time to
    # the guest that the clock does not see.  So two of twenty may; a wrong unit or window fails all.
    over = [(i, tc, ns) for i, (tc, ns) in enumerate(zip(out["events"]["task-clock"], out["ns"]))
            if not 0 < tc <= ns * 1.02 + 50_000]
    assert len(over) <= 2, over
    assert out["events"]["never"] == [None] * 20 and out["event_errors"]["never"].startswith("perf_event_open: ")
    bad = run_artifact(exe, "--events", "page-faults")
    assert bad["status"] == "usage" and "NAME=TYPE:CONFIG" in bad["error"]


@pytest.fixture(scope="module")
def counted_run(tmp_path_factory):
    """A kernel of one's own against a build that touches 5% more pages, counted."""
    d = tmp_path_factory.mktemp("events")
    (d / "faults.c").write_text(FAULTS.read_text())
    (d / "plan.toml").write_text('events = ["page-faults", "task-clock", "context-switches", "cycles"]\n'
                                 'processes = 10\nbudget = 0\nsamples = 6\n'
                                 '[kernel.faults]\nsource = "faults.c"\nunit = "iterations"\n'
                                 '[kernel.faults.params]\npages = { kind = "int", default = 64, min = 1 }\n'
                                 '[variants.more]\ncflags = ["-O2", "-DMORE_PERCENT=5"]\n'
                                 '[[experiment]]\nname = "faults"\nworkloads = ["faults"]\nvariants = ["O2", "more"]\n')
    db = d / "s.sqlite"
    p = cpulab("run", str(d / "plan.toml"), "--json", db=db)
    assert p.returncode == 0, p.stderr
    return d, db, json.loads(p.stdout)


def test_an_events_comparison_says_larger_with_its_ratio_from_the_same_rounds(counted_run):
    _, _, doc = counted_run
    base, more = sorted(doc["results"], key=lambda r: r["variant"] != "O2")
    assert base["events_per_unit"]["page-faults"] == 1.0
    assert more["events_per_unit"]["page-faults"] == pytest.approx(67 / 64)  # 64 + 64 * 5 // 100 pages a call
    assert "cycles" in base["events_unavailable"] or "cycles" in base["events_per_unit"]
    (c,) = doc["comparisons"]
    e = c["events"]["page-faults"]
    # page faults are exact; a process whose every sample a loaded machine disturbed has none
    assert e["verdict"] == "larger" and e["ratio"] == pytest.approx(67 / 64) and 6 <= e["rounds"] <= 10
    if c["why"]:  # the time's verdict decided (a loaded machine may leave it unclear): its why names the faults
        assert "page-faults" in c["why"]["sentence"]


def test_the_why_names_the_counters_that_moved_and_both_builds_top_down():
    from cpulab.analysis.why import _events
    from cpulab.model import Result
    def result(variant: str, topdown: dict) -> Result:
        return Result(0, "e", "w", variant, {}, "bytes", "MB/s", "cycles/byte", "ok", topdown=topdown)
    c = _event_comparison("larger", 1.06)
    c.events["page-faults"] = {"ratio": 1.0, "ci": [0.99, 1.01], "verdict": "same"}
    figures: dict = {}
    said = _events(c, result("base", {"retiring": 0.3, "backend bound": 0.7}),
                   result("head", {"retiring": 0.2, "backend bound": 0.8}), figures)
    assert said == ("6.0% more branch-misses a byte [+6.0, +6.0%], top-down retiring 30% -> 20%, "
                    "backend bound 70% -> 80%")
    assert set(figures["events"]) == {"branch-misses"} and figures["topdown"][1]["retiring"] == 0.2


def test_counted_events_are_shown_exported_and_read_back(counted_run, tmp_path):
    d, db, doc = counted_run
    shown = cpulab("compare", str(doc["run_id"]), db=db)
    assert shown.returncode == 0 and "counters per iteration" in shown.stdout and "larger" in shown.stdout
    exported = tmp_path / "run.json"
    assert cpulab("export", str(doc["run_id"]), "--format", "cpulab", "-o", str(exported), db=db).returncode == 0
    other = tmp_path / "other.sqlite"
    assert cpulab("import", str(exported), db=other).returncode == 0
    again = json.loads(cpulab("compare", "--json", db=other).stdout)
    assert again["comparisons"][0]["events"]["page-faults"] == doc["comparisons"][0]["events"]["page-faults"]


def test_the_launcher_counts_a_whole_commands_events(cli):
    p = cli("time", "--events", "page-faults,task-clock", "-r", "3", "--json", "true", "sh -c true")
    assert p.returncode == 0, p.stderr
    for r in json.loads(p.stdout)["results"]:
        assert r["events_per_unit"]["page-faults"] > 10 and r["events_per_unit"]["task-clock"] > 0
    bad = cli("time", "--events", "no-such-event", "true", "false")
    assert bad.returncode == 2 and "--events: event 'no-such-event'" in bad.stderr


def _event_comparison(verdict: str, ratio: float) -> Comparison:
    return Comparison("e", "w", {}, "base", "head", "same", 1.0,
                      events={"branch-misses": {"ratio": ratio, "ci": [ratio, ratio], "verdict": verdict}})


@pytest.mark.parametrize("verdict, ratio, status", [
    ("larger", 1.08, REGRESSION), ("larger", 1.002, NO_REGRESSION), ("smaller", 0.9, NO_REGRESSION),
    ("same", 1.0, NO_REGRESSION), ("unclear", 1.03, UNDECIDED)])
def test_ci_gates_on_a_named_event(verdict, ratio, status):
    assert gate([_event_comparison(verdict, ratio)], 0.01, True, "branch-misses").status == status
    assert gate([Comparison("e", "w", {}, "base", "head", "same", 1.0)], 0.01, True, "branch-misses").status \
        == UNDECIDED  # not counted on both sides


def test_doctor_lists_the_events_that_count_here(cli):
    doc = json.loads(cli("doctor", "--json").stdout)
    assert doc["events"]["task-clock"] == "" and doc["events"]["page-faults"] == ""
    assert set(doc["events"]) >= {"cycles", "branch-misses", "topdown"}
