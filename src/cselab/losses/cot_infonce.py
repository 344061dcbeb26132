"""CoT-BERT's extended InfoNCE (Zhang et al. 2023, Eq. 6).

With anchors r_i, positives r+_i and hard negatives r-_i (each (B, D)) and a(u, v) = exp(cos(u, v) / tau):

    l_i = -log a(i, i+) / sum_j [ a(i, j+) + a(i, j-) + a(i+, j-) ]

i.e. one logits row per anchor = [cos(r_i, r+_j) | cos(r_i, r-_j) | cos(r+_i, r-_j)] / tau over j, and
cross-entropy on the diagonal of the first block.  Switches (CoT-BERT Table 4):

* ``positive_negative_term=false`` drops the a(i+, j-) block;
* ``use_negatives=false`` drops the negatives altogether (plain InfoNCE of anchor vs positive).
"""

from __future__ import annotations

import torch

from cselab.losses.infonce import InfoNCE, cosine_matrix


class CoTInfoNCE(InfoNCE):
    """Extended InfoNCE of CoT-BERT (:class:`InfoNCE`'s temperature check and cross-entropy on the diagonal).

    Args:
        temperature: tau > 0 (0.05).
        positive_negative_term: keep the a(i+, j-) block in the denominator (the paper's default).
        use_negatives: use the hard-negative template views at all.

    Input ``z`` (B, 3, D) = (anchor, positive, negative) views; (B, 2, D) is accepted when
    ``use_negatives=false``.  Output: scalar mean loss.

    Raises:
        ValueError: temperature <= 0, B < 2, or a view count that does not match the switches.
    """

    def __init__(self, temperature: float = 0.05, positive_negative_term: bool = True, use_negatives: bool = True):
        super().__init__(temperature)
        self.positive_negative_term = bool(positive_negative_term)
        self.use_negatives = bool(use_negatives)

    def logits(self, z: torch.Tensor) -> torch.Tensor:
        """(B, B), (B, 2B) or (B, 3B) logits as in the module docstring."""
        need = 3 if self.use_negatives else 2
        if z.dim() != 3 or z.shape[1] < need:
            raise ValueError(
                f"cot_infonce with use_negatives={self.use_negatives} expects z of shape (B, {need}, D), "
                f"got {tuple(z.shape)}"
            )
        if z.shape[0] < 2:
            raise ValueError(f"cot_infonce needs a batch of at least 2, got {z.shape[0]}")
        anchor, positive = z[:, 0], z[:, 1]
        blocks = [cosine_matrix(anchor, positive)]
        if self.use_negatives:
            negative = z[:, 2]
            blocks.append(cosine_matrix(anchor, negative))
            if self.positive_negative_term:
                blocks.append(cosine_matrix(positive, negative))
        return torch.cat(blocks, dim=1) / self.temperature
