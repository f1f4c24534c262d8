"""Pure logic on fixture documents, nothing built or run: the model's JSON round trip,
comparisons, the memlat sweep analysis, and the table views with their four drawers."""
import csv
import dataclasses
import io
import json
import math
import re
from pathlib import Path

import pytest

from cpulab import workloads
from cpulab.cli.kinds import KINDS, VIEWS
from cpulab.measure import probes
from cpulab.analysis.summary import compare_results, geomeans
from cpulab.analysis.memory import memlat_curves
from cpulab.model import Comparison, Result, Status, Summary, Verdict
from cpulab.spec.record import RunRecord, upgraded
from cpulab.spec.policy import DecisionPolicy
from cpulab.report import exports
from cpulab.report import html
from cpulab.report.tables import Cell, to_markdown, to_rich
from cpulab.report.analysis_views import analysis_tables, memlat_tables
from cpulab.report.views import comparison_list, fmt_params, result_list, workload_tables

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "summary.json"


@pytest.fixture
def doc() -> dict:
    return json.loads(FIXTURE.read_text())


@pytest.fixture
def summary(doc) -> Summary:
    return Summary.from_dict(doc)


def test_json_document_round_trips(doc, summary):
    # a document of an earlier version reads with what its record did not yet say
    # (record.upgraded), its policy without pairs (a run stored before them), its
    # comparisons without a cause (why), and no named counters (--events)
    uncounted = {"events_per_unit": {}, "events_per_unit_ci": {}, "topdown": None, "events_unavailable": {}}
    assert json.loads(json.dumps(summary.to_dict(), default=str)) == {
        **doc, "plan": upgraded(doc["plan"]), "policy": {**{k: v for k, v in doc["policy"].items() if k != "looks"},
                                                         "budgeted": doc["policy"]["looks"] > 1, "pairs": False},
        "results": [{**r, **uncounted} for r in doc["results"]],
        "comparisons": [{**c, "why": None, "events": {}} for c in doc["comparisons"]]}
    assert upgraded(doc["plan"])["kind"] == "plan" and "method" in upgraded(doc["plan"])
    assert summary.policy == RunRecord.of_stored(doc["plan"]).policy  # the run's, from its stored record


def test_every_kind_of_run_record_reads_as_one_type():
    """A run's record is a plan's, `cpulab time`'s or an imported tool's; all three give the
    experiments, their baselines and the policy the record asks, and stay whole for --json."""
    from cpulab.measure.schedule.process_rounds import Rounds
    from cpulab.measure.schedule.timed_commands import TIME_DEFAULTS, time_record
    from cpulab.plan import plan as plans
    from cpulab.store.foreign import plan_of as imported_plan
    kinds = {"plan": (plans.load("core").record().stored, "turns"),
             "time": (time_record(["true", "false"], ["t", "f"], {}, Rounds(), False, 0,
                                      TIME_DEFAULTS.given(processes=5, budget=0.0)).stored, "paired"),
             "imported": (imported_plan("hyperfine", "1", "mean", [{"workload": "w", "variant": v, "processes": [1.0]}
                                                                  for v in ("x", "y")]), "unpaired")}
    kinds["imported"] = (RunRecord.make("imported", kinds["imported"][0]).stored, "unpaired")
    for kind, (stored, method) in kinds.items():
        record = RunRecord.of_stored(stored)
        assert record.kind == kind and record.experiments and record.stored == stored, kind
        for e, raw in zip(record.experiments, stored["experiments"]):
            assert (e.name, e.workloads, e.baseline) == (raw["name"], raw["workloads"], raw["baseline"]), kind
            assert e.baseline in raw["variants"] or e.baseline in stored.get("variants", []), kind
        assert record.policy.method == method, kind
        assert record.compared_by("unpaired").method == "unpaired", kind
    assert RunRecord.of_stored(kinds["time"][0]).commands == {"t": "true", "f": "false"}
    # `cpulab time` compares its commands as given: no effect floor, however compared
    time = RunRecord.of_stored(kinds["time"][0])
    assert time.policy.min_effect == time.compared_by("unpaired").min_effect == 0.0
    assert RunRecord.of_stored(kinds["plan"][0]).policy.min_effect > 0


def test_a_stopped_run_is_said_resumable_only_where_it_is(summary):
    """A plan's stopped run points at --resume; a stopped `cpulab time` has no plan to
    resume (run --resume refuses it), so its note does not."""
    import dataclasses
    from cpulab.measure.schedule.process_rounds import Rounds
    from cpulab.measure.schedule.timed_commands import TIME_DEFAULTS, time_record
    from cpulab.report.terminal import run_status_note
    stopped = dataclasses.replace(summary, status="interrupted")
    assert stopped.plan.kind == "plan" and "--resume" in run_status_note(stopped)
    timed = dataclasses.replace(stopped, plan=time_record(["true", "false"], ["t", "f"], {}, Rounds(), False, 0,
                                                          TIME_DEFAULTS.given(processes=5, budget=0.0)))
    note = run_status_note(timed)
    assert "stopped before its end (interrupted)" in note and "--resume" not in note


def test_a_field_the_model_does_not_declare_is_an_error(doc):
    doc["results"][0]["speed"] = 1.0
    with pytest.raises(TypeError, match="speed"):
        Summary.from_dict(doc)


def _result(variant, obs, status=Status.OK, same_as=None, size="64"):
    return Result(id=0, experiment="e", workload="sha256", variant=variant, params={"size": size}, unit="bytes",
                  rate_unit="MB/s", per_clock_unit="cycles/byte", status=status, same_as=same_as,
                  median=sorted(obs)[len(obs) // 2] if obs else None, observations=dict(enumerate(obs)))


def test_comparisons_verdicts():
    base = [100.0 + i * 0.1 for i in range(10)]
    results = [_result("O2", base), _result("fast", [2 * x for x in base]), _result("twin", [], Status.IDENTICAL, "O2"),
               _result("broken", [], Status.CRASH), _result("O2", [], Status.CRASH, size="128"),
               _result("fast", [1.0] * 10, size="128")]
    comps = {(c.variant, c.params["size"]): c for c in compare_results(results, {"e": "O2"}, DecisionPolicy(method="unpaired"))}
    assert comps[("fast", "64")].verdict == Verdict.FASTER and comps[("fast", "64")].ratio == pytest.approx(2, rel=0.01)
    assert comps[("twin", "64")].verdict == Verdict.IDENTICAL_CODE and comps[("twin", "64")].ratio == 1.0
    assert comps[("broken", "64")].verdict == Status.CRASH
    assert comps[("fast", "128")].verdict == Verdict.NO_BASELINE
    g = geomeans(list(comps.values()))
    assert [(x.variant, x.points) for x in g if x.variant == "fast"] == [("fast", 1)]


def test_memlat_curve_levels_from_results():
    """A synthetic staircase: 1.5 ns up to 32 KiB, 5 ns up to 1 MiB, 80 ns beyond."""
    caches = [{"level": 1, "type": "Data", "size_bytes": 32768, "name": "L1d 32 KiB"},
              {"level": 2, "type": "Unified", "size_bytes": 1 << 20, "name": "L2 1 MiB"}]
    results = []
    for k in range(10, 27):
        size = 1 << k
        ns = 1.5 if size <= 32768 else 5.0 if size <= 1 << 20 else 80.0
        r = _result("O2", [1.0], size=str(size))
        r.workload, r.params, r.ns_per_unit, r.cycles_per_unit = "memlat", {"size": str(size), "pages": "4k"}, ns, 3 * ns
        results.append(r)
    curves = memlat_curves(results, caches)
    assert len(curves) == 1 and curves[0]["series"] == "pages=4k"
    assert [lv["matches"] for lv in curves[0]["levels"]] == ["L1d 32 KiB", "L2 1 MiB", "memory"]
    levels, points = memlat_tables(curves)
    assert len(levels.rows) == 3 and len(points.rows) == len(results)


def test_workload_table_rows_and_verdicts(summary):
    tables = workload_tables(summary)
    assert list(tables) == [("cli", "sha256")]
    t = tables[("cli", "sha256")]
    assert len(t.rows) == len(summary.results)
    names = [c.name for c in t.columns]
    verdicts = [row[names.index("verdict")] for row in t.rows]
    assert {str(v) for v in verdicts if v.value == "baseline"} == {"baseline"}
    assert all(v.tag for v in verdicts)
    share = [row[names.index("% of max")].value for row in t.rows if row[names.index("% of max")].value]
    assert max(share) == 1.0 and all(0 < x <= 1 for x in share)
    base = summary.comparisons[0].baseline
    assert f"vs {base}" in names
    # a baseline as long as a command line is named in the title, not in a column's header
    long = "sh -c 'i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done'"
    named = dataclasses.replace(summary, comparisons=[dataclasses.replace(c, baseline=long)
                                                      for c in summary.comparisons])
    t = workload_tables(named)[("cli", "sha256")]
    assert "vs baseline" in [c.name for c in t.columns] and f"delta vs {long}" in t.title


def test_the_legend_says_what_the_rounds_varied_and_what_an_observation_is(summary):
    """Placements are named only where results ran them; a command's observation is a
    whole run, a kernel's the fastest of a process's first samples."""
    import dataclasses
    from cpulab.report.views import legend, observation_line
    placed = dataclasses.replace(summary, results=[dataclasses.replace(r, placements=5) for r in summary.results])
    unplaced = dataclasses.replace(summary, results=[dataclasses.replace(r, placements=0) for r in summary.results])
    mixed = dataclasses.replace(summary, results=placed.results[:1] + unplaced.results[1:])
    assert "placement of its own of each build (" in legend(placed) and "relinked" not in legend(placed)
    assert "each build cpulab relinks" in legend(mixed)
    assert "nothing is relinked" in legend(unplaced) and "placement of its own" not in legend(unplaced)
    assert "first 3 samples" in observation_line(summary) and "whole run" not in observation_line(summary)
    commands = dataclasses.replace(summary, results=[dataclasses.replace(r, unit="runs") for r in summary.results])
    assert "whole run" in observation_line(commands) and "samples" not in observation_line(commands)
    turns = dataclasses.replace(summary.policy, method="turns")  # a plan's: commands and programs run back to back
    assert "samples in turns" in legend(dataclasses.replace(summary, policy=turns))
    commands = dataclasses.replace(commands, policy=turns)
    assert "samples in turns" not in legend(commands) and "per-round ratios" in legend(commands)
    # carry-over is read from turns (a sample after another member's): none without them
    assert "carry-over" not in legend(commands) and "carry-over" in legend(dataclasses.replace(
        summary, policy=dataclasses.replace(turns, pairs=False)))
    from cpulab.store.foreign import plan_of as imported_plan
    imported = dataclasses.replace(commands, plan=RunRecord.make("imported", imported_plan(
        "hyperfine", "1", "mean", [{"workload": "w", "variant": v, "processes": [1.0]} for v in ("x", "y")])))
    assert "relinked" not in legend(imported) and "placement" not in legend(imported)  # another tool ran it
    both = dataclasses.replace(summary, results=commands.results[:1] + summary.results[1:])
    assert "whole run" in observation_line(both) and "first 3 samples" in observation_line(both)
    both = dataclasses.replace(both, policy=turns)  # kernels in turns, a program's runs back to back
    assert "samples in turns" in legend(both) and "programs and commands: one whole run each a round" in legend(both)
    assert "programs and commands" not in legend(dataclasses.replace(summary, policy=turns))


def test_why_a_build_kept_one_layout_is_said_once_under_its_table(summary):
    import dataclasses
    why = "one layout: compiled and linked in one step (no objects kept to relink)"
    rows = [dataclasses.replace(r, notes={**r.notes, "one_layout": why}, placement_band=None)
            for r in summary.results]
    t = workload_tables(dataclasses.replace(summary, results=rows))[("cli", "sha256")]
    variants = list(dict.fromkeys(r.label for r in rows))
    assert [n for n in t.notes if why in n] == [f"{', '.join(variants)}: {why}"]
    assert {str(row[[c.name for c in t.columns].index("placements")]) for row in t.rows} == {"one layout"}


def test_counted_instructions_show_beside_the_time_and_why_one_has_none(summary):
    import dataclasses
    results = [dataclasses.replace(r, instructions_per_unit=40.0 + i, instructions_source="valgrind")
               for i, r in enumerate(summary.results)]
    results[0] = dataclasses.replace(results[0], instructions_per_unit=None, instructions_why="valgrind is missing")
    t = workload_tables(dataclasses.replace(summary, results=results))[("cli", "sha256")]
    names = [c.name for c in t.columns]
    counts = [str(row[names.index("instructions/byte")]) for row in t.rows]
    assert counts[0] == "-" and counts[1:] == [str(Cell(40.0 + i)) for i in range(1, len(results))]
    assert any("no instruction count: valgrind is missing" in n for n in t.notes)
    assert "instructions/byte" not in [c.name for c in workload_tables(summary)[("cli", "sha256")].columns]


def test_hidden_parameters_are_the_workloads_to_declare():
    assert fmt_params({"size": "10", "path": "/tmp/x", "expect": "ab"}, "sha256-file") == "size=10"
    assert fmt_params({"size": "10", "path": "/tmp/x"}, "sha256") == "size=10 path=/tmp/x"


def test_csv_has_plain_values_and_a_row_per_result_and_comparison(summary):
    text = exports.render(summary, "csv")
    rows = list(csv.DictReader(io.StringIO(text)))
    assert [r["table"] for r in rows].count("result") == len(summary.results)
    assert [r["table"] for r in rows].count("comparison") == len(summary.comparisons)
    medians = [float(r["median"]) for r in rows if r["table"] == "result" and r["median"]]
    assert medians == pytest.approx([r.median for r in summary.results if r.median is not None])


def test_markdown_escapes_pipes(summary):
    t = result_list(summary)
    t.rows[0][0].value = "a|b"
    md = to_markdown(t)
    assert "a\\|b" in md
    header = md.splitlines()[2]
    assert header.count("|") == len(t.columns) + 1


def test_every_analysis_kind_has_one_renderer_and_each_draws(summary):
    for a in summary.analyses:
        for t in analysis_tables(a.kind, a.data, VIEWS):
            assert t.rows and all(len(r) == len(t.columns) for r in t.rows)
            to_rich(t)  # draws without markup errors (a probe body may hold [brackets])
    assert {"probe", "align", "memlat-levels", "bandwidth", "explain"} <= set(VIEWS)
    assert "no view" in analysis_tables("unknown-kind", {}, VIEWS)[0].title


def test_every_kind_stored_or_named_is_declared_once_with_its_maker():
    """cli/kinds.py is the one declaration: each kind the source stores (add_analysis with a
    literal kind), each a workload or probe names, is there, and a workload's has a maker."""
    src = Path(workloads.__file__).parent.parent
    stored = {m.group(1) for f in src.rglob("*.py")
              for m in re.finditer(r'add_analysis\([^,]+, "([\w-]+)"', f.read_text())}
    named = {k for w in workloads.registry().values() for k in w.analyses}
    assert stored and named and {p.kind for p in probes.registry().values()} | stored | named <= set(KINDS)
    assert all(KINDS[k].make for k in named)
    assert all(k.make or k.made for k in KINDS.values())


def test_html_shows_every_stored_analysis_escaped_without_a_store(summary):
    text = html.render(summary, VIEWS)
    for t in ("004 · Table 3", "bandwidth (STREAM byte counting)", "cycles per iteration"):
        assert t in text
    assert "<script>alert" not in text and "&lt;script&gt;" in text
    assert "<b>imul</b>" not in text
    assert text.count("<svg") >= 2  # the sweep's rate and speedup curves
    assert comparison_list(summary).rows and "gcc -O0 -c kernel.c" in text


def test_ratio_cells_keep_the_plain_ratio(summary):
    t = comparison_list(summary)
    names = [c.name for c in t.columns]
    for row, c in zip(t.rows, summary.comparisons):
        v = row[names.index("ratio")].value
        assert v == c.ratio and (v is None or math.isfinite(v))


def test_geomean_interval_combines_the_points_intervals():
    """Two points each known to +-2%: their geometric mean is known better than either
    (errors of a mean), and a point without an interval gives the mean none."""
    cs = [Comparison("e", "w", {"n": str(i)}, "b", "v", "faster", ratio=r, ci=[r / 1.02, r * 1.02])
          for i, r in enumerate([1.1, 1.2])]
    g, = geomeans(cs)
    assert g.ratio == pytest.approx((1.1 * 1.2) ** 0.5)
    assert g.ci[0] < g.ratio < g.ci[1] and g.ci[1] / g.ratio == pytest.approx(1.02 ** (2 ** 0.5 / 2))
    cs[1].ci = None
    assert geomeans(cs)[0].ci is None


def test_time_split_adds_up_by_phase_and_names_the_samples_share(summary):
    from cpulab.time_split import samples_share, totals
    from cpulab.report.views import time_split_line, time_split_table
    t = totals(summary.time_split)
    assert t["calibration"] == pytest.approx(0.5) and t["samples"] == pytest.approx(3.4)
    assert samples_share(summary.time_split) == pytest.approx(3.4 / (0.1 + 0.1 + 0.5 + 3.4 + 0.5))
    assert "samples are 74%" in time_split_line(summary)
    short = dataclasses.replace(summary, time_split={"": {"start-up": 0.02, "samples": 0.31, "report": 0.12}})
    assert "accounted for: samples 0.3 s, report 0.1 s, start-up 0.0 s;" in time_split_line(short)  # none of 0.5 s
    table = time_split_table(summary)
    assert [str(row[0]) for row in table.rows] == ["(the run)", "cli"]


def test_every_tag_a_cell_may_carry_has_a_terminal_style():
    from cpulab.report import tables
    assert set(tables.TERMINAL_STYLE) == set(tables.TAGS)
