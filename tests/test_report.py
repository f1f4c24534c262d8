"""The HTML report as a person sees it: rendered in headless Chromium, every plot drawn,
no console errors, text from plans escaped."""
import os
import shutil
from pathlib import Path

import pytest

from cpulab.cli.kinds import MAKERS, VIEWS
from cpulab import analysis
from cpulab.plan import plan as plans
from cpulab.spec.settings import Settings
from cpulab.measure.schedule import runner
from cpulab.report import exports
from cpulab.report import html
from cpulab.store.db import Store
from cpulab.plan.toolchain import Variant

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
EVIL = "<script>alert('x')</script>"


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("report")
    custom = {"O2<b>bold</b>": Variant("O2<b>bold</b>", cflags=("-O2", "-funroll-loops"))}
    exps = [plans.Experiment("sweep", ["sha256"], ["O0", "O2"], "O2", title=f"sweep {EVIL}",
                             params={"sha256": {"size": ["256", "1024", "4096"]}}),
            plans.Experiment("point", ["sha256"], ["O2", "O2<b>bold</b>"], "O2", params={"sha256": {"size": ["1024"]}})]
    p = plans.validate(plans.Plan("report-test", exps, Settings(processes=3, samples=2, min_sample_time=0.002, warmup=0.0, budget=0.0), custom_variants=custom))
    store = Store(d / "db.sqlite")
    run_id = runner.run_plan(p.given(seed=9), store)
    summary = analysis.analyse(store, run_id, MAKERS)
    path = html.write(summary, d / "report.html", VIEWS)
    return store, summary, path


def test_report_is_self_contained_and_escaped(small_run):
    _, _, path = small_run
    text = path.read_text()
    assert EVIL not in text and "&lt;script&gt;" in text
    assert "<b>bold</b>" not in text
    for fetch in ('src="http', "src='http", 'href="http', "url(http", "@import"):
        assert fetch not in text  # nothing is fetched from the network
    assert text.count("<svg") >= 3  # sweep: rate and speedup curves; point: bars


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (apt-get install chromium)")
def test_report_renders_in_chromium(small_run, tmp_path):
    from playwright.sync_api import sync_playwright
    _, _, path = small_run
    errors = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
            "--disable-component-update", "--disable-sync"])
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(path.as_uri())
        plots = page.evaluate("""Array.from(document.querySelectorAll('figure.plot svg')).map(s => {
            const r = s.getBoundingClientRect();
            return {w: r.width, h: r.height, marks: s.querySelectorAll('path, rect, use').length}; })""")
        scripts = page.evaluate("document.querySelectorAll('script').length")
        shot = Path(os.environ.get("CPULAB_SCREENSHOT", tmp_path / "report.png"))
        page.screenshot(path=str(shot), full_page=True)
        browser.close()
    assert errors == []
    assert len(plots) >= 3 and all(p["w"] > 200 and p["h"] > 100 and p["marks"] > 5 for p in plots), plots
    assert scripts == 0  # the evil title did not become a script
    assert shot.stat().st_size > 10_000


def test_exports(small_run):
    _, summary, _ = small_run
    csv_text = exports.render(summary, "csv")
    assert csv_text.splitlines()[0].startswith("table,") and csv_text.count("\ncomparison,") == len(summary.comparisons)
    md = exports.render(summary, "markdown")
    assert md.startswith("# cpulab run") and "| sha256 |" in md
    import json
    assert json.loads(exports.render(summary, "json"))["run_id"] == summary.run_id


def test_labels_are_plain_text_in_plots_html_and_terminal(tmp_path):
    """Names that mean something to mathtext, HTML, rich markup or matplotlib's legend
    ('$', '_', '^', '<x>', '[/b]', a leading '_') are shown as written, never parsed."""
    from rich.console import Console
    from cpulab.report.terminal import print_summary
    names = ["a$b<x>", "p$_^$q", "_under", "c[/b]"]
    custom = {n: Variant(n, cflags=("-O2", f"-DLABEL_{i}")) for i, n in enumerate(names)}
    exps = [plans.Experiment("sweep", ["sha256"], ["O2", *names], "O2",
                             params={"sha256": {"size": ["256", "1024", "4096"]}}),
            plans.Experiment("point", ["sha256"], ["O2", *names], "O2", params={"sha256": {"size": ["1024"]}})]
    p = plans.validate(plans.Plan("labels", exps, Settings(processes=2, samples=1, min_sample_time=0.001, warmup=0.0, measure_identical=True, budget=0.0), custom_variants=custom))
    store = Store(tmp_path / "db.sqlite")
    summary = analysis.summarise(store, runner.run_plan(p.given(seed=11), store))
    text = html.write(summary, tmp_path / "report.html", VIEWS).read_text()
    for n in names:
        escaped = n.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        # the results tables, the bar labels and the legend of every sweep plot
        assert text.count(escaped) >= 4, n
    assert "<x>" not in text
    console = Console(record=True, width=200)
    print_summary(summary, console, VIEWS)
    shown = console.export_text()
    for n in names:
        assert n in shown


def test_a_report_that_cannot_be_drawn_is_one_line(small_run, tmp_path, monkeypatch):
    from cpulab.report import plots
    store, summary, _ = small_run
    before = (store.run(summary.run_id), store.results(summary.run_id))

    curves = plots.curves

    def broken(*args, **kwargs):  # the sweep's second plot: its first is built and kept
        if broken.calls:
            raise ValueError("cannot draw\nthis plot")
        broken.calls += 1
        return curves(*args, **kwargs)
    broken.calls = 0
    monkeypatch.setattr(plots, "curves", broken)
    with pytest.raises(html.ReportError, match="broken.html cannot be drawn: ValueError: cannot draw this plot"):
        html.write(summary, tmp_path / "broken.html", VIEWS)
    assert not (tmp_path / "broken.html").exists()
    assert plots._pyplot().get_fignums() == []  # the figures built before the failure are closed
    assert (store.run(summary.run_id), store.results(summary.run_id)) == before


def test_plots_drawn_in_two_processes_are_the_ones_drawn_in_one(small_run, tmp_path, monkeypatch):
    """The report draws every other figure in a forked child: the page is the same bytes
    as one drawn here alone, and figures a failing child did not draw are drawn here."""
    import contextlib
    from cpulab.report import plots
    _, summary, _ = small_run
    together = html.write(summary, tmp_path / "together.html", VIEWS).read_bytes()
    assert together.count(b"<svg") >= 3
    child = plots._child_drawing

    def failing(figs):  # a child that dies before writing anything
        pid = os.fork()
        if pid == 0:
            os._exit(3)
        read, write = os.pipe()
        os.close(write)
        return pid, read
    monkeypatch.setattr(plots, "_child_drawing", failing)
    assert html.write(summary, tmp_path / "failed.html", VIEWS).read_bytes() == together
    monkeypatch.setattr(plots, "_child_drawing", child)
    monkeypatch.setattr(plots, "drawn_together", contextlib.nullcontext)
    assert html.write(summary, tmp_path / "alone.html", VIEWS).read_bytes() == together


@pytest.mark.parametrize("where", ["drawing", "reading"])
def test_a_report_stopped_while_drawing_leaves_no_child(small_run, tmp_path, monkeypatch, where):
    """Ctrl-C while this process draws its figures, or while it reads the child's: the
    child drawing the others is killed and reaped, not left to draw for nothing."""
    from cpulab.report import plots
    _, summary, _ = small_run
    started, child_drawing, parent = [], plots._child_drawing, os.getpid()

    def drawing(figs):
        started.append(child_drawing(figs))
        return started[-1]

    def interrupted(*args):
        raise KeyboardInterrupt
    monkeypatch.setattr(plots, "_child_drawing", drawing)
    if where == "drawing":  # only here: the forked child draws as it would
        svg_text = plots._svg_text
        monkeypatch.setattr(plots, "_svg_text", lambda fig: svg_text(fig) if os.getpid() != parent else interrupted())
    else:
        monkeypatch.setattr(os, "fdopen", interrupted)
    with pytest.raises(KeyboardInterrupt):
        html.write(summary, tmp_path / "stopped.html", VIEWS)
    assert started
    for pid, _ in started:
        with pytest.raises(ChildProcessError):  # reaped already
            os.waitpid(pid, os.WNOHANG)
    assert plots._pyplot().get_fignums() == []
