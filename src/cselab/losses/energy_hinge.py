"""InfoNCE plus PromCSE's Energy-based Hinge (EH) loss (supervised, with hard negatives).

Source: Jiang et al. 2022, "Improved Universal Sentence Embeddings with Prompt-based Contrastive Learning and
Energy-based Learning" (PromCSE), Eq. 11-12, and the official code (``YJiangcm/PromCSE``, ``promcse/models.py``
``cl_forward`` with ``--do_eh_loss``).  With anchors h = z1, positives h+ = z2 and hard negatives h- = z3,
each (B, D):

    L_CL = InfoNCE(z)                                               (SimCSE sup, Eq. 8; see infonce.py)
    s_i^+ = cos(h_i, h+_i)
    s_i^- = max( max_{j != i} cos(h_i, h+_j),  max_j cos(h_i, h-_j) )   (most offending negative, Eq. 9)
    L_EH = mean_i max(0, m + s_i^- - s_i^+)                          (Eq. 11)
    L    = L_CL + lambda * L_EH                                      (Eq. 12; m = 0.2, lambda = 10)

The negative pool of row i is every OTHER row's positive plus EVERY hard negative (row i's own included).
Cosines are taken on the inputs (in the methods: the MLP outputs), without temperature and without
``hard_negative_weight`` (the official code builds the EH pool from the raw ``z1 . z3`` cosines before the
log-weight is added, and undoes the temperature: ``MarginRankingLoss(pos * tau, neg * tau)``).
"""

from __future__ import annotations

import torch

from cselab.losses.infonce import InfoNCE, cosine_matrix


class InfoNCEWithEnergyHinge(InfoNCE):
    """SimCSE-sup InfoNCE + ``eh_weight`` x the Energy-based Hinge loss of PromCSE (config name ``infonce_eh``).

    Args:
        temperature: tau > 0 of the InfoNCE term (paper default 0.05); the hinge uses plain cosines.
        hard_negative_weight: SimCSE's log-weight on each anchor's own hard negative, InfoNCE term only
            (default 0.0).
        margin: m >= 0 of Eq. 11 (paper default 0.2; Table 4 sweeps 0 ... 0.4).
        eh_weight: lambda of Eq. 12 (paper default 10.0).

    Input: ``z`` (B, 3, D): anchor, positive (entailment), hard negative (contradiction); B >= 2.
    Output: scalar mean loss ``InfoNCE(z) + eh_weight * hinge(z)``.

    Raises:
        ValueError: temperature <= 0, margin < 0, ``z`` not of shape (B, 3, D) (the hinge needs hard
            negatives: use ``loss=infonce`` for unsupervised / pair data), or B < 2.
    """

    def __init__(
        self,
        temperature: float = 0.05,
        hard_negative_weight: float = 0.0,
        margin: float = 0.2,
        eh_weight: float = 10.0,
    ) -> None:
        super().__init__(temperature=temperature, hard_negative_weight=hard_negative_weight)
        if margin < 0:
            raise ValueError(f"loss.margin must be >= 0 (PromCSE Eq. 11), got {margin}")
        self.margin = float(margin)
        self.eh_weight = float(eh_weight)

    @staticmethod
    def _check(z: torch.Tensor) -> None:
        if z.dim() != 3 or z.shape[1] != 3:
            raise ValueError(
                "the energy-based hinge loss (loss=infonce_eh) needs hard negatives: expected z of shape "
                f"(B, 3, D) = (anchor, positive, hard negative), got {tuple(z.shape)}; "
                "use loss=infonce for data without hard negatives"
            )
        if z.shape[0] < 2:
            raise ValueError(f"InfoNCEWithEnergyHinge needs a batch of at least 2, got {z.shape[0]}")

    def hinge_terms(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-row positive cosine s_i^+ and hardest-negative cosine s_i^- (float32), each (B,).

        Raises:
            ValueError: ``z`` is not (B, 3, D) with B >= 2.
        """
        self._check(z)
        z1, z2, z3 = z[:, 0], z[:, 1], z[:, 2]
        pos_matrix = cosine_matrix(z1, z2)  # (B, B)
        hard = cosine_matrix(z1, z3)  # (B, B)
        positive = pos_matrix.diagonal()
        eye = torch.eye(z.shape[0], dtype=torch.bool, device=z.device)
        others = pos_matrix.masked_fill(eye, float("-inf"))  # other rows' positives only
        negative = torch.cat([others, hard], dim=1).max(dim=1).values
        return positive, negative

    def hinge(self, z: torch.Tensor) -> torch.Tensor:
        """L_EH = mean_i max(0, margin + s_i^- - s_i^+): a scalar (float32)."""
        positive, negative = self.hinge_terms(z)
        return torch.clamp_min(self.margin + negative - positive, 0.0).mean()

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        self._check(z)
        return super().forward(z) + self.eh_weight * self.hinge(z)
