"""InfoNCE over in-batch negatives, with optional hard negatives.

Source: SimCSE ``cl_forward`` (Gao et al. 2021, Eq. 1 unsup and Eq. 5 sup).  With anchors z1, positives z2 and
optional hard negatives z3, each (B, D):

    logits = [cos(z1_i, z2_j) | cos(z1_i, z3_j)] / tau        (B, B) or (B, 2B)
    logits[i, B + i] += hard_negative_weight                  (log-weight on the own hard negative)
    loss = cross_entropy(logits, labels=i)

``hard_negative_weight`` is SimCSE's: a log-weight added to the diagonal of the z3 block (default 0).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def cosine_matrix(a: torch.Tensor, b: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """Pairwise cosine similarities (N, D) x (M, D) -> (N, M), computed in float32 (float64 inputs: float64)."""
    dtype = torch.promote_types(a.dtype, torch.float32)
    a, b = a.to(dtype), b.to(dtype)
    return (a @ b.T) / (a.norm(dim=-1, keepdim=True) * b.norm(dim=-1).unsqueeze(0)).clamp_min(eps)


class InfoNCE(nn.Module):
    """InfoNCE with in-batch negatives and optional hard negatives.

    Args:
        temperature: tau > 0 (paper default 0.05).
        hard_negative_weight: log-weight on each anchor's own hard negative (SimCSE default 0.0).

    Input: ``z`` (B, V, D) with V = 2 (anchor, positive) or 3 (anchor, positive, hard negative).
    Output: scalar mean loss.

    Raises:
        ValueError: temperature <= 0, V not in {2, 3}, or B < 2 (no negatives).
    """

    def __init__(self, temperature: float = 0.05, hard_negative_weight: float = 0.0) -> None:
        super().__init__()
        if temperature <= 0:
            raise ValueError(f"loss.temperature must be > 0, got {temperature}")
        self.temperature = float(temperature)
        self.hard_negative_weight = float(hard_negative_weight)

    def logits(self, z: torch.Tensor) -> torch.Tensor:
        """The (B, B) or (B, 2B) logits matrix of the docstring."""
        if z.dim() != 3 or z.shape[1] not in (2, 3):
            raise ValueError(f"InfoNCE expects z of shape (B, 2 or 3, D), got {tuple(z.shape)}")
        if z.shape[0] < 2:
            raise ValueError(f"InfoNCE needs a batch of at least 2 (in-batch negatives), got {z.shape[0]}")
        z1, z2 = z[:, 0], z[:, 1]
        logits = cosine_matrix(z1, z2) / self.temperature
        if z.shape[1] == 3:
            hard = cosine_matrix(z1, z[:, 2]) / self.temperature
            if self.hard_negative_weight:
                hard = hard + self.hard_negative_weight * torch.eye(hard.shape[0], device=hard.device)
            logits = torch.cat([logits, hard], dim=1)
        return logits

    def forward(self, z: torch.Tensor, *inputs: torch.Tensor | None, **named: torch.Tensor | None) -> torch.Tensor:
        """Cross-entropy of :meth:`logits` (``z`` and a subclass's extra inputs) on the diagonal."""
        return F.cross_entropy(self.logits(z, *inputs, **named), torch.arange(z.shape[0], device=z.device))
