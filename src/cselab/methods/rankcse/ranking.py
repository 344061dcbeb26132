"""Listwise ranking distillation losses of RankCSE (Liu et al., ACL 2023): listNet and listMLE.

Transcribed line by line from the official code, perceptiveshawty/RankCSE ``rankcse/models.py``:

* :func:`listnet_loss` = ``ListNet.forward`` (models.py:73-77): the diagonal (each anchor's own positive) of both
  matrices set to -inf, a softmax over each row (dim -1) of the teacher's logits as the target distribution ``q``,
  the student's row log-softmax ``p``, and ``-(q * p).nansum() / q.nansum()`` -- the ``0 * -inf = nan`` diagonal
  terms dropped, and ``q.nansum()`` = the number of rows, so the mean over rows of the cross-entropy.
  ``ListNet.__init__`` (models.py:67-71) builds two temperature-scaled similarities (``tau2 / 2`` and ``tau2``)
  that ``forward`` never uses: the teacher's logits come scaled by ``tau2`` (trainers.py:508, 526-528) and the
  student's are the InfoNCE logits ``cos / temp`` (models.py:285).
* :func:`listmle_loss` = ``ListMLE.forward`` (models.py:89-109): the columns shuffled by one random permutation
  (tie resolution, ``torch.randperm`` on the CPU generator), the teacher's row sorted descending, the student's
  logits gathered in that order, the Plackett-Luce negative log-likelihood per row (log of the reversed cumulative
  sum of exp, max-shifted, ``+ 1e-7``) summed over the row and averaged over rows.  The diagonal is kept (no
  masking), and allRank's padding mask ``y_true == -1`` is kept as written.

Both take (N, N) logits, teacher first, as the official ``distillation_loss_fct(teacher, student)``; the weight
(official ``gamma_``) is applied by the caller (:class:`cselab.methods.rankcse.loss.RankCSELoss`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

#: official ``ListMLE.eps`` (models.py:87)
LISTMLE_EPS = 1e-7
#: allRank's padded-value indicator, kept by the official ListMLE (models.py:100)
PADDED_VALUE = -1


def _check(teacher: torch.Tensor, student: torch.Tensor) -> None:
    if teacher.dim() != 2 or teacher.shape != student.shape:
        raise ValueError(f"ranking loss: expected teacher and student logits of the same shape (N, N), got "
                         f"{tuple(teacher.shape)} and {tuple(student.shape)}")


def listnet_loss(teacher: torch.Tensor, student: torch.Tensor) -> torch.Tensor:
    """ListNet's top-1 cross-entropy between the teacher's and the student's row distributions, diagonal excluded.

    Args:
        teacher: (N, N) teacher logits, ``cos(t_i, t_j) / tau2`` (no gradient needed).
        student: (N, N) student logits, ``cos(z1_i, z2_j) / temp``.

    Returns:
        scalar: ``-sum_{i != j} softmax(teacher_i)_j * log_softmax(student_i)_j / N`` (official models.py:74-76).
        The inputs are not modified (the official fills the diagonals in place on its own copies).

    Raises:
        ValueError: the shapes differ or are not (N, N).
    """
    _check(teacher, student)
    p = F.log_softmax(student.clone().fill_diagonal_(float("-inf")), dim=-1)
    q = F.softmax(teacher.clone().fill_diagonal_(float("-inf")), dim=-1)
    return -(q * p).nansum() / q.nansum()


def listmle_loss(teacher: torch.Tensor, student: torch.Tensor,
                 permutation: torch.Tensor | None = None) -> torch.Tensor:
    """ListMLE: the negative log-likelihood of the teacher's ranking of each row under the student's
    Plackett-Luce model (official models.py:89-109).

    Args:
        teacher: (N, N) teacher logits (``y_true``).
        student: (N, N) student logits (``y_pred``).
        permutation: (N,) the column shuffle for random tie resolution; None draws ``torch.randperm(N)`` from the
            CPU generator, as the official (models.py:95).

    Returns:
        scalar: ``mean_i sum_k [log(sum_{l >= k} exp(s_{i,pi_l} - m_i) + 1e-7) - (s_{i,pi_k} - m_i)]`` with
        ``pi`` the teacher's descending order of row i and ``m_i`` the row max of the student's logits.

    Raises:
        ValueError: the shapes differ or are not (N, N), or ``permutation`` is not of length N.
    """
    _check(teacher, student)
    n = student.shape[-1]
    if permutation is None:
        permutation = torch.randperm(n)
    if permutation.shape != (n,):
        raise ValueError(f"listmle_loss: permutation of shape {tuple(permutation.shape)}, expected ({n},)")
    permutation = permutation.to(student.device)
    y_pred = student[:, permutation]
    y_true = teacher[:, permutation]
    y_true_sorted, indices = y_true.sort(descending=True, dim=-1)
    mask = y_true_sorted == PADDED_VALUE
    preds = torch.gather(y_pred, dim=1, index=indices)
    preds = preds.masked_fill(mask, float("-inf"))
    max_pred, _ = preds.max(dim=1, keepdim=True)
    shifted = preds - max_pred
    cumsums = torch.cumsum(shifted.exp().flip(dims=[1]), dim=1).flip(dims=[1])
    observation = torch.log(cumsums + LISTMLE_EPS) - shifted
    observation = observation.masked_fill(mask, 0.0)
    return observation.sum(dim=1).mean()


#: ``loss.ranking`` -> the loss function (official ``--distillation_loss``, models.py:158-163)
RANKING_LOSSES = {"listnet": listnet_loss, "listmle": listmle_loss}
