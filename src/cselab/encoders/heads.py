"""Projection heads applied on top of the sentence representation.

Source: SimCSE ``MLPLayer`` (Linear(D, D) + Tanh on [CLS]), reused by PromptBERT, CoT-BERT, DCPCSE and PromCSE
on their representation (PromptBERT: on ``h - h_hat``).
"""

from __future__ import annotations

import torch
from torch import nn

HEADS = ("none", "mlp", "mlm_transform")


class MLPHead(nn.Module):
    """SimCSE's MLP: ``tanh(W x + b)``, (..., D) -> (..., D)."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.activation = nn.Tanh()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.activation(self.dense(x))


class MLMTransformHead(nn.Module):
    """BERT's MLM-head transform: ``LayerNorm(GELU(W x + b))``, (..., D) -> (..., D).

    PromptBERT's official sup BERT head (METHODS.md), applied as ``head(h) - head(h_hat)`` at train and test;
    freshly initialised (N(0, 0.02) weights, zero bias, unit LayerNorm) like a new module of the official model.
    """

    def __init__(self, hidden_size: int, layer_norm_eps: float = 1e-12) -> None:
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.activation = nn.GELU()
        self.LayerNorm = nn.LayerNorm(hidden_size, eps=layer_norm_eps)
        nn.init.normal_(self.dense.weight, std=0.02)
        nn.init.zeros_(self.dense.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.activation(self.dense(x)))


def build_head(name: str, hidden_size: int) -> nn.Module | None:
    """``"mlp"`` -> :class:`MLPHead`; ``"mlm_transform"`` -> :class:`MLMTransformHead`; ``"none"`` -> None.

    Raises:
        ValueError: other names (lists the known ones).
    """
    if name == "mlp":
        return MLPHead(hidden_size)
    if name == "mlm_transform":
        return MLMTransformHead(hidden_size)
    if name == "none":
        return None
    raise ValueError(f"method.head={name!r}: expected one of {HEADS}")
