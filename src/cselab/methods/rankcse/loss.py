"""RankCSE's loss (Liu et al., ACL 2023): InfoNCE + ranking consistency + ranking distillation from teachers.

Official code, perceptiveshawty/RankCSE ``rankcse/models.py`` ``cl_forward`` (lines 264-294), for the unsup
(dropout) views z1, z2 (N, D) and the teachers' logits T (N, N) (:mod:`cselab.methods.rankcse.teachers`):

    S = cos(z1_i, z2_j) / temp                                   (models.py:264, Similarity, temp 0.05)
    L_infoNCE = cross_entropy(S, labels=i)                        (models.py:270-282)
    L_rank = gamma * {listnet|listmle}(T, S)                      (models.py:285-286, :mod:`cselab.methods.rankcse.ranking`)
    L_cons = Divergence(softmax(S).clamp(1e-7), softmax(S').clamp(1e-7)),  S' = cos(z2_i, z1_j) / temp
                                                                  (models.py:289-291)
    loss = L_infoNCE + L_cons + L_rank                            (models.py:294)

The consistency term is the official ``Divergence.forward`` (models.py:58-61) as written:
``m = (0.5 * (p + q)).log().clamp(min=1e-7)`` clamps the LOG of a probability (<= 0) at +1e-7, so ``m`` is the
constant 1e-7 (no gradient) and ``KLDivLoss(m, p.log())`` (batchmean, log_target) is ``sum(p log p) / N - 1e-7 *
sum(p) / N``: the term is minus the mean row entropy of the two softmaxes (minus 1e-7), not the paper's
Jensen-Shannon divergence.  ``consistency="official"`` (default, the code) computes exactly that;
``consistency="js"`` is the paper's JS divergence (Eq. 4) with ``m`` the mixture.  Its weight: the official passes
``--beta_`` to ``Divergence`` but ``forward`` never reads it (models.py:52-61), so the code's weight is 1;
``consistency_weight`` (default 1.0) is the paper's beta.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import nn

from cselab.losses.infonce import cosine_matrix
from cselab.methods.rankcse.ranking import RANKING_LOSSES, listmle_loss, listnet_loss

#: official ``Divergence.eps`` and the softmax clamp of ``cl_forward`` (models.py:55, 291)
CONSISTENCY_EPS = 1e-7
CONSISTENCIES = ("official", "js", "none")


def consistency_loss(p_logits: torch.Tensor, q_logits: torch.Tensor, kind: str = "official") -> torch.Tensor:
    """The ranking-consistency term between two (N, N) logit matrices (softmax over each row, clamped at 1e-7).

    ``official``: ``Divergence.forward`` as written (models.py:58-61, the log-clamp: minus the mean row entropy);
    ``js``: the paper's Jensen-Shannon divergence ``0.5 (KL(p || m) + KL(q || m))``, ``m = (p + q) / 2``, each KL
    summed over a row and averaged over rows.

    Raises:
        ValueError: ``kind`` is neither ``official`` nor ``js``.
    """
    if kind not in ("official", "js"):
        raise ValueError(f"consistency_loss: kind={kind!r}, expected 'official' or 'js' (loss.consistency=none "
                         "leaves the term out)")
    p = p_logits.softmax(dim=-1).clamp(min=CONSISTENCY_EPS)
    q = q_logits.softmax(dim=-1).clamp(min=CONSISTENCY_EPS)
    p, q = p.view(-1, p.size(-1)), q.view(-1, q.size(-1))
    m = (0.5 * (p + q)).log()
    if kind == "official":
        m = m.clamp(min=CONSISTENCY_EPS)
    kl_p = F.kl_div(m, p.log(), reduction="batchmean", log_target=True)
    kl_q = F.kl_div(m, q.log(), reduction="batchmean", log_target=True)
    return 0.5 * (kl_p + kl_q)


class RankCSELoss(nn.Module):
    """InfoNCE + consistency + ranking distillation (official ``cl_forward``, models.py:264-294).

    Args:
        temperature: the student's temperature ``temp`` (official default 0.05, train.py:135); the same logits are
            the InfoNCE's and the ranking loss's student scores (models.py:285).
        ranking: ``listnet`` | ``listmle`` (official ``--distillation_loss``).
        ranking_weight: gamma (official ``--gamma_``: 1.0 in run_rankcse.sh:32, default 0.10 in train.py:126).
        consistency: ``official`` | ``js`` | ``none`` (see the module docstring).
        consistency_weight: beta (the official code's effective weight is 1, see the module docstring).

    ``forward(z, teacher, permutation=None)``: ``z`` (N, 2, D) the two dropout views, ``teacher`` (N, N) the
    teachers' combined logits (row i: anchor i against every sentence j), ``permutation`` (N,) listMLE's column
    shuffle (None: drawn); returns the scalar loss.  :meth:`terms` returns the parts.

    Raises:
        ValueError: temperature <= 0, an unknown ranking / consistency, a negative weight, views other than 2,
            N < 2, or a teacher matrix that is not (N, N).
    """

    def __init__(self, temperature: float = 0.05, ranking: str = "listnet", ranking_weight: float = 1.0,
                 consistency: str = "official", consistency_weight: float = 1.0) -> None:
        super().__init__()
        if temperature <= 0:
            raise ValueError(f"loss.temperature must be > 0, got {temperature}")
        if ranking not in RANKING_LOSSES:
            raise ValueError(f"loss.ranking={ranking!r}: expected one of {sorted(RANKING_LOSSES)}")
        if consistency not in CONSISTENCIES:
            raise ValueError(f"loss.consistency={consistency!r}: expected one of {list(CONSISTENCIES)}")
        for key, value in (("ranking_weight", ranking_weight), ("consistency_weight", consistency_weight)):
            if value < 0:
                raise ValueError(f"loss.{key} must be >= 0, got {value}")
        self.temperature = float(temperature)
        self.ranking = ranking
        self.ranking_weight = float(ranking_weight)
        self.consistency = consistency
        self.consistency_weight = float(consistency_weight)

    def terms(self, z: torch.Tensor, teacher: torch.Tensor,
              permutation: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """``{"infonce", "consistency", "ranking", "loss"}`` (scalars; the weights applied in ``loss`` only);
        ``permutation``: listMLE's column shuffle (None: drawn, :func:`cselab.methods.rankcse.ranking.listmle_loss`)."""
        if z.dim() != 3 or z.shape[1] != 2:
            raise ValueError(f"RankCSE expects z of shape (N, 2, D) (unsup dropout views), got {tuple(z.shape)}")
        n = z.shape[0]
        if n < 2:
            raise ValueError(f"RankCSE needs a batch of at least 2 (in-batch negatives), got {n}")
        if teacher.shape != (n, n):
            raise ValueError(f"RankCSE: the teachers' logits are {tuple(teacher.shape)}, expected ({n}, {n}) for "
                             f"{n} sentences")
        z1, z2 = z[:, 0], z[:, 1]
        logits = cosine_matrix(z1, z2) / self.temperature
        infonce = F.cross_entropy(logits, torch.arange(n, device=z.device))
        teacher = teacher.to(logits.dtype)
        if self.ranking == "listmle":
            ranking = listmle_loss(teacher, logits, permutation)
        else:
            ranking = listnet_loss(teacher, logits)
        if self.consistency == "none":
            consistency = logits.new_zeros(())
        else:  # models.py:290: cos(z2_i, z1_j) / temp, the transpose of the InfoNCE logits
            consistency = consistency_loss(logits, cosine_matrix(z2, z1) / self.temperature, self.consistency)
        loss = infonce + self.consistency_weight * consistency + self.ranking_weight * ranking
        return {"infonce": infonce, "consistency": consistency, "ranking": ranking, "loss": loss}

    def forward(self, z: torch.Tensor, teacher: torch.Tensor,
                permutation: torch.Tensor | None = None) -> torch.Tensor:
        return self.terms(z, teacher, permutation)["loss"]


#: this folder's losses by name (:func:`cselab.methods.losses.loss_classes`): ``conf/loss/rankcse_listnet.yaml``
#: and ``rankcse_listmle.yaml``, the ranking loss and gamma of each
LOSSES = {"rankcse_listnet": functools.partial(RankCSELoss, ranking="listnet", ranking_weight=0.1),
          "rankcse_listmle": functools.partial(RankCSELoss, ranking="listmle", ranking_weight=1.0)}
