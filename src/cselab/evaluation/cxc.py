"""CxC-STS evaluation: sampled Spearman bootstrap (PromCSE Table 2, following Parekh et al. 2021).

Protocol (PromCSE Sec. 4.2.1, quoting CxC Sec. 5): "For each correlation estimate, we sample half of the queries
and for each selected query, we choose one of the items for which CxC supplies a paired rating. We compute
Spearman's r between the CxC scores and the model scores for the selected pairs. The final correlation is the
average over 1000 of these bootstrap samples." The model score of a pair is the cosine of the two caption
embeddings; results are Spearman x 100, reported as mean +- std over the samples.

Choices where the sources are silent (neither CxC nor PromCSE released this code):

* "query" = the ``caption1`` column of ``sts_{val,test}.csv``, "items" = the ``caption2`` rated with it. In both
  files each of the 25,000 captions is ``caption1`` of 1-3 rows (exactly one ``c2c_cocaption`` row + 0-2
  ``c2c_isim`` rows), so every row belongs to exactly one query; the rejected alternative (a caption as query
  of every row it appears in, either column) would let one pair be drawn through both of its captions.
  Queries are keyed by sentid, not by text.
* "half of the queries": ``floor(query_fraction * n_queries)`` distinct queries drawn uniformly WITHOUT
  replacement (12,500 of 25,000); the item of each is drawn uniformly among its rated items; samples are
  independent.
* Randomness: ``numpy.random.default_rng(seed)``, seed 123 (PromCSE's CxC protocol, docs/fidelity.md); draw order per sample: the queries
  (``rng.choice``), then one item index per query (``rng.integers``). The original draws cannot be reproduced.
* ``std`` is the population standard deviation (``numpy.std``, ddof=0) of the sample correlations.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch

from cselab.data.cxc import CxCPairs
from cselab.evaluation.sts import EncodeFn, encode_pairs, spearman


def query_groups(query_ids: Sequence[int] | np.ndarray) -> list[np.ndarray]:
    """Row indices of each query.

    Args:
        query_ids: the query (``caption1``) id of each row, length N.

    Returns:
        One int64 array of row indices (ascending) per distinct query, queries in order of first appearance.
    """
    rows: dict[int, list[int]] = {}
    for r, q in enumerate(np.asarray(query_ids).tolist()):
        rows.setdefault(q, []).append(r)
    return [np.asarray(v, dtype=np.int64) for v in rows.values()]


def iter_bootstrap_samples(
    groups: Sequence[np.ndarray],
    n_samples: int = 1000,
    seed: int = 123,
    query_fraction: float = 0.5,
) -> Iterator[np.ndarray]:
    """Yield the row indices of each bootstrap sample: ``floor(query_fraction * Q)`` queries, one item each.

    Args:
        groups: :func:`query_groups` output (Q queries, each a non-empty array of row indices).
        n_samples: number of samples (>= 1).
        seed: seed of ``numpy.random.default_rng``.
        query_fraction: fraction of the queries in each sample, in (0, 1].

    Yields:
        int64 arrays of length ``floor(query_fraction * Q)``: one row per selected query, in draw order.

    Raises:
        ValueError: n_samples < 1, query_fraction outside (0, 1], an empty group, or fewer than 2 queries per
            sample (Spearman needs 2 points).
    """
    if n_samples < 1:
        raise ValueError(f"n_samples must be >= 1, got {n_samples}")
    if not 0.0 < query_fraction <= 1.0:
        raise ValueError(f"query_fraction must be in (0, 1], got {query_fraction}")
    sizes = np.asarray([len(g) for g in groups], dtype=np.int64)
    if (sizes < 1).any():
        raise ValueError("every query needs at least one rated item")
    n_queries = len(groups)
    k = int(np.floor(query_fraction * n_queries))
    if k < 2:
        raise ValueError(
            f"a sample of {query_fraction} x {n_queries} queries has {k} pair(s); Spearman needs at least 2"
        )
    flat = np.concatenate(groups)  # k >= 2 above: there are queries
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    rng = np.random.default_rng(seed)
    for _ in range(n_samples):
        chosen = rng.choice(n_queries, size=k, replace=False)
        item = rng.integers(0, sizes[chosen])
        yield flat[offsets[chosen] + item]


def bootstrap_spearman_from_scores(
    system: Sequence[float] | np.ndarray | torch.Tensor,
    gold: Sequence[float] | np.ndarray,
    query_ids: Sequence[int] | np.ndarray,
    n_samples: int = 1000,
    seed: int = 123,
    query_fraction: float = 0.5,
) -> dict[str, Any]:
    """The bootstrap on precomputed model scores.

    Args:
        system: model score of each row (e.g. cosine), length N.
        gold: CxC ``agg_score`` of each row, length N.
        query_ids: query id of each row, length N.
        n_samples, seed, query_fraction: see :func:`iter_bootstrap_samples`.

    Returns:
        ``{"mean": float, "std": float, "samples": list[float]}``, Spearman x 100 (``nan`` samples, from a
        constant input, propagate to mean / std).

    Raises:
        ValueError: lengths differ, or see :func:`iter_bootstrap_samples`.
    """
    sys_a = system.detach().cpu().double().numpy() if isinstance(system, torch.Tensor) else np.asarray(system)
    sys_a = sys_a.astype(np.float64)
    gold_a = np.asarray(gold, dtype=np.float64)
    q = np.asarray(query_ids)
    if not (sys_a.ndim == gold_a.ndim == q.ndim == 1) or not (len(sys_a) == len(gold_a) == len(q)):
        raise ValueError(
            f"system, gold and query_ids must be 1-D of equal length, got shapes {sys_a.shape}, "
            f"{gold_a.shape}, {q.shape}"
        )
    samples = [
        100.0 * spearman(sys_a[rows], gold_a[rows])
        for rows in iter_bootstrap_samples(query_groups(q), n_samples, seed, query_fraction)
    ]
    arr = np.asarray(samples, dtype=np.float64)
    return {"mean": float(arr.mean()), "std": float(arr.std()), "samples": samples}


def cxc_bootstrap_spearman(
    encode: EncodeFn,
    pairs: CxCPairs,
    n_samples: int = 1000,
    seed: int = 123,
    query_fraction: float = 0.5,
    batch_size: int | None = None,
) -> dict[str, Any]:
    """CxC-STS score of ``encode``: sampled Spearman bootstrap (see the module docstring).

    Args:
        encode: ``encode(list[str]) -> Tensor[n, D]``; called with every distinct caption once (sorted).
        pairs: :class:`cselab.data.cxc.CxCPairs` (``cselab.data.cxc.load_cxc``); ``id1`` gives the queries.
        n_samples: bootstrap samples (1000 in the papers).
        seed: the sampling seed (123 in the papers' protocol, docs/fidelity.md).
        query_fraction: fraction of the queries per sample (0.5).
        batch_size: see :func:`cselab.evaluation.sts.encode_pairs`.

    Returns:
        ``{"mean": float, "std": float, "samples": list[float]}``: Spearman x 100 of each sample, their mean
        and population std (PromCSE Table 2 reports mean +- std).

    Raises:
        ValueError: bad arguments or ``encode`` output (see :func:`cselab.evaluation.sts.encode_pairs`, :func:`iter_bootstrap_samples`).
    """
    system = encode_pairs(encode, pairs.text1, pairs.text2, batch_size)
    return bootstrap_spearman_from_scores(system, pairs.scores, pairs.id1, n_samples, seed, query_fraction)
