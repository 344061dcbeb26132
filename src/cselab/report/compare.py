"""Paired comparison of two finished runs on the same test pairs, from their ``test_pairs.npz``.

``cselab compare RUN_A RUN_B`` and the report's "Paired comparisons" section: for every task both runs tested,
score(A) - score(B) (Spearman x 100 points) with a paired bootstrap interval and a paired permutation p-value,
Holm-adjusted across the tasks, and the same for the 7-task average
(:func:`cselab.evaluation.stats.paired_comparison`).  Over several seeds, the per-seed differences give a
t-interval of the mean difference (:func:`seed_difference`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from cselab.evaluation.pair_scores import PAIRS_FILE, read_pair_scores, task_pairs
from cselab.evaluation.stats import (
    DEFAULT_BOOTSTRAP,
    Comparison,
    SeedStats,
    TaskPairs,
    paired_comparison,
    seed_statistics,
)
from cselab.io.tables import Column, Table, csv_text, markdown
from cselab.report.collect import json_key
from cselab.report.published import COLUMN_NAMES

__all__ = ["AUTO_MAX_PAIRS", "comparable_pairs", "compare_groups", "comparison_records", "load_pairs", "compare_runs",
           "render_comparison", "seed_difference"]


def load_pairs(run_dir: str | os.PathLike) -> dict[str, TaskPairs]:
    """A run's per-pair test scores as :class:`TaskPairs`, scored with the run's own ``eval.aggregation``.

    Args:
        run_dir: a run directory (holding ``test_pairs.npz``), or the ``.npz`` / ``results.json`` itself.

    Raises:
        FileNotFoundError: no ``test_pairs.npz`` (names the path; runs before this feature have none).
        ValueError: the file is not cselab's per-pair file.
    """
    path = Path(run_dir)
    if path.is_file():
        path = path if path.suffix == ".npz" else path.parent / PAIRS_FILE
    else:
        path = path / PAIRS_FILE
    raw, aggregation = read_pair_scores(path)
    return task_pairs(raw, aggregation)


def compare_runs(a: str | os.PathLike, b: str | os.PathLike, n_resamples: int = DEFAULT_BOOTSTRAP.n_resamples,
                 seed: int = DEFAULT_BOOTSTRAP.seed, level: float = DEFAULT_BOOTSTRAP.level,
                 method: str = DEFAULT_BOOTSTRAP.method) -> Comparison:
    """:func:`cselab.evaluation.stats.paired_comparison` of two run directories (A - B).

    Raises:
        FileNotFoundError: a run has no ``test_pairs.npz``.
        ValueError: the runs share no task, or were not scored on the same pairs.
    """
    return paired_comparison(load_pairs(a), load_pairs(b), n_resamples=n_resamples, seed=seed, level=level,
                             method=method)


def seed_difference(comparisons: Mapping[object, Comparison], level: float = 0.95) -> dict[str, SeedStats]:
    """Mean over seeds of the per-seed differences (A - B on the same seed), with a t-interval, per task.

    Args:
        comparisons: seed -> the :class:`Comparison` of that seed's two runs.

    Returns:
        task -> :class:`cselab.evaluation.stats.SeedStats` of the differences (tasks every comparison has).
    """
    if not comparisons:
        return {}
    tasks = [t for t in next(iter(comparisons.values())).tasks if all(t in c.tasks for c in comparisons.values())]
    return {t: seed_statistics([c.tasks[t].diff for c in comparisons.values()], level) for t in tasks}


def _p(p: float | None) -> str:
    if p is None:
        return ""
    return f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"


def render_comparison(cmp: Comparison, label_a: str, label_b: str, fmt: str = "markdown") -> str:
    """A comparison as a Markdown table with its legend (``fmt="markdown"``) or as CSV (``"csv"``: one row per task
    then ``avg``, plain values, unrounded).

    Raises:
        ValueError: unknown format.
    """
    if fmt == "csv":
        return csv_text(Table.of(["task", "a", "b", "diff", "ci_low", "ci_high", "p", "p_holm", "significant",
                                  "ci_method", "n_resamples", "seed"],
                                 [[name, c.a, c.b, c.diff, c.interval.low, c.interval.high, c.p, c.p_holm,
                                   cmp.significant(name), c.interval.method, cmp.n_resamples, cmp.seed]
                                  for name, c in cmp.tasks.items()]))
    if fmt != "markdown":
        raise ValueError(f"unknown format {fmt!r}; expected markdown or csv")
    level = next(iter(cmp.tasks.values())).interval.level
    m = sum(1 for c in cmp.tasks.values() if c.p_holm is not None)
    rows = [[COLUMN_NAMES.get(name, name), f"{c.a:.2f}", f"{c.b:.2f}", f"{c.diff:+.2f}",
             f"[{c.interval.low:+.2f}, {c.interval.high:+.2f}]", _p(c.p),
             (_p(c.p_holm) or "–") + (" *" if cmp.significant(name) else "")] for name, c in cmp.tasks.items()]
    headers = ["A", "B", "A − B", f"{100 * level:g} % CI", "p", "p (Holm)"]
    lines = [f"A: {label_a}", f"B: {label_b}", "",
             *markdown(Table([Column("Task"), *(Column(h, "right") for h in headers)], rows))]
    lines += ["", f"Difference in Spearman × 100 points on the same test pairs. CI: paired bootstrap "
              f"({cmp.method}, {cmp.n_resamples} resamples of the pairs, seed {cmp.seed}; the average's from the "
              f"same resamples of every task). p: two-sided paired permutation test ({cmp.n_resamples} random "
              f"swaps of each pair's two predictions, as ranks; smallest possible {2 / (cmp.n_resamples + 1):.1e}); "
              f"Holm-adjusted across the {m} tasks (the average is not in that family). * : below "
              f"{cmp.alpha:g} after Holm. Test-pair variance only: another training seed can move either run "
              "by more than this interval."]
    lines += [f"Note: {n}" for n in cmp.notes]
    return "\n".join(lines) + "\n"


#: ``--compare auto`` compares the report's rows pairwise only up to this many pairs
AUTO_MAX_PAIRS = 6


class GroupComparison:
    """Two report rows (groups) compared run against run, seed by seed (A - B on the same seed).

    Attributes:
        a, b: the two :class:`cselab.report.collect.Group`.
        by_seed: seed -> :class:`Comparison` of the two runs with that seed (the seeds both groups have).
        over_seeds: task -> :class:`SeedStats` of the per-seed differences (mean, std, t-interval).
        skipped: why some seeds were not compared (a run without ``test_pairs.npz`` ...).
    """

    def __init__(self, a, b, by_seed: dict, skipped: list[str], level: float = 0.95) -> None:
        self.a, self.b, self.by_seed, self.skipped = a, b, by_seed, skipped
        self.over_seeds = seed_difference(by_seed, level)


def comparable_pairs(groups: Sequence) -> list[tuple]:
    """``[(group_a, group_b, [(run_a, run_b), ...])]``: the pairs of report rows that share a test task and a seed
    whose two runs both have ``test_pairs.npz`` (runs from before it have nothing to pair), in row order."""
    candidates = []
    for i, ga in enumerate(groups):
        for gb in groups[i + 1:]:
            seeds_a = {json_key(r.seed): r for r in ga.runs}
            seeds_b = {json_key(r.seed): r for r in gb.runs}
            common = [s for s in seeds_a if s in seeds_b]
            tasks_a = {t for r in ga.runs for t in (r.results.get("test") or {})}
            tasks_b = {t for r in gb.runs for t in (r.results.get("test") or {})}
            with_pairs = [s for s in common if (seeds_a[s].path / PAIRS_FILE).is_file()
                          and (seeds_b[s].path / PAIRS_FILE).is_file()]
            if with_pairs and (tasks_a & tasks_b) - {"avg"}:
                candidates.append((ga, gb, [(seeds_a[s], seeds_b[s]) for s in common]))
    return candidates


def compare_groups(groups: Sequence, pairs: str = "auto", n_resamples: int = DEFAULT_BOOTSTRAP.n_resamples,
                   seed: int = DEFAULT_BOOTSTRAP.seed, level: float = DEFAULT_BOOTSTRAP.level,
                   method: str = DEFAULT_BOOTSTRAP.method) -> list[GroupComparison]:
    """Paired comparisons between report rows tested on the same tasks, matched seed by seed.

    Args:
        groups: the report's groups (:class:`cselab.report.collect.Group`).
        pairs: ``auto`` (every pair of rows that share tasks and a seed whose two runs have ``test_pairs.npz``,
            when there are at most :data:`AUTO_MAX_PAIRS` such pairs), ``all`` (every such pair), ``none``.
        n_resamples, seed, level, method: as :func:`cselab.evaluation.stats.paired_comparison`.

    Returns:
        One :class:`GroupComparison` per compared pair of rows, in the report's row order.

    Raises:
        ValueError: unknown ``pairs``.
    """
    if pairs not in ("auto", "all", "none"):
        raise ValueError(f"compare: expected auto, all or none, got {pairs!r}")
    if pairs == "none":
        return []
    candidates = comparable_pairs(groups)
    if pairs == "auto" and len(candidates) > AUTO_MAX_PAIRS:
        return []
    out = []
    for ga, gb, runs in candidates:
        by_seed, skipped = {}, []
        for ra, rb in runs:
            try:
                by_seed[ra.seed] = compare_runs(ra.path, rb.path, n_resamples, seed, level, method)
            except (FileNotFoundError, ValueError) as err:
                skipped.append(f"seed {ra.seed}: {err}")
        out.append(GroupComparison(ga, gb, by_seed, skipped, level))
    return out


def comparison_records(comparisons: Sequence[GroupComparison], name) -> tuple[list[str], list[list[object]]]:
    """The comparisons as one long table: a row per (pair of rows, seed, task), then per (pair, task) the mean
    over seeds (``seed="mean"``, its t-interval in ``ci_low`` / ``ci_high``).  ``name(group)`` labels a row."""
    columns = ["a", "b", "seed", "task", "score_a", "score_b", "diff", "ci_low", "ci_high", "ci_method", "p",
               "p_holm", "significant", "n_seeds"]
    rows: list[list[object]] = []
    for gc in comparisons:
        la, lb = name(gc.a), name(gc.b)
        for s, cmp in gc.by_seed.items():
            for task, c in cmp.tasks.items():
                rows.append([la, lb, s, task, c.a, c.b, c.diff, c.interval.low, c.interval.high, c.interval.method,
                             c.p, c.p_holm, cmp.significant(task), 1])
        for task, st in gc.over_seeds.items():
            rows.append([la, lb, "mean", task, None, None, st.mean, st.interval.low if st.interval else None,
                         st.interval.high if st.interval else None, "t over seeds", None, None, None, st.n])
    return columns, rows
