"""Projection heads applied on top of the sentence representation.

Source: SimCSE ``MLPLayer`` (Linear(D, D) + Tanh on [CLS]), reused by PromptBERT, CoT-BERT, DCPCSE and PromCSE
on their representation (PromptBERT: on ``h - h_hat``).
"""

from __future__ import annotations

import torch
from torch import nn

HEADS = ("none", "mlp")


class MLPHead(nn.Module):
    """SimCSE's MLP: ``tanh(W x + b)``, (..., D) -> (..., D)."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.activation = nn.Tanh()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.activation(self.dense(x))


def build_head(name: str, hidden_size: int) -> nn.Module | None:
    """``"mlp"`` -> :class:`MLPHead`; ``"none"`` -> None.  Raises ValueError on other names."""
    if name == "mlp":
        return MLPHead(hidden_size)
    if name == "none":
        return None
    raise ValueError(f"method.head={name!r}: expected one of {HEADS}")
