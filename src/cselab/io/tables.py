"""The one table writer: a typed table (columns with a header, an alignment and a cell format; rows of values)
written as GitHub Markdown, aligned console text, a LaTeX booktabs ``tabular``, CSV or an HTML ``<table>``.

Every table cselab prints or writes goes through it: the report's tables (``report/render.py``, ``compare.py``,
``transfer.py``, the report page ``figures.py``), ``cselab compare``, the console tables of a run and of ``cselab transfer``
(``evaluation/sts.py``, ``evaluation/transfer.py``) and the model card's (``model_card.py``).  The writer lays
out cells; what a cell says (rounding, ``±``, escaping) is the column's ``format`` or the caller's text.

    >>> t = Table([Column("Task"), Column("Spearman", "right", lambda v: f"{v:.2f}")], [("STS-B", 76.855)])
    >>> print("\\n".join(markdown(t)))
    | Task | Spearman |
    |---|--:|
    | STS-B | 76.86 |
    >>> print("\\n".join(text_lines(t)))
    Task   Spearman
    STS-B     76.86
"""

from __future__ import annotations

import csv
import html as html_lib
import io
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["ALIGNS", "Column", "Table", "csv_text", "html", "latex", "latex_escape", "markdown", "markdown_escape",
           "text", "text_lines"]

#: a column's alignment: Markdown rule ``---`` / ``--:`` / ``:-:``, LaTeX ``l`` / ``r`` / ``c``, console
#: ``str.ljust`` / ``rjust`` / ``center``
ALIGNS: tuple[str, ...] = ("left", "right", "center")
_LATEX_ALIGN = {"left": "l", "right": "r", "center": "c"}


def text(value: Any) -> str:
    """The default cell format: ``""`` for ``None``, else ``str(value)`` (CSV: the value as the ``csv`` module
    writes it, numbers unrounded)."""
    return "" if value is None else str(value)


@dataclass(frozen=True)
class Column:
    """One column of a :class:`Table`.

    Attributes:
        header: the header's text, as written (Markdown / LaTeX markup allowed; an empty header is written
            ``| |`` in Markdown: a column of row labels).
        align: one of :data:`ALIGNS`.
        format: ``value -> str``, the text of one cell (default :func:`text`).

    Raises:
        ValueError: an unknown ``align`` (names the column).
    """

    header: str
    align: str = "left"
    format: Callable[[Any], str] = text

    def __post_init__(self) -> None:
        if self.align not in ALIGNS:
            raise ValueError(f"table column {self.header!r}: align {self.align!r}; expected one of {list(ALIGNS)}")


@dataclass(frozen=True)
class Table:
    """Columns and rows: row ``i`` holds one value per column, in the columns' order; ``Column.format`` turns
    a value into its cell's text.  Any sequences may be passed; they are kept as tuples.

    Raises:
        ValueError: no column, or a row whose length is not the number of columns (names the row's index,
            its length and the headers).
    """

    columns: tuple[Column, ...]
    rows: tuple[tuple[Any, ...], ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "columns", tuple(self.columns))
        object.__setattr__(self, "rows", tuple(tuple(row) for row in self.rows))
        if not self.columns:
            raise ValueError("a table needs at least one column")
        for i, row in enumerate(self.rows):
            if len(row) != len(self.columns):
                raise ValueError(f"table row {i} has {len(row)} cells; expected {len(self.columns)}, one per "
                                 f"column {self.headers}")

    @classmethod
    def of(cls, headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> Table:
        """A table of plain columns named ``headers`` (left-aligned, format :func:`text`): records, CSV."""
        return cls(tuple(Column(h) for h in headers), tuple(tuple(r) for r in rows))

    @property
    def headers(self) -> list[str]:
        """The columns' headers, in order."""
        return [c.header for c in self.columns]

    def cells(self) -> list[list[str]]:
        """Every row's cells as text (``Column.format`` of each value)."""
        return [[c.format(v) for c, v in zip(self.columns, row, strict=True)] for row in self.rows]

    def widths(self, min_width: int = 0) -> list[int]:
        """Per column, the longest of its header and its cells (characters), at least ``min_width``."""
        return [max(min_width, *map(len, column)) for column in zip(self.headers, *self.cells(), strict=True)]


def markdown_escape(value: str) -> str:
    """``|`` escaped as ``\\|`` (a cell's text inside a Markdown table)."""
    return value.replace("|", "\\|")


_LATEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                  "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}


def latex_escape(value: Any) -> str:
    """Escape LaTeX's special characters in plain text (``str(value)``)."""
    return "".join(_LATEX_SPECIAL.get(ch, ch) for ch in str(value))


def markdown(table: Table, *, right_rule: str = "--:") -> list[str]:
    """GitHub Markdown lines: the header, the alignment rule (``---`` left, ``right_rule`` right, ``:-:``
    centre), one line per row (``| a | b |``; no padding to a width).  Cells are written as they are: escape
    ``|`` in a cell's format (:func:`markdown_escape`)."""
    rules = {"left": "---", "right": right_rule, "center": ":-:"}
    head = "|" + "|".join(f" {h} " if h else " " for h in table.headers) + "|"
    rule = "|" + "|".join(rules[c.align] for c in table.columns) + "|"
    return [head, rule, *("| " + " | ".join(row) + " |" for row in table.cells())]


def text_lines(table: Table, *, sep: str = "  ", min_width: int = 0, widths: Sequence[int] | None = None,
               header: bool = True) -> list[str]:
    """Aligned console lines: the header (``header=True``) and the rows, each cell padded to its column's width
    by its alignment, joined by ``sep``.

    Args:
        min_width: the narrowest column (characters).
        widths: the columns' widths (default :meth:`Table.widths`): pass another table's to write lines under it
            (a cell longer than its width is written whole).

    Raises:
        ValueError: ``widths`` not one per column.
    """
    widths = list(table.widths(min_width) if widths is None else widths)
    if len(widths) != len(table.columns):
        raise ValueError(f"text_lines: {len(widths)} widths for {len(table.columns)} columns {table.headers}")
    pad = {"left": str.ljust, "right": str.rjust, "center": str.center}
    rows = ([table.headers] if header else []) + table.cells()
    return [sep.join(pad[c.align](cell, w) for c, cell, w in zip(table.columns, row, widths, strict=True))
            for row in rows]


def latex(table: Table) -> list[str]:
    """A booktabs ``tabular`` (needs ``\\usepackage{booktabs}``) as lines: ``\\begin{tabular}{..}``, ``\\toprule``,
    the header, ``\\midrule``, the rows, ``\\bottomrule``, ``\\end{tabular}``.  Headers and cells are written as
    they are (LaTeX): escape plain text in a cell's format (:func:`latex_escape`)."""
    spec = "".join(_LATEX_ALIGN[c.align] for c in table.columns)
    return [f"\\begin{{tabular}}{{{spec}}}", "\\toprule", " & ".join(table.headers) + " \\\\", "\\midrule",
            *(" & ".join(row) + " \\\\" for row in table.cells()), "\\bottomrule", "\\end{tabular}"]


def csv_text(table: Table) -> str:
    """CSV (the ``csv`` module, ``\\n`` line ends, quoting where needed): the header row, then the rows."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(table.headers)
    writer.writerows(table.cells())
    return buf.getvalue()


def html(table: Table) -> list[str]:
    """An HTML ``<table>`` as lines: a ``<thead>`` row of ``<th>`` and a ``<tbody>`` row per table row, each cell's
    text HTML-escaped (headers and cells are plain text here, unlike Markdown / LaTeX) and aligned by its column
    (``style="text-align: ..."``)."""
    def row(tag: str, cells: Sequence[str]) -> str:
        return "<tr>" + "".join(f'<{tag} style="text-align: {c.align}">{html_lib.escape(cell)}</{tag}>'
                                for c, cell in zip(table.columns, cells, strict=True)) + "</tr>"

    return ["<table>", "<thead>", row("th", table.headers), "</thead>", "<tbody>",
            *(row("td", cells) for cells in table.cells()), "</tbody>", "</table>"]
