"""``cselab report`` / ``python -m cselab report RUN_OR_MULTIRUN_DIR... [--format markdown|latex|csv] [--out FILE] [--group-by KEYS]``

Collects every ``results.json`` under the given directories (recursively), pools runs whose configuration
differs only in seed, and prints the papers' table: per column mean ± std over seeds, n, the published number
and ours - paper (Spearman x 100).  Failed runs (a Hydra job dir without ``results.json``) are listed with the
last lines of their ``*.log``.  ``--wandb`` also logs the table as a W&B table (offline without
``WANDB_API_KEY``); a W&B error only prints a warning.

Markdown adds the intervals and the paired comparisons of rows tested on the same tasks, seed by seed
(``--compare``; :func:`cselab.report.render.interval_sections`), CSV their columns
(:func:`cselab.report.render.table_records`); ``--comparisons-csv FILE`` writes the comparisons.  Runs that share
a seed in one row are refused (exit 1).

``--figures OUT`` also writes the papers' figures from the runs (:mod:`cselab.report.figures`) and one static HTML
page, ``OUT/index.html``, that shows them with the tables, readable offline (:mod:`cselab.report.page`).

Exit status: 0 on success (failed runs included), 1 when nothing was found, the published data is invalid or two
runs of a row share a seed, 2 on bad arguments or a missing directory.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from cselab.cli import fail, write_output
from cselab.evaluation.stats import DEFAULT_BOOTSTRAP
from cselab.io.tables import Table, csv_text
from cselab.report.collect import Report, SameSeedError, collect
from cselab.report.compare import AUTO_MAX_PAIRS, comparable_pairs, compare_groups, comparison_records
from cselab.report.published import DEFAULT_PATH, SCORE_KEYS, PublishedDataError, load_published
from cselab.report.render import FORMATS, group_title, render, table_records


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser (see the module docstring)."""
    p = argparse.ArgumentParser(
        prog="python -m cselab report",
        description="Aggregate results.json files over seeds and compare them with the papers' numbers "
                    "(Spearman x 100).",
    )
    p.add_argument("dirs", nargs="+", metavar="RUN_OR_MULTIRUN_DIR",
                   help="run, multirun or output directories (searched recursively), or results.json files")
    p.add_argument("--format", choices=FORMATS, default="markdown", help="output format (default: markdown)")
    p.add_argument("--out", type=Path, default=None, help="write to FILE instead of stdout")
    p.add_argument("--group-by", default=None, metavar="KEYS",
                   help="comma-separated dotted config keys to group by, e.g. method.name,backbone.name,"
                        "setting.name,loss.margin (default: method/backbone/setting + the Hydra overrides "
                        "except seed)")
    p.add_argument("--paper-backbone", default=None, metavar="NAME",
                   help="compare every row with the paper's row for this backbone (e.g. bert_base for minilm_l6 runs)")
    p.add_argument("--dev", action="store_true", help="add an STS-B dev column (markdown / latex)")
    p.add_argument("--log-lines", type=int, default=10, metavar="N",
                   help="last N lines of each *.log shown for a failed run (default: 10)")
    p.add_argument("--published", type=Path, default=DEFAULT_PATH, metavar="YAML",
                   help="published-numbers file (default: the packaged published.yaml)")
    p.add_argument("--compare", choices=("auto", "all", "none"), default="auto",
                   help="paired comparisons between rows tested on the same tasks, seed by seed (Markdown): auto = "
                        "every pair of rows when there are at most 6 pairs (default), all, none")
    p.add_argument("--n-resamples", type=int, default=DEFAULT_BOOTSTRAP.n_resamples, metavar="N",
                   help="bootstrap resamples and permutations of the paired comparisons (default: %(default)s)")
    p.add_argument("--bootstrap-seed", type=int, default=DEFAULT_BOOTSTRAP.seed, metavar="S",
                   help="seed of the comparisons' resampling (default: %(default)s)")
    p.add_argument("--comparisons-csv", type=Path, default=None, metavar="FILE",
                   help="also write the paired comparisons as CSV (a row per pair of rows, seed and task)")
    p.add_argument("--figures", type=Path, default=None, metavar="DIR",
                   help="also write the figures (PNG, SVG, their data as JSON), the tables (report.md / .tex / .csv) "
                        "and an offline HTML page DIR/index.html that shows them together")
    p.add_argument("--figures-x", default=None, metavar="KEY",
                   help="the sweep figure's x: a key that varies across rows (default: the first one with numeric "
                        "values, e.g. tuning.pre_seq_len)")
    p.add_argument("--figures-score", choices=SCORE_KEYS, default=None, metavar="COLUMN",
                   help="the sweep figure's score column (default: avg when every row has the 7 tasks, else stsb)")
    p.add_argument("--wandb", nargs="?", const="cselab", default=None, metavar="PROJECT",
                   help="also log the table to W&B project PROJECT (default cselab); offline without "
                        "WANDB_API_KEY; never fails the command")
    return p


def log_wandb(report: Report, project: str = "cselab") -> bool:
    """Log the report as a ``wandb.Table`` (key ``report/sts_table``) in a W&B run of ``job_type="report"``.

    Mode: online when ``WANDB_API_KEY`` is set, else offline (``wandb sync`` later).  Returns True on success;
    any error (wandb missing, init or logging failure) prints a warning to stderr and returns False -- it
    never raises.
    """
    try:
        import wandb

        from cselab.run.loggers import wandb_mode

        columns, rows = table_records(report)
        run = wandb.init(project=project, job_type="report", mode=wandb_mode("auto"),
                         config={"dirs": [str(p) for p in report.roots]})
        try:
            table = wandb.Table(columns=columns, data=rows, allow_mixed_types=True)
            run.log({"report/sts_table": table})
        finally:
            run.finish()
        return True
    except Exception as err:  # a logger must never fail the report
        print(f"warning: could not log the table to W&B: {type(err).__name__}: {err}", file=sys.stderr)
        return False


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status (0 ok, 1 nothing found / bad published data, 2 bad arguments)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    missing = [d for d in args.dirs if not Path(d).exists()]
    if missing:
        parser.error(f"no such file or directory: {', '.join(missing)}")   # exits 2
    if args.figures is not None and args.figures.exists() and not args.figures.is_dir():
        parser.error(f"--figures {args.figures}: a file, not a directory; name a directory for the figures and the page")
    group_by = [k.strip() for k in args.group_by.split(",") if k.strip()] if args.group_by else None
    try:
        published = load_published(args.published)
        report = collect(args.dirs, group_by=group_by, published=published, log_lines=args.log_lines,
                         paper_backbone=args.paper_backbone)
    except (OSError, PublishedDataError, SameSeedError) as err:
        return fail(f"error: {err}", 1)
    if not report.groups and not report.failed:
        return fail(f"error: no results.json or Hydra run directory under {', '.join(args.dirs)}", 1)
    if args.figures_x is not None:
        from cselab.report.figures import swept_keys

        keys = swept_keys(report.groups)
        if args.figures_x not in keys:
            parser.error(f"--figures-x {args.figures_x}: not a key that varies across the rows found; they vary in: "
                         f"{', '.join(keys) or 'nothing'}")
    comparisons = []
    wants = args.format == "markdown" or args.comparisons_csv is not None or args.figures is not None
    if args.compare != "none" and wants:
        if args.n_resamples < 100:
            parser.error(f"--n-resamples {args.n_resamples}: expected >= 100")
        comparisons = compare_groups(report.groups, args.compare, n_resamples=args.n_resamples,
                                     seed=args.bootstrap_seed)
        n_pairs = len(comparable_pairs(report.groups))
        if args.compare == "auto" and n_pairs > AUTO_MAX_PAIRS:
            print(f"note: {n_pairs} pairs of rows could be compared; --compare auto compares at most "
                  f"{AUTO_MAX_PAIRS}: pass --compare all, or cselab compare RUN_A RUN_B", file=sys.stderr)
    if args.comparisons_csv is not None:
        table = Table.of(*comparison_records(comparisons, group_title))
        write_output(csv_text(table), args.comparisons_csv, f" ({len(table.rows)} rows)")
    text = render(report, args.format, dev=args.dev, comparisons=comparisons)
    if args.format == "markdown":  # runs with SentEval transfer results: the papers' transfer tables beside them
        from cselab.report.transfer import render_transfer_tables, transfer_rows_of_runs

        runs = [(str(r.path), {**r.results, "config": r.results.get("config") or r.config})
                for g in report.groups for r in g.runs if r.results]
        transfer = render_transfer_tables(transfer_rows_of_runs(runs))
        text += f"\n{transfer}" if transfer else ""
    write_output(text, args.out, f" ({len(report.groups)} groups, {len(report.failed)} failed runs)")
    if args.figures is not None:
        write_report_page(args, report, text if args.format == "markdown" else None, comparisons)
    if args.wandb:
        log_wandb(report, project=args.wandb)
    return 0


def write_report_page(args: argparse.Namespace, report: Report, markdown_text: str | None, comparisons) -> None:
    """``--figures DIR``: the figures, the three table files and ``DIR/index.html``; one line to stderr."""
    from cselab.report.figures import write_figures
    from cselab.report.page import TABLE_FILES, write_page

    figures = write_figures(report, args.figures, sweep_x=args.figures_x, score=args.figures_score)
    tables = {name: markdown_text if fmt == "markdown" and markdown_text is not None
              else render(report, fmt, dev=args.dev, comparisons=comparisons) for name, fmt in TABLE_FILES.items()}
    page = write_page(args.figures, report, figures, tables, dev=args.dev)
    print(f"wrote {page} ({len(figures)} figures: {', '.join(f.stem for f in figures) or 'none'})", file=sys.stderr)
