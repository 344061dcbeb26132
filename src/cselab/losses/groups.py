"""Loss groups: the batch split into groups whose losses see only their own rows as negatives, averaged.

This is what ``torch.nn.DataParallel`` computes when a model returns its loss, as CoT-BERT's official training
does (``code-for-BERT/train.py:30``: 2 GPUs, ``per_device_train_batch_size`` 128): ``DataParallel`` scatters the
batch of 256 into contiguous chunks (``Tensor.chunk``), each replica computes the loss over its own 128 rows,
and Hugging Face's ``Trainer`` averages the replicas' losses (``loss.mean()`` when ``n_gpu > 1``).  One device
with ``data.batch_size=256`` and ``loss.groups=2`` takes the same optimizer step (up to dropout masks).
"""

from __future__ import annotations

import torch
from torch import nn


class GroupedLoss(nn.Module):
    """``mean_g loss(z_g)`` over ``groups`` contiguous chunks of the batch.

    Args:
        loss: any loss of :mod:`cselab.losses` taking (B, V, D) embeddings.
        groups: number of groups G >= 1 (1: the loss itself).  The chunks are ``z.chunk(G)``: sizes
            ceil(B / G), the last one smaller (or fewer chunks), as ``DataParallel`` scatters.

    Shapes: ``z`` (B, V, D) -> scalar.

    Example:
        >>> loss = GroupedLoss(InfoNCE(temperature=0.05), groups=2)
        >>> loss(torch.randn(256, 2, 768))  # == (InfoNCE(z[:128]) + InfoNCE(z[128:])) / 2

    Raises:
        ValueError: ``groups < 1`` (names ``loss.groups``).
    """

    def __init__(self, loss: nn.Module, groups: int = 1) -> None:
        super().__init__()
        if int(groups) < 1:
            raise ValueError(f"loss.groups must be >= 1, got {groups}")
        self.loss = loss
        self.groups = int(groups)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        losses = [self.loss(chunk) for chunk in z.chunk(self.groups, dim=0)]
        return torch.stack(losses).mean()
