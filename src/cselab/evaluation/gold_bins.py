"""STS pairs grouped by gold-score bin (PromCSE Fig. 3): the test chart of a run (``results.json``'s
``stsb_test_cosine_by_gold_bin``, W&B ``test/stsb_cosine_by_gold_bin``) and the analysis notebooks'."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

#: gold-score bin edges of STS-B (scores 0-5): [0, 1), [1, 2), [2, 3), [3, 4), [4, 5]
DEFAULT_GOLD_EDGES: tuple[float, ...] = (0.0, 1.0, 2.0, 3.0, 4.0, 5.0)


def gold_bin_labels(edges: Sequence[float] = DEFAULT_GOLD_EDGES) -> list[str]:
    """``["0-1", "1-2", ...]`` for the bins of ``edges`` (integers printed without decimals)."""
    return [f"{lo:g}-{hi:g}" for lo, hi in zip(edges[:-1], edges[1:], strict=True)]


def cosine_by_gold_bin(cosine: Sequence[float] | np.ndarray, gold: Sequence[float] | np.ndarray,
                       edges: Sequence[float] = DEFAULT_GOLD_EDGES) -> dict[str, np.ndarray]:
    """Split the pairs' cosines by gold-score bin (PromCSE Fig. 3 groups).

    Bins are ``[e_i, e_{i+1})``, the last one closed (a gold 5.0 falls in ``4-5``); scores outside are dropped.

    Returns:
        ``{label: cosines of that bin}`` in bin order, labels from :func:`gold_bin_labels` (empty arrays kept).

    Raises:
        ValueError: lengths differ or bad edges.
    """
    cos, g = np.asarray(cosine, dtype=np.float64), np.asarray(gold, dtype=np.float64)
    if cos.shape != g.shape:
        raise ValueError(f"cosine {cos.shape} and gold {g.shape} must have the same length")
    e = np.asarray(edges, dtype=np.float64)
    if e.ndim != 1 or e.size < 2 or np.any(np.diff(e) <= 0):
        raise ValueError(f"edges must be increasing with at least 2 values, got {list(edges)}")
    idx = np.searchsorted(e, g, side="right") - 1  # the bin of each score; -1: dropped
    idx[g == e[-1]] = e.size - 2
    idx[(g < e[0]) | (g > e[-1])] = -1
    return {label: cos[idx == i] for i, label in enumerate(gold_bin_labels(edges))}
