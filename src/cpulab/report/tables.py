"""The one table model every view draws: terminal (rich), HTML (jinja2), CSV, Markdown.

A view builds a Table once from the Summary (report/views.py); each drawer only lays it
out.  A cell keeps its plain value (what CSV writes) beside the text a person reads, and
an optional tag (a verdict or a style word) that the terminal maps to a colour and the
HTML to a CSS class of the same name.
"""
from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field
from typing import Any

from cpulab.model import Status, Verdict

# Tags a cell may carry; each drawer has one style per tag.
TAGS = ("faster", "slower", "same", "identical", "fail", "muted", "changed", "only")

FOLD_ROWS = 30  # the HTML folds longer tables


def fmt_num(v: float | None, digits: int = 4) -> str:
    """About `digits` significant digits, thousands separated when larger."""
    if v is None:
        return "-"
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 10 ** digits:
        return f"{v:,.0f}"
    return f"{v:.{max(0, digits - 1 - int(f'{a:e}'.split('e')[1]))}f}" if a >= 1 else f"{v:.{digits}g}"


def fmt_delta(ratio: float | None, ci: list[float] | None) -> str:
    """A ratio as a percentage change, with its interval: '+3.1% [+1.0, +5.2]'."""
    if ratio is None:
        return "-"
    s = f"{(ratio - 1) * 100:+.1f}%"
    if ci:
        s += f" [{(ci[0] - 1) * 100:+.1f}, {(ci[1] - 1) * 100:+.1f}]"
    return s


def verdict_tag(verdict: str | None) -> str:
    """The tag of a verdict or of a status shown in its place."""
    return {Verdict.FASTER: "faster", Verdict.SLOWER: "slower", Verdict.SAME: "same",
            Verdict.SMALLER: "faster", Verdict.LARGER: "slower",
            Verdict.IDENTICAL_CODE: "identical", Status.IDENTICAL: "identical", "baseline": "muted",
            Verdict.UNCLEAR: "muted", Verdict.INCONCLUSIVE: "muted"}.get(verdict, "fail")


@dataclass
class Cell:
    value: Any  # plain: str, int, float, None, a list
    text: str | None = None  # how it reads, when not just the value formatted
    tag: str = ""

    def __str__(self) -> str:
        if self.text is not None:
            return self.text
        if self.value is None:
            return "-"
        if isinstance(self.value, float):
            return fmt_num(self.value)
        if isinstance(self.value, (list, tuple)):
            return " ".join(map(str, self.value))
        return str(self.value)


@dataclass
class Column:
    name: str
    left: bool = False  # text columns read left-aligned, numbers right


@dataclass
class Table:
    name: str  # what the rows are ("results", "comparisons", ...): CSV's `table` column
    title: str
    columns: list[Column]
    rows: list[list[Cell]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    code: bool = False  # monospace listing (the side-by-side hot loops)

    def add(self, *cells) -> None:
        self.rows.append([c if isinstance(c, Cell) else Cell(c) for c in cells])


def columns(*names: str, left: int = 1) -> list[Column]:
    """Columns by name; the first `left` are left-aligned."""
    return [Column(n, i < left) for i, n in enumerate(names)]


# ---- drawers ---------------------------------------------------------------------

TERMINAL_STYLE = {"faster": "bold green", "slower": "bold red", "same": "dim", "identical": "cyan",
                  "fail": "yellow", "muted": "dim", "changed": "yellow", "only": "red"}


def to_rich(t: Table):
    from rich.markup import escape
    from rich.table import Table as RichTable
    # Names, parameters, errors and code come from plans and tools: escaped, so that rich
    # never reads "[rax]" or "a[/b]" as markup.
    rt = RichTable(title=escape(t.title), title_justify="left", caption=escape("\n".join(t.notes)) or None,
                   caption_justify="left")
    for c in t.columns:
        rt.add_column(escape(c.name), justify="left" if c.left else "right")
    for row in t.rows:
        rt.add_row(*(f"[{TERMINAL_STYLE[c.tag]}]{escape(str(c))}[/]" if c.tag else escape(str(c)) for c in row))
    return rt


def to_csv(tables: list[Table]) -> str:
    """Every row of every table, plain values, with a leading `table` column naming its table."""
    names = list(dict.fromkeys(c.name for t in tables for c in t.columns))
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=["table"] + names)
    w.writeheader()
    for t in tables:
        for row in t.rows:
            w.writerow({"table": t.name, **{c.name: _plain(cell.value) for c, cell in zip(t.columns, row)}})
    return buf.getvalue()


def _plain(v: Any) -> Any:
    return " ".join(map(str, v)) if isinstance(v, (list, tuple)) else v


def to_markdown(t: Table) -> str:
    def esc(s: str) -> str:
        return s.replace("|", "\\|").replace("\n", " ")
    lines = [f"## {esc(t.title)}", "", "| " + " | ".join(esc(c.name) for c in t.columns) + " |",
             "|" + "|".join("---" if c.left else "---:" for c in t.columns) + "|"]
    lines += ["| " + " | ".join(esc(str(cell)) for cell in row) + " |" for row in t.rows]
    lines += [""] + [esc(n) for n in t.notes]
    return "\n".join(lines).rstrip() + "\n"
