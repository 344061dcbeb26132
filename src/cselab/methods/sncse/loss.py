"""SNCSE's objective: InfoNCE over the two template views plus the Bidirectional Margin Loss (BML) on the soft
negative (Wang and Dou 2023, Eq. 3-5).

Source: Sense-GVT/SNCSE ``SNCSE/simcse/models.py:144-159`` (``cl_forward``).  With the anchor z1 (template 1),
the positive z2 (template 2) and the soft negative z3 (the negated sentence in template 2), each (B, D):

    L_InfoNCE = cross_entropy(cos(z1_i, z2_j) / tau, labels=i)            (:145-149; z3 is NOT a negative here)
    delta_i   = cos(z1_i, z3_i) - cos(z1_i, z2_i)                          (:154-156)
    L_BML     = mean_i relu(delta_i + alpha) + relu(-delta_i - beta)       (:157-158)
    L         = L_InfoNCE + lambda * L_BML                                 (:159)

so BML keeps the soft negative's cosine between ``beta`` and ``alpha`` below the positive's:
``-beta <= delta <= -alpha``.  Official values (``train_SNCSE.py:363-369``): alpha 0.1, beta 0.3, lambda 1e-3 for
BERT and 5e-4 for RoBERTa; tau 0.05 (``train_SNCSE.sh``).  The cosines are ``torch.cosine_similarity`` (eps 1e-8),
computed in float32 as :func:`cselab.losses.infonce.cosine_matrix`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from cselab.losses.infonce import InfoNCE


def bidirectional_margin(z: torch.Tensor, alpha: float, beta: float) -> torch.Tensor:
    """BML (``models.py:154-158``): ``mean relu(delta + alpha) + relu(-delta - beta)``, delta = cos(z1, z3) -
    cos(z1, z2); ``z`` (B, 3, D) -> scalar (float32, or float64 for float64 input).  (The shape comes checked by
    :meth:`InfoNCEWithBML.forward`.)
    """
    z = z.to(torch.promote_types(z.dtype, torch.float32))
    positive = F.cosine_similarity(z[:, 0], z[:, 1], dim=1)
    soft = F.cosine_similarity(z[:, 0], z[:, 2], dim=1)
    delta = soft - positive
    return (torch.relu(delta + alpha) + torch.relu(-delta - beta)).mean()


class InfoNCEWithBML(InfoNCE):
    """SNCSE's loss (module docstring): InfoNCE on (anchor, positive) + ``bml_weight`` x BML on the soft negative.

    Args:
        temperature: tau > 0 of the InfoNCE term (0.05).
        alpha: BML's lower margin (0.1): the soft negative at least ``alpha`` below the positive.
        beta: BML's upper margin (0.3): at most ``beta`` below; ``beta >= alpha``.
        bml_weight: lambda (official 1e-3 BERT, 5e-4 RoBERTa).
        soft_negative_in_infonce: False (official): the soft negative is not in the InfoNCE denominator; True adds
            the (B, B) block cos(z1_i, z3_j) / tau as SimCSE's hard negatives (the official code's commented-out
            "negative loss" variant, ``models.py:170-178``, took only the diagonal; an ablation switch).

    Input: ``z`` (B, 3, D): anchor, positive, soft negative.  Output: scalar loss.

    Raises:
        ValueError: temperature <= 0, alpha > beta, a negative weight, or ``z`` not (B, 3, D) with B >= 2.
    """

    def __init__(self, temperature: float = 0.05, alpha: float = 0.1, beta: float = 0.3, bml_weight: float = 1e-3,
                 soft_negative_in_infonce: bool = False) -> None:
        super().__init__(temperature=temperature)
        if float(alpha) > float(beta):
            raise ValueError(f"loss.alpha={alpha} > loss.beta={beta}: BML needs alpha <= beta")
        if float(bml_weight) < 0:
            raise ValueError(f"loss.bml_weight={bml_weight}: expected >= 0")
        self.alpha, self.beta, self.bml_weight = float(alpha), float(beta), float(bml_weight)
        self.soft_negative_in_infonce = bool(soft_negative_in_infonce)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        if z.dim() != 3 or z.shape[1] != 3:
            raise ValueError(f"SNCSE's loss expects z of shape (B, 3, D) (anchor, positive, soft negative), got "
                             f"{tuple(z.shape)}: use method=sncse (its data rows carry the soft negatives)")
        infonce = super().forward(z if self.soft_negative_in_infonce else z[:, :2])
        return infonce + self.bml_weight * bidirectional_margin(z, self.alpha, self.beta)


#: this folder's losses by name (:func:`cselab.methods.losses.loss_classes`)
LOSSES = {"sncse_bml": InfoNCEWithBML}
