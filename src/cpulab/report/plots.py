"""Plots as inline SVG strings (matplotlib, no network, no files)."""
from __future__ import annotations

import contextlib
import functools
import io
import json
import math
import os
import signal
from collections import defaultdict

from cpulab.params import human_bytes


@functools.cache
def _pyplot():
    """matplotlib's pyplot, set up when the first plot is drawn: importing it takes 0.3 s,
    which a command that draws nothing (`cpulab --help`, `list`, a refused plan) need
    not pay."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    # Labels are plain text: a variant named "a$b" must not be read as mathtext.
    # A fixed salt for the SVG's element ids (random by default): a figure draws the same
    # text in any process, and a report of the same run the same file.
    plt.rcParams.update({"figure.dpi": 96, "font.size": 9, "svg.fonttype": "none", "axes.grid": True,
                         "grid.alpha": 0.3, "text.parse_math": False, "svg.hashsalt": "cpulab"})
    return plt


def _figure(width: float, height: float):
    return _pyplot().subplots(figsize=(width, height))


def _plain_numbers():
    """A tick formatter of plain numbers (with mathtext off, log axes' default labels
    would read "$\\mathdefault{10^{2}}$")."""
    from matplotlib.ticker import FuncFormatter
    return FuncFormatter(lambda v, _: f"{v:g}")


def _svg(fig):
    """The figure as inline SVG text; within drawn_together, a Drawing it fills later."""
    if _together is not None:
        _together.append(Drawing(fig))
        return _together[-1]
    text = _svg_text(fig)
    _pyplot().close(fig)
    return text


def _svg_text(fig) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})  # the same text every time
    text = buf.getvalue()
    return text[text.index("<svg"):]  # drop the XML prolog and doctype: inline in HTML


class Drawing:
    """A figure's place in a report, its SVG drawn with the report's others (drawn_together)."""

    def __init__(self, fig):
        self.fig, self.svg = fig, ""

    def __html__(self) -> str:  # what Jinja's |safe puts in the page
        return self.svg

    __str__ = __html__


_together: list[Drawing] | None = None  # the figures kept for drawing at once (drawn_together)


@contextlib.contextmanager
def drawn_together():
    """Within, each plot's figure is kept and a Drawing takes its place; on leaving, they
    are drawn, every other one in a forked child process, the rest here (a report's
    twenty took 1.6 s on one CPU, the other idle at the end of a run).  Building a figure
    reads its data, so an unreadable analysis still fails where it is asked for; drawing
    only renders.  What the child could not draw is drawn here."""
    global _together
    _together = kept = []
    try:
        yield
        _together = None
        _draw(kept)
    finally:
        _together = None
        for d in kept:
            _pyplot().close(d.fig)


def _draw(kept: list[Drawing]) -> None:
    """Each Drawing's SVG: every other one drawn in a forked child, the rest here."""
    theirs = kept[1::2]
    child = _child_drawing([d.fig for d in theirs]) if theirs else None
    try:
        for d in kept if child is None else kept[0::2]:
            d.svg = _svg_text(d.fig)
    except BaseException:  # Ctrl-C, or a figure that cannot be drawn: the child is not waited for
        if child is not None:
            os.close(child[1])
            _ended(child[0])
        raise
    if child is not None:
        texts = _child_drawn(*child, len(theirs))
        for d, text in zip(theirs, texts or [_svg_text(d.fig) for d in theirs]):
            d.svg = text


def _child_drawing(figs: list) -> tuple[int, int] | None:
    """A forked child drawing the figures' SVG texts into a pipe: its pid and the pipe's
    reading end, or None where no child could be started."""
    read, write = os.pipe()
    try:
        pid = os.fork()
    except OSError:
        os.close(read)
        os.close(write)
        return None
    if pid == 0:  # the child draws, writes and leaves, running nothing of its parent's at exit
        status = 1
        try:
            os.close(read)
            with os.fdopen(write, "w") as out:
                json.dump([_svg_text(f) for f in figs], out)
            status = 0
        finally:
            os._exit(status)
    os.close(write)
    return pid, read


def _child_drawn(pid: int, read: int, count: int) -> list[str] | None:
    """What the child wrote, once it has ended: `count` SVG texts, or None if it failed."""
    try:
        with os.fdopen(read) as f:
            text = f.read()
    except BaseException:  # stopped while reading: the child ends with it, reaped
        _ended(pid)
        raise
    _, status = os.waitpid(pid, 0)
    try:
        texts = json.loads(text) if status == 0 else None
    except ValueError:
        return None
    return texts if isinstance(texts, list) and len(texts) == count else None


def _ended(pid: int) -> None:
    """The drawing child killed and reaped."""
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)


def _mark_caches(ax, caches: list[dict]) -> None:
    """Dotted lines at the data cache sizes that fall inside the plotted range."""
    lo, hi = ax.get_xlim()
    for c in caches:
        if c.get("type") == "Instruction" or not lo <= c.get("size_bytes", 0) <= hi:
            continue
        ax.axvline(c["size_bytes"], color="grey", linestyle=":", linewidth=1)
        ax.annotate(f"L{c['level']} {human_bytes(c['size_bytes'])}", (c["size_bytes"], 1),
                    xycoords=("data", "axes fraction"), rotation=90, va="top", ha="right", fontsize=7, color="grey")
    ax.set_xlim(lo, hi)


def bars(labels: list[str], values: list[float], ci: list[tuple[float, float]], ylabel: str, title: str) -> str:
    """A bar per variant with its 95% interval as an error bar (none for one process)."""
    fig, ax = _figure(7, 3.2)
    lo = [max(0.0, v - c[0]) for v, c in zip(values, ci)]
    hi = [max(0.0, c[1] - v) for v, c in zip(values, ci)]
    ax.bar(range(len(values)), values, yerr=[lo, hi], capsize=3, color="#4c78a8")
    ax.set_xticks(range(len(values)), labels, rotation=30, ha="right")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    return _svg(fig)


def curves(series: dict[str, list[tuple[float, float]]], xlabel: str, ylabel: str, title: str,
           caches: list[dict] | None = None, logy: bool = False, xbytes: bool = True,
           levels: list[dict] | None = None) -> str:
    """One line per variant: y against x (log2 x axis), cache sizes marked."""
    fig, ax = _figure(7, 3.6)
    lines, names = [], []
    for name, pts in series.items():
        pts = sorted(p for p in pts if p[1] is not None and math.isfinite(p[1]))
        if pts:
            lines += ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=3)
            names.append(name)
    ax.set_xscale("log", base=2)
    if logy:
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(_plain_numbers())
    if xbytes:
        ticks = [t for t in ax.get_xticks() if t > 0]
        ax.set_xticks(ticks, [human_bytes(t) for t in ticks], rotation=30, ha="right")
    if caches:
        _mark_caches(ax, caches)
    for lv in levels or []:
        ax.axhline(lv["ns"], color="#e45756", linewidth=0.8, linestyle="--")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if len(series) > 1:
        # Given explicitly: matplotlib would drop a label that starts with "_" from its own legend.
        ax.legend(lines, names, fontsize=7)
    return _svg(fig)


def history(s: dict, png: bool = False) -> str | bytes:
    """One series over runs: the estimate with its interval per run, in commit (or start)
    order, a vertical line where it changed; as inline SVG, or PNG bytes for a file."""
    pts = s["points"]
    fig, ax = _figure(7, 3.4)
    x = list(range(len(pts)))
    y = [p["median"] for p in pts]
    lo = [p["median"] - p["ci"][0] if p["ci"] else 0.0 for p in pts]
    hi = [p["ci"][1] - p["median"] if p["ci"] else 0.0 for p in pts]
    ax.errorbar(x, y, yerr=[lo, hi], marker="o", markersize=3, capsize=2, color="#4c78a8", linewidth=1)
    for c in s.get("changes", []):
        ax.axvline(c["at"] - 0.5, color="#e45756", linestyle="--", linewidth=1)
        ax.annotate(f"{(c['change'] - 1) * 100:+.1f}%", (c["at"] - 0.5, 1), xycoords=("data", "axes fraction"),
                    va="top", ha="left", fontsize=8, color="#e45756")
    ax.set_xticks(x, [p["label"] or (p["commit"][:7] if p["commit"] else f"run {p['run']}") for p in pts],
                  rotation=30, ha="right")
    ax.set_ylabel(s["unit"])
    params = " ".join(f"{k}={v}" for k, v in s["params"].items())
    ax.set_title(f"{s['experiment']}: {s['workload']} {s['variant']} {params}: history in {s['order']} order")
    if not png:
        return _svg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    _pyplot().close(fig)
    return buf.getvalue()


def roofline(data: dict) -> str:
    """Log-log: flops per core cycle against flops per byte; a line per memory level
    (intensity x its bytes per cycle) up to the top compute peak, the peaks of the other
    instruction sets as dashed ceilings, and a marker per kernel and variant."""
    roofs, points = data["roofs"], data["points"]
    compute = sorted((c for c in roofs["compute"] if c["flops_per_cycle"]), key=lambda c: c["flops_per_cycle"])
    memory = [m for m in roofs["memory"] if m["bytes_per_cycle"]]
    xs = [p["intensity"] for p in points]
    lo, hi = min(xs + [1 / 64]) / 2, max(xs + [16]) * 2
    top = compute[-1]["flops_per_cycle"]
    fig, ax = _figure(7, 4)
    for m in memory:
        knee = top / m["bytes_per_cycle"]
        ax.plot([lo, knee, hi], [lo * m["bytes_per_cycle"], top, top], linewidth=1,
                label=f"{m['level']} {m['bytes_per_cycle']:.1f} B/cycle")
    for c in (c for c in compute[:-1] if c["flops_per_cycle"] < 0.95 * top):  # a ceiling below the peak
        ax.axhline(c["flops_per_cycle"], color="grey", linestyle="--", linewidth=0.8)
        ax.annotate(c["isa"], (hi, c["flops_per_cycle"]), ha="right", va="bottom", fontsize=7, color="grey")
    ax.annotate(f"{compute[-1]['isa']} {top:.3g} flops/cycle", (hi, top), ha="right", va="bottom", fontsize=7)
    groups: dict[str, list[dict]] = {}
    for p in points:
        groups.setdefault(f"{p['workload']} {p['variant']}", []).append(p)
    for name, ps in groups.items():
        ax.plot([p["intensity"] for p in ps], [p["flops_per_cycle"] for p in ps], linestyle="none", marker="o",
                markersize=4, label=name)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_formatter(_plain_numbers())
    ax.set_xlim(lo, hi)
    ax.set_xlabel("flops per byte")
    ax.set_ylabel("flops per core cycle")
    ax.set_title("roofline: kernels under this core's measured roofs")
    ax.legend(fontsize=6, ncol=2)
    return _svg(fig)


# The plots of stored analyses (cli/kinds.py names each kind's).

def memlat(levels: list[dict], caches: list[dict]) -> str:
    """Each memlat curve (a memlat-levels analysis) with the levels found in it."""
    series = {f"{c['variant']} {c['series']}": [(p["size_bytes"], p["ns"]) for p in c["points"]] for c in levels}
    return curves(series, "working set", "ns per load", "memlat: load-to-use latency", caches, logy=True,
                  levels=levels[0]["levels"] if levels else None)


def colour(doc: dict, caches: list[dict]) -> str:
    """Arbitrary and balanced pages' latency against working set, a pair of lines per cache."""
    series: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for r in doc["rows"]:
        for side in ("arbitrary", "balanced"):
            if r[f"{side}_ns"] and r["size_bytes"]:
                series[f"{r['variant']} {r['cache']} {side}"].append((r["size_bytes"], r[f"{side}_ns"]))
    title = "memlat: arbitrary against colour-balanced pages" + (" (no balanced pages: see the table)"
                                                                 if doc.get("missing") else "")
    return curves(series, "working set", "ns per load", title, caches, logy=True)


def histories(series: list[dict]) -> list[str]:
    return [history(s) for s in series]
