"""A run's per-pair test predictions, ``test_pairs.npz`` beside ``results.json``.

What the intervals and paired comparisons (:mod:`cselab.evaluation.stats`) need after the run: for every test
task, the cosine of each pair and its gold score, in the evaluator's order (STS12-16: the subsets concatenated
in SentEval order, the order of the ``all`` Spearman), and the subset sizes.  Arrays (``numpy.savez_compressed``,
~200 KB for the 7 tasks):

* ``tasks``: the task names, in the order of the test;
* ``<task>.system``: the cosines, float32 -- or float64 when rounding to float32 would merge two distinct
  cosines into a tie (which could change a rank, hence the Spearman): the stored values always give
  ``results.json``'s Spearman exactly;
* ``<task>.gold``: the gold scores (float32 under the same rule);
* ``<task>.subsets``: Int64[S], the subset sizes (one entry for STS-B / SICK-R), and ``<task>.subset_names``;
* ``aggregation``: the run's ``eval.aggregation`` (how the subsets make the task score).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from cselab.evaluation.stats import TaskPairs
from cselab.io.files import staged

PAIRS_FILE = "test_pairs.npz"


def compact(values: Sequence[float] | np.ndarray) -> np.ndarray:
    """``values`` as float32 when that keeps every distinct value distinct (so ranks, hence Spearman, are
    unchanged), else as float64.  Float[N] -> Float32[N] | Float64[N]."""
    v64 = np.asarray(values, dtype=np.float64).reshape(-1)
    v32 = v64.astype(np.float32)
    return v32 if np.unique(v32).size == np.unique(v64).size else v64


def write_pair_scores(
    path: str | os.PathLike, pairs: Mapping[str, tuple[Sequence[float], Sequence[float]]],
    subsets: Mapping[str, Mapping[str, int]], aggregation: str = "all",
) -> Path:
    """Write ``test_pairs.npz`` atomically.

    Args:
        path: the file (``<run dir>/test_pairs.npz``).
        pairs: task -> (cosines Float[N], gold Float[N]).
        subsets: task -> {subset name: number of pairs}, in the concatenation order (sizes sum to N).
        aggregation: ``eval.aggregation``.

    Raises:
        ValueError: lengths differ or the subset sizes do not sum to N (names the task).
        OSError: the write failed (the previous file, if any, is kept).
    """
    arrays: dict[str, np.ndarray] = {"tasks": np.array(list(pairs), dtype=np.str_),
                                     "aggregation": np.array(aggregation)}
    for task, (system, gold) in pairs.items():
        sizes = dict(subsets.get(task) or {task: len(system)})
        if len(system) != len(gold) or sum(sizes.values()) != len(system):
            raise ValueError(f"{task}: {len(system)} cosines, {len(gold)} gold scores, subsets {sizes}")
        arrays[f"{task}.system"] = compact(system)
        arrays[f"{task}.gold"] = compact(gold)
        arrays[f"{task}.subsets"] = np.array(list(sizes.values()), dtype=np.int64)
        arrays[f"{task}.subset_names"] = np.array(list(sizes), dtype=np.str_)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with staged(path, "wb") as f:
        np.savez_compressed(f, **arrays)
    return path


def read_pair_scores(path: str | os.PathLike) -> tuple[dict[str, dict[str, np.ndarray]], str]:
    """Read ``test_pairs.npz``: ``({task: {"system", "gold", "subsets", "subset_names"}}, aggregation)``.

    Raises:
        FileNotFoundError: no such file (a run from before this file existed has none).
        ValueError: the file is not a per-pair scores file (names it and what is missing).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no per-pair test scores (runs write {PAIRS_FILE} since the intervals "
                                "were added; re-run the test, e.g. method.train=false, to get it)")
    try:
        with np.load(path, allow_pickle=False) as data:
            tasks = [str(t) for t in data["tasks"]]
            aggregation = str(data["aggregation"])
            out = {t: {k: data[f"{t}.{k}"] for k in ("system", "gold", "subsets", "subset_names")} for t in tasks}
    except (KeyError, OSError, ValueError) as err:
        raise ValueError(f"{path}: not a {PAIRS_FILE} file of cselab ({err})") from err
    return out, aggregation


def task_pairs(raw: Mapping[str, Mapping[str, np.ndarray]], aggregation: str = "all") -> dict[str, TaskPairs]:
    """:class:`TaskPairs` of every task of a :func:`read_pair_scores` result, scored as ``aggregation``."""
    return {t: TaskPairs.from_subsets(d["system"], d["gold"], [int(s) for s in d["subsets"]], aggregation)
            for t, d in raw.items()}
