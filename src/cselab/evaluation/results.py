"""A run's ``results.json``: written atomically, with the papers' table printed beside it.

Format (scores are Spearman x 100)::

    {"test": {"sts12", "sts13", "sts14", "sts15", "sts16", "stsb", "sickr", "avg"},
     "dev": {"stsb"}, "config": {...resolved Hydra config...},
     "val_curve": [{"step", "stsb_dev", "seconds"}], "best_checkpoint": str | null, "wall_time_s": float, ...}
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from cselab.evaluation.pair_scores import compact
from cselab.evaluation.stats import DEFAULT_BOOTSTRAP, TaskPairs, bootstrap_scores
from cselab.evaluation.sts import TEST_TASKS
from cselab.io.files import atomic_write_text


def papers_avg(test: dict[str, float]) -> dict[str, float]:
    """``test`` with ``avg`` = the papers' Avg, the plain mean of the 7 tasks, when all 7 are present; without
    ``avg`` otherwise (a subset's mean is not comparable to the papers' Avg).  The one rule for ``results.json``,
    the loggers and the console (``test/avg``)."""
    test = {k: float(v) for k, v in test.items() if k != "avg"}
    if all(t in test for t in TEST_TASKS):
        test["avg"] = sum(test[t] for t in TEST_TASKS) / len(TEST_TASKS)
    return test


def build_results(test: dict[str, float], dev: dict[str, float], config: dict[str, Any], **extra: Any) -> dict:
    """Assemble the results dict; ``test`` gets ``avg`` as :func:`papers_avg` says."""
    return {"test": papers_avg(test), "dev": {k: float(v) for k, v in dev.items()}, "config": config, **extra}


def write_results(path: str | os.PathLike, results: dict) -> Path:
    """Write ``results`` as indented JSON, atomically."""
    return atomic_write_text(path, json.dumps(results, indent=2, sort_keys=False) + "\n")


def score_intervals(
    pairs: dict[str, tuple[list[float], list[float]]], subsets: dict[str, dict[str, int]], aggregation: str = "all",
    n_resamples: int = DEFAULT_BOOTSTRAP.n_resamples, seed: int = DEFAULT_BOOTSTRAP.seed,
    level: float = DEFAULT_BOOTSTRAP.level, method: str = DEFAULT_BOOTSTRAP.method,
) -> dict[str, Any] | None:
    """The ``results.json`` entries of the test scores' bootstrap intervals (:mod:`cselab.evaluation.stats`).

    Computed from exactly the values stored in ``test_pairs.npz`` (:func:`cselab.evaluation.pair_scores.compact`),
    so that a later ``cselab compare`` starts from the same numbers.

    Args:
        pairs: task -> (cosines, gold), as :attr:`cselab.evaluation.callback.STSCallback.test_pairs`.
        subsets: task -> {subset: pairs} (:attr:`~cselab.evaluation.callback.STSCallback.test_subsets`).
        aggregation: ``eval.aggregation`` (``mean`` / ``wmean`` resample within each subset).
        n_resamples, seed, level, method: ``eval.bootstrap`` (:class:`cselab.evaluation.stats.BootstrapOptions`);
            ``n_resamples=0`` returns ``None`` (intervals off).

    Returns:
        ``None``, or ``{"test_ci": {task: [low, high], ..., "avg": [low, high]}, "test_ci_info": {...}}``
        (Spearman x 100; ``avg`` only when all 7 tasks were tested, like ``test.avg``).
    """
    if not n_resamples or not pairs:
        return None
    tasks = {t: TaskPairs.from_subsets(compact(s), compact(g), list((subsets.get(t) or {t: len(s)}).values()),
                                       aggregation) for t, (s, g) in pairs.items()}
    ci = bootstrap_scores(tasks, n_resamples=int(n_resamples), seed=int(seed), level=float(level), method=method,
                          average=all(t in tasks for t in TEST_TASKS))
    return {
        "test_ci": {t: iv.as_list() for t, iv in ci.items()},
        "test_ci_info": {
            "level": float(level), "method": f"bootstrap {method}", "n_resamples": int(n_resamples),
            "seed": int(seed), "resampled": "test pairs" + (" within each subset" if aggregation != "all" else ""),
            "avg": "each task's pairs resampled independently in every resample, the 7 scores averaged",
            "pairs_file": "test_pairs.npz",
        },
    }
