"""Alignment and uniformity (Wang & Isola 2020, Eq. 4-5), as SimCSE uses them (Sec. 5, Fig. 2), on STS-B pairs.

On L2-normalised embeddings f::

    alignment  = E_{(x, y) positive} || f(x) - f(y) ||_2^alpha                  (alpha = 2)
    uniformity = log E_{x, y i.i.d.} exp(-t || f(x) - f(y) ||_2^2)              (t = 2)

The reference code is Wang & Isola's ``align_loss`` / ``uniform_loss`` (SsnL/align_uniform@e256d47
``align_uniform/__init__.py:4-9``: ``(x - y).norm(p=2, dim=1).pow(alpha).mean()`` and
``torch.pdist(x, p=2).pow(2).mul(-t).exp().mean().log()``); SimCSE's repository ships no code for them (its
paper cites Wang & Isola).  Positive pairs: the STS pairs with gold score > 4.0; uniformity: every distinct
sentence of the split.  Both are "lower is better".  The expectation in ``uniformity`` is over the n(n-1)/2
pairs of distinct rows, as ``torch.pdist``.

One definition, two users: :func:`align_uniform_stsb` (a finished model, ``cselab analysis align-uniform``,
STS-B test) and :class:`cselab.callbacks.align_uniform.AlignUniform` (the trajectory during training, SimCSE
Fig. 2, STS-B dev).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from cselab.data.sts import STSPairs, load_task


def check_2d(x: torch.Tensor, what: str, min_rows: int) -> torch.Tensor:
    """``x`` when it is a 2-D tensor (N, D) with at least ``min_rows`` rows.

    Raises:
        ValueError: not a 2-D tensor, or too few rows (the message starts with ``what``).
    """
    if not isinstance(x, torch.Tensor) or x.dim() != 2:
        raise ValueError(f"{what}: expected a 2-D tensor (N, D), got {getattr(x, 'shape', type(x))}")
    if x.shape[0] < min_rows:
        raise ValueError(f"{what}: needs at least {min_rows} rows, got {x.shape[0]}")
    return x


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
    check_2d(x, "alignment x", 1)
    check_2d(y, "alignment y", 1)
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
    x = check_2d(x, "uniformity", 2).detach().to(torch.float64)
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


@dataclass(frozen=True)
class AlignUniformInputs:
    """What alignment and uniformity are measured on: the sentences to encode once, and the rows of the positive
    pairs among them.

    Attributes:
        sentences: the sentences encoded (the uniformity sample): every distinct sentence of the pairs in first
            occurrence order (a repeated sentence would add zero-distance pairs).
        left, right: row indices into ``sentences`` of the positive pairs' two sides (gold > ``threshold``).
    """

    sentences: tuple[str, ...]
    left: tuple[int, ...]
    right: tuple[int, ...]

    @classmethod
    def from_pairs(cls, pairs: STSPairs, threshold: float = 4.0) -> AlignUniformInputs:
        """The inputs of one STS split (SimCSE's protocol: positives are the pairs with gold STRICTLY above
        ``threshold``).

        Raises:
            ValueError: no pair above the threshold (names the split).
        """
        pos = [i for i, s in enumerate(pairs.scores) if s > threshold]
        if not pos:
            raise ValueError(f"STS {pairs.name}: no pair with gold score > {threshold}")
        where = {s: i for i, s in enumerate(dict.fromkeys([*pairs.sent1, *pairs.sent2]))}  # first occurrence order
        return cls(tuple(where), tuple(where[pairs.sent1[i]] for i in pos), tuple(where[pairs.sent2[i]] for i in pos))

    def measure(self, encode: Callable[[list[str]], torch.Tensor], alpha: float = 2.0,
                t: float = 2.0) -> dict[str, float]:
        """Encode :attr:`sentences` once and measure.

        Args:
            encode: ``list[str] -> Tensor[N, D]``.
            alpha, t: the exponents of :func:`alignment` / :func:`uniformity` (2 and 2).

        Returns:
            ``{"alignment", "uniformity", "n_pairs" (positive pairs), "n_sentences" (uniformity sample)}``.

        Raises:
            ValueError: ``encode`` returned the wrong number of rows.
        """
        emb = encode(list(self.sentences))
        if emb.shape[0] != len(self.sentences):
            raise ValueError(f"encode returned {emb.shape[0]} rows for {len(self.sentences)} sentences")
        x = emb[torch.tensor(self.left, dtype=torch.long)]
        y = emb[torch.tensor(self.right, dtype=torch.long)]
        return {"alignment": alignment(x, y, alpha), "uniformity": uniformity(emb, t),
                "n_pairs": float(len(self.left)), "n_sentences": float(len(self.sentences))}


def align_uniform_stsb(
    encode: Callable[[list[str]], torch.Tensor],
    data_dir: str | os.PathLike[str],
    threshold: float = 4.0,
    alpha: float = 2.0,
    t: float = 2.0,
    split: str = "test",
) -> dict[str, float]:
    """Alignment and uniformity of an encoder on STS-B (SimCSE Sec. 5 / Fig. 2 protocol; docs/fidelity.md).

    Args:
        encode: ``list[str] -> Tensor[N, D]``.
        data_dir: the data folder (see :func:`cselab.data.sts.load_task`).
        threshold: positive pairs are those with gold score STRICTLY greater than this (4.0).
        alpha, t: the exponents of :func:`alignment` / :func:`uniformity`.
        split: STS-B split (``test``; the training callback uses ``dev``).

    Returns:
        ``{"alignment", "uniformity", "n_pairs" (positive pairs), "n_sentences" (uniformity sample)}``.

    Raises:
        FileNotFoundError: STS-B is missing; ValueError: no pair above the threshold, or ``encode`` returned
        the wrong number of rows.
    """
    pairs = load_task(data_dir, "stsb", split)[split]
    return AlignUniformInputs.from_pairs(pairs, threshold).measure(encode, alpha, t)
