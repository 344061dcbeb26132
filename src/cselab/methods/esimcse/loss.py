"""InfoNCE with a queue of extra negatives (ESimCSE's momentum contrast, Wu et al. 2022 Eq. 3).

Official code (caskcsg/sentemb ``ESimCSE/esimcse/models.py``): the in-batch logits ``cos(z1_i, z2_j) / tau`` (:231)
and, once the queue holds embeddings (``pre_z1 != None``, from the second step on), the queue's logits
``cos(z1_i, q_k) / tau`` concatenated to the right (:244-248); cross-entropy with labels ``i`` (:241-242) -- the
loss returned is that one (:284-285).  Anchors ``z1`` are the untouched sentences, positives ``z2`` the repeated
ones; the queue rows are constants (computed under ``no_grad`` by the momentum encoder).
"""

from __future__ import annotations

import torch

from cselab.losses.infonce import InfoNCE, cosine_matrix


class QueueInfoNCE(InfoNCE):
    """InfoNCE whose logits get the queue's columns: ``[cos(z1, z2) | cos(z1, queue)] / tau``, labels ``i``.

    Args:
        temperature: tau > 0 (ESimCSE: 0.05, ``run.sh --temp``).
        hard_negative_weight: as :class:`InfoNCE` (unused by ESimCSE, whose views are two).

    Input ``z`` (B, V, D) and ``queue`` (Q, D) negatives, or None (no queue yet: plain InfoNCE), the method's
    extra loss input (:meth:`cselab.methods.esimcse.method.ESimCSE.loss_inputs`); output the scalar mean loss.

    Raises:
        ValueError: as :class:`InfoNCE`; a queue whose width is not D.
    """

    def logits(self, z: torch.Tensor, queue: torch.Tensor | None = None) -> torch.Tensor:
        """(B, B [+ B] + Q) logits: :meth:`InfoNCE.logits`, then the columns of ``queue`` (``models.py:247``)."""
        logits = super().logits(z)
        if queue is None or queue.shape[0] == 0:
            return logits
        if queue.shape[-1] != z.shape[-1]:
            raise ValueError(f"QueueInfoNCE: queue width {queue.shape[-1]} != embedding width {z.shape[-1]}")
        extra = cosine_matrix(z[:, 0], queue.to(z.device).detach()) / self.temperature
        return torch.cat([logits, extra.to(logits.dtype)], dim=1)


#: this folder's losses by name (:func:`cselab.methods.losses.loss_classes`)
LOSSES = {"infonce_queue": QueueInfoNCE}
