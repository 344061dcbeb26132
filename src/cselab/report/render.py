"""Render a :class:`cselab.report.collect.Report` as Markdown, LaTeX or CSV, in the papers' column layout.

Columns: STS12 STS13 STS14 STS15 STS16 STS-B SICK-R Avg (Spearman x 100), optionally STS-B dev.  A cell is
``mean ± std`` over the group's seeds (std only when n > 1, sample std with ddof=1, as the papers' "±"),
followed by ``(paper; ours - paper)`` when the matched paper row reports that column.  Rows without a
published number show ours only.  Failed runs are listed after the table with the last lines of their logs.
CSV is the machine-readable form (:func:`table_records`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cselab.evaluation.stats import seed_statistics
from cselab.io.tables import Column, Table, csv_text, latex, latex_escape, markdown, markdown_escape
from cselab.report.collect import Group, Report, Run
from cselab.report.published import COLUMN_NAMES, SCORE_KEYS

FORMATS: tuple[str, ...] = ("markdown", "latex", "csv")
#: the report's columns: the 8 test columns, plus ``dev`` (STS-B dev) on request
DEV_COLUMN = "dev"
COLUMN_TITLES: dict[str, str] = {**COLUMN_NAMES, DEV_COLUMN: "STS-B dev"}


def _columns(dev: bool) -> list[str]:
    return [*SCORE_KEYS, DEV_COLUMN] if dev else list(SCORE_KEYS)


def _fmt(value: float | None, signed: bool = False) -> str:
    if value is None:
        return ""
    return f"{value:+.2f}" if signed else f"{value:.2f}"


def _name(group: Group) -> dict[str, str]:
    variant = group.variant or ""
    return {
        "method": group.method or "*", "backbone": group.backbone or "*", "setting": group.setting or "*",
        "variant": variant, "label": group.label, "what": "; ".join(x for x in (variant, group.label) if x),
    }


def _seeds(group: Group) -> str:
    return " ".join(str(s) for s in group.seeds)


def _source(group: Group) -> str:
    return group.published.source if group.published is not None else ""


def _notes(groups: Sequence[Group]) -> list[str]:
    rows = {g.published.index: g.published for g in groups if g.published is not None}  # each row once, in order
    return [f"{p.source} ({p.method}, {p.backbone}, {p.setting}): {part}" for p in rows.values()
            for part in _note_parts(p)]


def _note_parts(p) -> list[str]:
    """A published row's ``erratum: ...`` and ``derived: ...`` (those it has)."""
    return [f"{kind}: {text}" for kind, text in (("erratum", p.erratum), ("derived", p.derived)) if text]


def _failed_title(run: Run) -> str:
    c = run.config
    names = [str((c.get(k) or {}).get("name", "?")) if isinstance(c.get(k), dict) else "?"
             for k in ("method", "backbone", "setting")]
    extra = ", ".join(o for o in (run.overrides or []) if not o.lstrip("+~").startswith("hydra"))
    return "/".join(names) + (f" [{extra}]" if extra else "")


# ------------------------------------------------------------------------------------------ markdown

def _markdown_cell(g: Group, col: str) -> str:
    """``ours (paper; ours - paper)``: "75.27 ± 0.40 (78.54 ± 0.15; -3.27)", "– (76.25)" or "–" (2 decimals)."""
    stat = g.stat(col)
    text = _fmt(stat.mean)
    if text and stat.std is not None:
        text += f" ± {stat.std:.2f}"
    paper = _fmt(g.paper(col))
    if paper and g.paper_std(col) is not None:
        paper += f" ± {g.paper_std(col):.2f}"
    if paper and text:
        text += f" ({paper}; {_fmt(g.diff(col), signed=True)})"
    elif paper:
        text = f"– ({paper})"
    return text or "–"


def sts_table(report: Report, dev: bool = False, markup: str = "markdown") -> Table:
    """The report's main table: a row per group (method, backbone, setting, variant / overrides, n, the score
    columns as ``ours (paper; ours - paper)``, the paper).  ``markup``: ``markdown`` (the variant in bold, ``|``
    escaped) or ``plain`` (text as it is: the HTML page, :func:`cselab.io.tables.html`).

    Raises:
        ValueError: an unknown ``markup``.
    """
    if markup not in ("markdown", "plain"):
        raise ValueError(f"sts_table: markup {markup!r}; expected markdown or plain")
    cols = _columns(dev)
    rows = []
    for g in report.groups:
        name = _name(g)
        variant = (f"**{name['variant']}**" if markup == "markdown" else name["variant"]) if name["variant"] else ""
        what = " ; ".join(x for x in (variant, name["label"]) if x)
        n = f"{g.n}" + (f" (+{len(g.failed)} failed)" if g.failed else "")
        rows.append([name["method"], name["backbone"], name["setting"], what, n,
                     *[_markdown_cell(g, c) for c in cols], _source(g)])
    escape = markdown_escape if markup == "markdown" else str
    return Table([Column("Method"), Column("Backbone"), Column("Setting"),
                  Column("Variant / overrides", format=escape), Column("n"),
                  *(Column(COLUMN_TITLES[c], "right") for c in cols), Column("Paper")], rows)


def render_markdown(report: Report, dev: bool = False, comparisons: Sequence | None = None) -> str:
    """The report as a GitHub Markdown table (:func:`sts_table`) plus a legend, paper notes, the intervals and the
    paired ``comparisons`` (:func:`interval_sections`) and the failed-run list."""
    cols = _columns(dev)
    table = sts_table(report, dev)
    out = ["## STS results (Spearman × 100)", ""]
    out += markdown(table) if report.groups else ["_no finished runs found_"]
    out += ["", "Cell: ours, mean ± sample std (ddof=1) over the n seeds (std only when n > 1), then "
                "(paper; ours − paper) when the paper reports the column. Paper: the published row matched on "
                "(method, backbone, setting, variant)."]
    notes = _notes(report.groups)
    if notes:
        out += ["", "Paper notes:", ""] + [f"- {n}" for n in notes]
    out += interval_sections(report, cols, comparisons)
    for status, title in (("failed", "Failed runs"), ("unfinished", "Unfinished runs (running or interrupted)")):
        runs = [r for r in report.failed if r.status == status]
        if not runs:
            continue
        out += ["", f"### {title} ({len(runs)})", ""]
        for run in runs:
            out.append(f"- `{run.path}` — {markdown_escape(_failed_title(run))}: {run.error}")
            for log_name, tail in run.log_tail.items():
                out += [f"  - last lines of `{log_name}`:", "", "    ```"]
                out += [f"    {line}" for line in tail]
                out += ["    ```", ""]
    return "\n".join(out).rstrip() + "\n"


# ------------------------------------------------------------------------------------------ intervals

def group_title(g: Group) -> str:
    """``method/backbone/setting (variant; label)``: a row's name in the interval sections."""
    name = _name(g)
    return f"{name['method']}/{name['backbone']}/{name['setting']}" + (f" ({name['what']})" if name["what"] else "")


def interval_sections(report: Report, cols: Sequence[str], comparisons: Sequence | None = None) -> list[str]:
    """Markdown lines of the three kinds of interval, each in its own table, and the paired comparisons.

    * per run, over its test pairs: ``score [low, high]`` from ``results.json``'s ``test_ci`` (bootstrap);
    * per row, over its seeds: ``mean ± std [low, high]``, the t-interval of the mean (n >= 2), with a warning
      for n < 3;
    * against the paper: the published number and whether it lies inside that seed interval;
    * the paired comparisons (:func:`cselab.report.compare.compare_groups`), seed by seed and over seeds.
    """
    test_cols = [c for c in cols if c != DEV_COLUMN]
    scores = [Column(COLUMN_TITLES[c], "right") for c in test_cols]
    row_title = Column("Row", format=lambda g: markdown_escape(group_title(g)))
    out: list[str] = []
    runs = [(g, r) for g in report.groups for r in g.runs if any(r.interval(c) for c in test_cols)]
    if runs:
        info = next((r.results.get("test_ci_info") for _, r in runs if r.results.get("test_ci_info")), {}) or {}
        rows = [[g, r.seed, *(_pairs_cell(r, c) for c in test_cols)] for g, r in runs]
        out += ["", f"### Per run: {100 * info.get('level', 0.95):g} % intervals over the test pairs", "",
                *markdown(Table([row_title, Column("Seed", format=str), *scores], rows)),
                "", f"[low, high]: {info.get('method', 'bootstrap percentile')} interval, "
                    f"{info.get('n_resamples', '?')} resamples of the test pairs (seed {info.get('seed', '?')}); "
                    "the average's from the same resamples of every task.  It says how much the score of THIS "
                    "trained model would move on another test set drawn like this one; it does not cover the "
                    "variance over training seeds."]
    if report.groups:  # every group holds a finished run (collect.group_runs makes one per finished run's key)
        warnings = []
        for g in report.groups:
            # the warning of a column the row has scores in (a run that tested a subset of the tasks has no avg:
            # its n=0 there is not the row's n)
            scored = [st for st in (g.stat(c) for c in ("avg", *test_cols)) if st.n]
            warning = scored[0].warning if scored else seed_statistics([]).warning
            if warning:
                warnings.append(f"- {markdown_escape(group_title(g))}: {warning}")
        rows = [[g, g.n, _seeds(g), *(_seed_cell(g, c) for c in test_cols)] for g in report.groups]
        out += ["", "### Per row: seed statistics (mean ± std [95 % t-interval of the mean])", "",
                *markdown(Table([row_title, Column("n", "right"), Column("Seeds"), *scores], rows)),
                "", "Interval: mean ± t(0.975, n−1) · std / √n over the n seeds (runs that differ only in seed; "
                    "runs sharing a seed are refused).  It covers the variance over training seeds on THIS test "
                    "set, not the test-set sampling of the per-run intervals."]
        if warnings:
            out += ["", "Warnings:", "", *warnings]
    papers = [g for g in report.groups if g.published is not None and any(g.paper(c) is not None for c in test_cols)]
    if papers:
        rows = [[g, _source(g), g.n, *(_inside_cell(g, c) for c in test_cols)] for g in papers]
        out += ["", "### Against the paper: is the published number inside our seed interval?", "",
                *markdown(Table([row_title, Column("Paper"), Column("n", "right"), *scores], rows))]
    for gc in comparisons or []:
        out += ["", f"### Paired comparison: A = {markdown_escape(group_title(gc.a))} vs B = "
                    f"{markdown_escape(group_title(gc.b))}", ""]
        if not gc.by_seed:
            out += [f"_not compared: {'; '.join(gc.skipped) or 'no seed in common'}_"]
            continue
        cmp0 = next(iter(gc.by_seed.values()))
        tasks = list(cmp0.tasks)
        rows = [[seed, *(_paired_cell(cmp, t) for t in tasks)] for seed, cmp in gc.by_seed.items()]
        rows.append([f"mean over {len(gc.by_seed)} seeds", *(_over_seeds_cell(gc.over_seeds.get(t)) for t in tasks)])
        out += [*markdown(Table([Column("Seed", format=str), *(Column(COLUMN_TITLES.get(t, t), "right") for t in tasks)],
                                rows)),
                "", f"Per seed: A − B (Spearman × 100 points) on the same test pairs, [paired bootstrap "
                    f"{cmp0.method} interval, {cmp0.n_resamples} resamples], p = paired permutation test, "
                    f"Holm-adjusted across the tasks (Avg: unadjusted), * below {cmp0.alpha:g}.  Mean over "
                    "seeds: the per-seed differences' mean [t-interval over seeds]."]
        if gc.skipped:
            out += ["", "Not compared: " + "; ".join(gc.skipped)]
    return out


def _pairs_cell(run: Run, col: str) -> str:
    """``score [low, high]``: a run's score and its interval over the test pairs."""
    score, ci = run.score(col), run.interval(col)
    return "–" if score is None else f"{score:.2f}" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")


def _seed_cell(g: Group, col: str) -> str:
    """``mean ± std [low, high]`` over a row's seeds (the mean alone for one seed)."""
    st = g.stat(col)
    if st.mean is None:
        return "–"
    return f"{st.mean:.2f}" + (f" ± {st.std:.2f} [{st.interval.low:.2f}, {st.interval.high:.2f}]"
                               if st.std is not None else "")


def _inside_cell(g: Group, col: str) -> str:
    """The published number and whether it lies inside the row's seed interval."""
    paper, inside = g.paper(col), g.paper_inside(col)
    if paper is None:
        return "–"
    if inside is None:
        return f"{paper:.2f} (n<2: no interval)"
    return f"{paper:.2f} {'inside' if inside else 'outside'}"


def _paired_cell(cmp, task: str) -> str:
    """One seed's A − B with its paired bootstrap interval and (Holm-adjusted) p, ``*`` when significant."""
    c = cmp.tasks[task]
    p = c.p if c.p_holm is None else c.p_holm
    return (f"{c.diff:+.2f} [{c.interval.low:+.2f}, {c.interval.high:+.2f}] p={p:.3f}"
            + ("*" if cmp.significant(task) else ""))


def _over_seeds_cell(st) -> str:
    """The mean over seeds of the per-seed differences, with its t-interval."""
    if st is None or st.mean is None:
        return "–"
    return f"{st.mean:+.2f}" + (f" [{st.interval.low:+.2f}, {st.interval.high:+.2f}]" if st.interval else "")


# ------------------------------------------------------------------------------------------ latex

def _latex_cell(g: Group, col: str) -> str:
    stat = g.stat(col)
    text = "--" if stat.mean is None else f"{stat.mean:.2f}" + (f"$\\pm${stat.std:.2f}" if stat.std is not None else "")
    paper = g.paper(col)
    if paper is not None:
        diff = g.diff(col)
        ref = f"{paper:.2f}" + (f"; ${diff:+.2f}$" if diff is not None else "")
        text += f" {{\\scriptsize({ref})}}"
    return text


def render_latex(report: Report, dev: bool = False) -> str:
    """The report as a booktabs ``tabular`` (needs ``\\usepackage{booktabs}``); failed runs as ``%`` comments."""
    cols = _columns(dev)
    rows = []
    for g in report.groups:
        name = _name(g)
        rows.append([name["method"], name["backbone"], name["setting"], name["what"], g.n,
                     *[_latex_cell(g, c) for c in cols], _source(g)])
    plain = [Column(h, format=latex_escape) for h in ("Method", "Backbone", "Setting", "Variant")]
    table = Table([*plain, Column("$n$"), *(Column(latex_escape(COLUMN_TITLES[c]), "center") for c in cols),
                   Column("Paper", format=latex_escape)], rows)
    out = ["% STS results, Spearman x 100: ours = mean $\\pm$ sample std (ddof=1) over n seeds;",
           "% (paper; ours - paper) in small type when the paper reports the column.", *latex(table)]
    out += [f"% paper note: {note}" for note in _notes(report.groups)]
    for run in report.failed:
        out.append(f"% {run.status.upper()}: {run.path} ({_failed_title(run)}): {run.error}")
        for log_name, tail in run.log_tail.items():
            out += [f"%   {log_name}: {line}" for line in tail]
    return "\n".join(out) + "\n"


# ------------------------------------------------------------------------------------------ csv

def table_records(report: Report) -> tuple[list[str], list[list[Any]]]:
    """The report as ``(columns, rows)`` of plain values (numbers unrounded; ``None`` when missing).

    Group rows have ``status="ok"`` and ``<col>_mean``, ``<col>_std``, ``<col>_n``, ``<col>_paper``,
    ``<col>_paper_std``, ``<col>_diff`` for every column; each failed or unfinished run adds a row with
    ``status="failed"`` / ``"unfinished"`` (no results.json, no failed.json: running or interrupted), its
    ``run_dirs``, ``error`` and ``log_tail`` (the last log lines, newline-joined).  Used for CSV and the W&B table.
    """
    cols = _columns(True)
    columns = ["status", "method", "backbone", "setting", "variant", "label", "n", "n_failed", "seeds"]
    for c in cols:
        columns += [f"{c}_mean", f"{c}_std", f"{c}_n", f"{c}_paper", f"{c}_paper_std", f"{c}_diff"]
    columns += ["paper_source", "paper_note", "run_dirs", "error", "log_tail"]
    for c in cols:  # the intervals (appended: the columns above keep their places)
        columns += [f"{c}_seed_ci_low", f"{c}_seed_ci_high", f"{c}_paper_inside", f"{c}_pairs_ci_low",
                    f"{c}_pairs_ci_high"]
    rows: list[list[Any]] = []
    for g in report.groups:
        name = _name(g)
        row: list[Any] = ["ok", name["method"], name["backbone"], name["setting"], name["variant"], name["label"],
                          g.n, len(g.failed), _seeds(g)]
        for c in cols:
            stat = g.stat(c)
            row += [stat.mean, stat.std, stat.n, g.paper(c), g.paper_std(c), g.diff(c)]
        p = g.published
        note = "" if p is None else "; ".join(_note_parts(p))
        row += [_source(g), note, " ".join(str(r.path) for r in g.runs), "", ""]
        for c in cols:
            interval = g.stat(c).interval
            pairs = g.runs[0].interval(c) if g.n == 1 and c != DEV_COLUMN else None
            row += [interval.low if interval else None, interval.high if interval else None, g.paper_inside(c),
                    *(pairs or [None, None])]
        rows.append(row)
    for run in report.failed:
        names = [run.saved.method, run.saved.backbone, run.saved.setting]
        tail = "\n".join(f"[{name}] {line}" for name, lines in run.log_tail.items() for line in lines)
        row = [run.status, *names, None, ", ".join(run.overrides or []), 0, 1,
               "" if run.seed is None else str(run.seed)]
        row += [None] * (6 * len(cols))
        row += ["", "", str(run.path), run.error, tail]
        row += [None] * (5 * len(cols))
        rows.append(row)
    return columns, rows


def render_csv(report: Report) -> str:
    """The report as CSV (``csv`` module, header row first; empty field = missing), the STS-B dev columns
    always included."""
    return csv_text(Table.of(*table_records(report)))


def render(report: Report, fmt: str = "markdown", dev: bool = False, comparisons: Sequence | None = None) -> str:
    """Render ``report`` as ``fmt`` (one of :data:`FORMATS`); ``dev`` adds the STS-B dev column; ``comparisons``
    (Markdown only) adds the paired comparisons.

    Raises:
        ValueError: unknown format.
    """
    if fmt == "markdown":
        return render_markdown(report, dev=dev, comparisons=comparisons)
    if fmt == "latex":
        return render_latex(report, dev=dev)
    if fmt == "csv":
        return render_csv(report)
    raise ValueError(f"unknown format {fmt!r}; expected one of {list(FORMATS)}")


__all__ = ["FORMATS", "group_title", "interval_sections", "render", "render_csv", "render_latex",
           "render_markdown", "sts_table", "table_records"]
