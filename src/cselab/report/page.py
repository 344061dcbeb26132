"""The report as one static HTML page: its tables and figures together, readable offline.

``cselab report DIR... --figures OUT`` writes into ``OUT``: the figures (:mod:`cselab.report.figures`: PNG, SVG
and the JSON data of each), the report as ``report.md``, ``report.tex`` and ``report.csv``, and ``index.html``,
which shows the main STS table (:func:`cselab.report.render.sts_table` through :func:`cselab.io.tables.html`), links
the three table files, shows every figure (its PNG, with links to its SVG and data) and the whole Markdown report
(intervals, comparisons, failed runs) as text.  Every link is a relative path to a file in ``OUT``: the page
opens from the disk (``file://``) or from ``python -m http.server`` run in ``OUT``, and the folder can be moved or
archived whole.  No script, no style sheet or font from the network.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from pathlib import Path

from cselab.io.tables import html as html_table
from cselab.report.collect import Report
from cselab.report.figures import WrittenFigure
from cselab.report.render import sts_table

PAGE = "index.html"
#: the table files written beside the page: name -> the report's format
TABLE_FILES: dict[str, str] = {"report.md": "markdown", "report.tex": "latex", "report.csv": "csv"}

_STYLE = """body { font-family: sans-serif; max-width: 1200px; margin: 1em auto; padding: 0 1em; color: #222; }
table { border-collapse: collapse; font-size: 0.8em; margin: 0.5em 0; }
th, td { border: 1px solid #ccc; padding: 2px 6px; }
th { background: #f3f3f3; }
figure { display: inline-block; vertical-align: top; margin: 0.5em; max-width: 560px; }
figure img { max-width: 100%; border: 1px solid #ddd; }
figcaption { font-size: 0.8em; }
pre { font-size: 0.75em; background: #f8f8f8; padding: 0.5em; overflow-x: auto; }"""


def render_page(report: Report, figures: Sequence[WrittenFigure], markdown_text: str, dev: bool = False,
                title: str = "cselab report") -> str:
    """The page's HTML (module docstring).

    Args:
        report: the collected report (its main table is drawn as HTML).
        figures: the figures written beside the page (their files are linked by relative path).
        markdown_text: the whole Markdown report (shown as preformatted text).
        dev: add the STS-B dev column to the table.
    """
    e = html.escape
    out = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">', f"<title>{e(title)}</title>",
           f"<style>\n{_STYLE}\n</style>", "</head>", "<body>", f"<h1>{e(title)}</h1>",
           "<p>Runs under: " + ", ".join(f"<code>{e(str(p))}</code>" for p in report.roots) + "</p>",
           "<h2>STS results (Spearman × 100)</h2>"]
    out += html_table(sts_table(report, dev, markup="plain")) if report.groups else ["<p><em>no finished runs</em></p>"]
    out += ["<p>Cell: ours, mean ± sample std over the seeds, then (paper; ours − paper). The tables as "
            + ", ".join(f'<a href="{name}">{name}</a>' for name in TABLE_FILES) + ".</p>"]
    out += ["<h2>Figures</h2>"] + ([] if figures else ["<p><em>no figure: the runs have nothing to draw</em></p>"])
    for fig in figures:
        links = " · ".join(f'<a href="{e(f)}">{f.rsplit(".", 1)[-1].upper()}</a>' for f in fig.files)
        out += ["<figure>", f'<a href="{e(fig.image)}"><img src="{e(fig.image)}" alt="{e(fig.title)}"></a>',
                f"<figcaption><b>{e(fig.title)}</b>. {e(fig.caption)} [{links}]</figcaption>", "</figure>"]
    out += ["<h2>The whole report</h2>", "<details open><summary>Markdown (report.md)</summary>",
            f"<pre>{e(markdown_text)}</pre>", "</details>", "</body>", "</html>"]
    return "\n".join(out) + "\n"


def page_links(page: str) -> list[str]:
    """Every ``href`` and ``src`` of a page, in order (the links a browser would follow)."""
    return re.findall(r'(?:href|src)="([^"]*)"', page)


def write_page(out_dir: str | Path, report: Report, figures: Sequence[WrittenFigure], tables: dict[str, str],
               dev: bool = False) -> Path:
    """Write the table files (``tables``: file name -> its text, :data:`TABLE_FILES`) and ``index.html`` into
    ``out_dir``; returns the page's path.

    Raises:
        ValueError: a link of the page that is not a relative path to an existing file in ``out_dir`` (a bug:
            the page must open offline, moved or served by ``python -m http.server`` from ``out_dir``).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, text in tables.items():
        (out_dir / name).write_text(text, encoding="utf-8", newline="")
    page = render_page(report, figures, tables.get("report.md", ""), dev=dev)
    root = out_dir.resolve()
    for link in page_links(page):
        target = (out_dir / html.unescape(link)).resolve()
        if "://" in link or link.startswith("/") or root not in target.parents or not target.is_file():
            raise ValueError(f"report page: the link {link!r} is not a file under {out_dir}")
    path = out_dir / PAGE
    path.write_text(page, encoding="utf-8")
    return path


__all__ = ["PAGE", "TABLE_FILES", "page_links", "render_page", "write_page"]
