"""Every kind of analysis a run stores, declared once: what makes it and how every presenter
draws it (terminal, HTML, CSV and Markdown tables; the HTML report's plots).

A kind is made in one of three places.  A workload's own kinds (those its Workload names
in `analyses`) are made here, by `make`, from its results in the analyse stage.  The others
are made where their data is found, named in `made`: by a probe while measuring, by the
measure stage's code reading, or by the analyse stage over the whole run.

It sits above analysis/ and report/, which know nothing of each other, beside the
pipeline that hands MAKERS to the analyse stage and VIEWS to the presenters.  A new kind is
one entry below (and its functions in analysis/ and report/).
"""
from __future__ import annotations

from dataclasses import dataclass

from cpulab.analysis.memory import bandwidth_rows, memlat_colour, memlat_curves, memlat_steps
from cpulab.analysis.run_analyses import Maker
from cpulab.report import analysis_views as v
from cpulab.report import plots
from cpulab.report.analysis_views import View


@dataclass(frozen=True)
class Kind:
    name: str
    view: View
    made: str = ""  # where it is made, when not by `make`
    make: Maker | None = None


KINDS: dict[str, Kind] = {k.name: k for k in [
    # A workload's own kinds, made from one experiment's results of it
    Kind("memlat-levels", View(v.memlat_tables, lambda curves, caches: [plots.memlat(curves, caches)]),
         make=lambda results, caches, _: memlat_curves(results, caches) or None),
    Kind("memlat-steps", View(v.memlat_steps_tables),
         make=lambda results, caches, s: memlat_steps(memlat_curves(results, caches), caches, s.machine)),
    Kind("memlat-colour", View(v.memlat_colour_tables, lambda doc, caches: [plots.colour(doc, caches)]),
         make=lambda results, caches, s: memlat_colour(results, s.policy)),
    Kind("bandwidth", View(v.bandwidth_tables), make=lambda results, caches, _: bandwidth_rows(results, caches)),
    # Made while measuring
    Kind("probe", View(v.probe_tables), made="measure/probes: cpulab probe, seed 004's table 2"),
    Kind("align", View(v.align_tables), made="measure/probes/align.py: seed 004's table 3"),
    Kind("roofline-roofs", View(v.roofs_tables), made="measure/probes/roofline.py"),
    Kind("program-build", View(v.program_build_tables), made="measure/schedule/programs.py"),
    Kind("explain", View(v.explain_tables), made="measure/explain (its sentence: analysis/why.py)"),
    Kind("code", View(None), made="measure/explain/largest.py; drawn in each comparison's why"),
    Kind("machine-lost", View(None), made="measure/cluster; drawn in the machines' report"),
    # Made by the analyse stage over the whole run
    Kind("findings", View(None), made="analysis/findings.py; drawn under its workload's plots"),
    Kind("roofline", View(v.roofline_tables, lambda data, _: [plots.roofline(data)]), made="analysis/roofline.py"),
    Kind("history", View(v.history_tables, lambda series, _: plots.histories(series)), made="analysis/history.py"),
    # Stores written before analyses were data kept probe tables preformatted
    Kind("table", View(v.legacy_table), made="cpulab before analyses were data"),
]}

MAKERS: dict[str, Maker] = {k.name: k.make for k in KINDS.values() if k.make}
VIEWS: dict[str, View] = {k.name: k.view for k in KINDS.values()}
