"""Geometry of sentence embeddings: anisotropy (PromptBERT Eq. 1), alignment and uniformity (Wang & Isola 2020).

* Anisotropy, PromptBERT Eq. 1 (after Ethayarajh 2019)::

      anisotropy(M) = | sum_i sum_{j != i} cos(M(s_i), M(s_j)) | / (n^2 - n)

  the mean cosine over ordered pairs of DISTINCT sentences (absolute value as printed in Eq. 1; it only matters
  when the mean is negative).  The paper uses 100,000 Wikipedia sentences.  The official ``cal_avg_cosine``
  averages ``cos(s_i, s)`` over ALL j, self-pairs included, i.e. ``(sum_{i != j} cos + n) / n^2`` (and takes
  the first 100,000 lines of wiki1m, lower-cased, 32 words at most); ``include_self=True`` gives that variant,
  which differs by ``(1 - a) / n`` -- 1e-5 at n = 100,000.
* Alignment and uniformity (Wang & Isola 2020, Eq. 4-5; as SimCSE Sec. 5 uses them), on L2-normalised
  embeddings f::

      alignment  = E_{(x, y) positive} || f(x) - f(y) ||_2^alpha                  (alpha = 2)
      uniformity = log E_{x, y i.i.d.} exp(-t || f(x) - f(y) ||_2^2)              (t = 2)

  Positive pairs: STS-B test pairs with gold score > 4.0; uniformity: every sentence of STS-B test
  (docs/fidelity.md).  Both are "lower is better".  The expectation in ``uniformity`` is over the n(n-1)/2 pairs of
  distinct rows (``torch.pdist``, as Wang & Isola's reference code).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

from cselab.data.sts import load_task

__all__ = ["anisotropy", "alignment", "uniformity", "align_uniform_stsb"]


def _check_2d(x: torch.Tensor, what: str, min_rows: int) -> torch.Tensor:
    if not isinstance(x, torch.Tensor) or x.dim() != 2:
        raise ValueError(f"{what}: expected a 2-D tensor (N, D), got {getattr(x, 'shape', type(x))}")
    if x.shape[0] < min_rows:
        raise ValueError(f"{what}: needs at least {min_rows} rows, got {x.shape[0]}")
    return x


def anisotropy(embeddings: torch.Tensor, include_self: bool = False) -> float:
    """Sentence-level anisotropy, PromptBERT Eq. 1: mean cosine over pairs i != j (absolute value).

    Computed exactly in O(N D) with float64: with unit rows u_i, ``sum_{i,j} cos = ||sum_i u_i||^2`` and the
    diagonal contributes ``sum_i ||u_i||^2`` (= N; an all-zero row has cosine 0 with everything).

    Args:
        embeddings: (N, D), N >= 2, any float dtype / device.
        include_self: also average the N self-pairs (cos = 1), dividing by N^2: the official
            ``cal_avg_cosine`` (module docstring).

    Returns:
        A float in [0, 1] (1 = all sentences point the same way).

    Raises:
        ValueError: not 2-D or fewer than 2 rows.
    """
    x = _check_2d(embeddings, "anisotropy", 2).detach().to(torch.float64)
    n = x.shape[0]
    u = F.normalize(x, dim=-1)
    total = float(u.sum(0).pow(2).sum())
    diag = float(u.pow(2).sum())
    if include_self:
        return abs(total) / (n * n)
    return abs(total - diag) / (n * n - n)


def alignment(x: torch.Tensor, y: torch.Tensor, alpha: float = 2.0, normalize: bool = True) -> float:
    """Wang & Isola's alignment: ``mean_i ||f(x_i) - f(y_i)||_2^alpha`` over positive pairs (x_i, y_i).

    Args:
        x, y: (N, D) embeddings of the two sides of N positive pairs, row i with row i.
        alpha: exponent (2 in SimCSE / Wang & Isola).
        normalize: L2-normalise the rows first (the definition assumes unit vectors).

    Returns:
        A float in [0, 2^alpha]; lower = positives closer.

    Raises:
        ValueError: shapes differ, not 2-D, or no pair.
    """
    _check_2d(x, "alignment x", 1)
    _check_2d(y, "alignment y", 1)
    if x.shape != y.shape:
        raise ValueError(f"alignment: x {tuple(x.shape)} and y {tuple(y.shape)} must have the same shape")
    x, y = x.detach().to(torch.float64), y.detach().to(torch.float64)
    if normalize:
        x, y = F.normalize(x, dim=-1), F.normalize(y, dim=-1)
    return float((x - y).norm(p=2, dim=1).pow(alpha).mean())


def uniformity(x: torch.Tensor, t: float = 2.0, normalize: bool = True, chunk_size: int = 4096) -> float:
    """Wang & Isola's uniformity: ``log mean_{i<j} exp(-t ||f(x_i) - f(x_j)||_2^2)``.

    Args:
        x: (N, D) embeddings, N >= 2.
        t: temperature (2 in SimCSE / Wang & Isola).
        normalize: L2-normalise the rows first.
        chunk_size: rows per block (memory is O(chunk_size * N)); the result does not depend on it.

    Returns:
        A float <= 0 (-4 for points spread uniformly on a high-dimensional sphere with t = 2); lower = more
        uniform.

    Raises:
        ValueError: not 2-D or fewer than 2 rows.
    """
    x = _check_2d(x, "uniformity", 2).detach().to(torch.float64)
    if normalize:
        x = F.normalize(x, dim=-1)
    n = x.shape[0]
    sq = x.pow(2).sum(1)
    # log-sum-exp over the upper triangle, blockwise
    logs: list[torch.Tensor] = []
    for start in range(0, n - 1, chunk_size):
        rows = x[start : start + chunk_size]
        d2 = (sq[start : start + chunk_size, None] + sq[None, :] - 2.0 * rows @ x.T).clamp_min(0.0)
        i = torch.arange(start, start + rows.shape[0], device=x.device)[:, None]
        j = torch.arange(n, device=x.device)[None, :]
        vals = (-t * d2)[j > i]
        if vals.numel():
            logs.append(torch.logsumexp(vals, dim=0))
    total = torch.logsumexp(torch.stack(logs), dim=0)
    return float(total - math.log(n * (n - 1) / 2))


def align_uniform_stsb(
    encode: Callable[[list[str]], torch.Tensor],
    data_dir: str | os.PathLike[str],
    threshold: float = 4.0,
    alpha: float = 2.0,
    t: float = 2.0,
    split: str = "test",
    unique: bool = True,
) -> dict[str, float]:
    """Alignment and uniformity of an encoder on STS-B (SimCSE Sec. 5 / Fig. 2 protocol; docs/fidelity.md).

    Args:
        encode: ``list[str] -> Tensor[N, D]``.
        data_dir: the data folder (see :func:`cselab.data.sts.load_task`).
        threshold: positive pairs are those with gold score STRICTLY greater than this (4.0).
        alpha, t: the exponents of :func:`alignment` / :func:`uniformity`.
        split: STS-B split (``test``).
        unique: uniformity over the distinct sentences (first occurrence order); ``False`` keeps duplicates
            (a repeated sentence then adds zero-distance pairs).

    Returns:
        ``{"alignment", "uniformity", "n_pairs" (positive pairs), "n_sentences" (uniformity sample)}``.

    Raises:
        FileNotFoundError: STS-B is missing; ValueError: no pair above the threshold, or ``encode`` returned
        the wrong number of rows.
    """
    pairs = load_task(data_dir, "stsb", split)[split]
    n_pairs = len(pairs)
    pos = [i for i, s in enumerate(pairs.scores) if s > threshold]
    if not pos:
        raise ValueError(f"STS-B {split}: no pair with gold score > {threshold}")
    everything: Sequence[str] = [*pairs.sent1, *pairs.sent2]
    if unique:
        sentences = list(dict.fromkeys(everything))
        where = {s: i for i, s in enumerate(sentences)}
        rows = [where[s] for s in everything]
    else:
        sentences, rows = list(everything), list(range(len(everything)))
    emb = encode(sentences)
    if emb.shape[0] != len(sentences):
        raise ValueError(f"encode returned {emb.shape[0]} rows for {len(sentences)} sentences")
    x = emb[torch.tensor([rows[i] for i in pos])]
    y = emb[torch.tensor([rows[n_pairs + i] for i in pos])]
    return {
        "alignment": alignment(x, y, alpha),
        "uniformity": uniformity(emb, t),
        "n_pairs": float(len(pos)),
        "n_sentences": float(len(sentences)),
    }
