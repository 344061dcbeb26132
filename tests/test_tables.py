"""The one table writer (cselab.io.tables): Markdown, aligned text, LaTeX and CSV from one typed table, and its
errors on a malformed one."""

from __future__ import annotations

import csv

import pytest

from cselab.io.tables import (
    Column,
    Table,
    csv_text,
    latex,
    latex_escape,
    markdown,
    markdown_escape,
    text_lines,
)


def _table() -> Table:
    return Table([Column("Task", format=markdown_escape), Column("n", "right"),
                  Column("Spearman", "right", lambda v: "–" if v is None else f"{v:.2f}")],
                 [("STS-B", 1379, 76.855), ("a|b", 7, None)])


def test_markdown_rules_follow_the_alignment_and_cells_their_format():
    assert markdown(_table()) == ["| Task | n | Spearman |", "|---|--:|--:|", "| STS-B | 1379 | 76.86 |",
                                  "| a\\|b | 7 | – |"]
    assert markdown(_table(), right_rule="---:")[1] == "|---|---:|---:|"
    assert markdown(Table([Column(""), Column("x", "center")], [("row", 1)]))[:2] == ["| | x |", "|---|:-:|"]


def test_text_lines_pad_each_column_to_its_widest_cell():
    lines = text_lines(_table())
    assert lines == ["Task      n  Spearman", "STS-B  1379     76.86", "a\\|b      7         –"]
    assert {len(line) for line in lines} == {len(lines[0])}
    under = Table(_table().columns, [("x", 123456, 1.0)])   # written in the first table's widths, not re-measured
    assert text_lines(under, widths=_table().widths(), header=False) == ["x      123456      1.00"]
    assert text_lines(Table([Column("a", "right")], [(1,)]), sep="", min_width=4) == ["   a", "   1"]


def test_latex_is_a_booktabs_tabular_of_the_cells():
    table = Table([Column("Method", format=latex_escape), Column("$n$", "center")], [("bert_base", 3)])
    assert latex(table) == ["\\begin{tabular}{lc}", "\\toprule", "Method & $n$ \\\\", "\\midrule",
                            "bert\\_base & 3 \\\\", "\\bottomrule", "\\end{tabular}"]


def test_csv_writes_plain_values_and_none_as_an_empty_field():
    text = csv_text(Table.of(["a", "b", "c"], [[1.25, None, "x, y"], [True, 0, ""]]))
    assert text == 'a,b,c\n1.25,,"x, y"\nTrue,0,\n'
    assert list(csv.reader(text.splitlines())) == [["a", "b", "c"], ["1.25", "", "x, y"], ["True", "0", ""]]


def test_bad_tables_are_refused_naming_the_row_or_column():
    with pytest.raises(ValueError, match=r"table row 1 has 2 cells; expected 3, one per column \['Task', 'n', "):
        Table(_table().columns, [("a", 1, 2.0), ("b", 1)])
    with pytest.raises(ValueError, match="table column 'x': align 'middle'"):
        Column("x", "middle")
    with pytest.raises(ValueError, match="at least one column"):
        Table([], [])
    with pytest.raises(ValueError, match="2 widths for 3 columns"):
        text_lines(_table(), widths=[1, 2])


def test_html_escapes_the_text_and_aligns_by_column():
    from cselab.io.tables import html

    lines = html(Table([Column("Task"), Column("n", "right")], [("<b>&", 3)]))
    assert lines[0] == "<table>" and lines[-1] == "</table>"
    assert '<th style="text-align: left">Task</th><th style="text-align: right">n</th>' in lines[2]
    assert '<td style="text-align: left">&lt;b&gt;&amp;</td><td style="text-align: right">3</td>' in lines[5]
