"""Geometry of sentence embeddings: anisotropy, PromptBERT Eq. 1 (after Ethayarajh 2019).

The official ``--calc_anisotropy`` (PB ``evaluation.py:25-35``, ``cal_avg_cosine``) averages ``cos(s_i, s)`` over
ALL j for each i, self-pairs included, and returns the mean of those means::

    anisotropy(M) = sum_i sum_j cos(M(s_i), M(s_j)) / n^2                      (the default)

over the first 100,000 lines of wiki1m (lower-cased, 32 words at most: :func:`cselab.analysis.corpus.read_corpus`).
Eq. 1 as printed averages the ordered pairs of DISTINCT sentences and takes the absolute value
(``include_self=False``)::

    anisotropy(M) = | sum_i sum_{j != i} cos(M(s_i), M(s_j)) | / (n^2 - n)

The two differ by ``(1 - a) / n``: 1e-5 at n = 100,000.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from cselab.evaluation.align_uniform import check_2d


def anisotropy(embeddings: torch.Tensor, include_self: bool = True) -> float:
    """Sentence-level anisotropy: the mean cosine between the sentences' embeddings (module docstring).

    Computed exactly in O(N D) with float64: with unit rows u_i, ``sum_{i,j} cos = ||sum_i u_i||^2`` and the
    diagonal contributes ``sum_i ||u_i||^2`` (= N; an all-zero row has cosine 0 with everything).

    Args:
        embeddings: (N, D), N >= 2, any float dtype / device.
        include_self: True (default): the official ``cal_avg_cosine`` (PB ``evaluation.py:25-35``), the mean over
            all N^2 ordered pairs, self-pairs included; False: PromptBERT Eq. 1 as printed, the absolute
            mean over the N^2 - N pairs of distinct sentences.

    Returns:
        A float in [0, 1] (1 = all sentences point the same way; the official mean is ``||sum_i u_i||^2 / N^2``,
        never negative, so the absolute value of Eq. 1 changes nothing there).

    Raises:
        ValueError: not 2-D or fewer than 2 rows.
    """
    x = check_2d(embeddings, "anisotropy", 2).detach().to(torch.float64)
    n = x.shape[0]
    u = F.normalize(x, dim=-1)
    total = float(u.sum(0).pow(2).sum())
    diag = float(u.pow(2).sum())
    if include_self:
        return total / (n * n)
    return abs(total - diag) / (n * n - n)
