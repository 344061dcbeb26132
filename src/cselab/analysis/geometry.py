"""Geometry of sentence embeddings: anisotropy, PromptBERT Eq. 1 (after Ethayarajh 2019)::

    anisotropy(M) = | sum_i sum_{j != i} cos(M(s_i), M(s_j)) | / (n^2 - n)

the mean cosine over ordered pairs of DISTINCT sentences (absolute value as printed in Eq. 1; it only matters
when the mean is negative).  The paper uses 100,000 Wikipedia sentences.  The official ``cal_avg_cosine``
averages ``cos(s_i, s)`` over ALL j, self-pairs included, i.e. ``(sum_{i != j} cos + n) / n^2`` (and takes
the first 100,000 lines of wiki1m, lower-cased, 32 words at most); ``include_self=True`` gives that variant,
which differs by ``(1 - a) / n`` -- 1e-5 at n = 100,000.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from cselab.evaluation.align_uniform import check_2d


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
    x = check_2d(embeddings, "anisotropy", 2).detach().to(torch.float64)
    n = x.shape[0]
    u = F.normalize(x, dim=-1)
    total = float(u.sum(0).pow(2).sum())
    diag = float(u.pow(2).sum())
    if include_self:
        return abs(total) / (n * n)
    return abs(total - diag) / (n * n - n)
