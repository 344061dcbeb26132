"""The embeddings the contrastive loss sees under DDP: ``negatives=global`` gathers every rank's batch."""

from __future__ import annotations

import lightning as L
import torch


def gather_embeddings(module: L.LightningModule, z: torch.Tensor, negatives: str = "global",
                      equal_sizes: bool = False) -> torch.Tensor:
    """The embeddings the loss sees: this rank's (B, V, D), or under DDP with ``negatives=global`` all ranks'.

    Args:
        z: (B, V, D) embeddings of this rank's batch (any float dtype; B may differ across ranks, e.g.
            the last batch of an epoch: the rows are padded for the collective and the padding dropped).

    Returns:
        (B, V, D) unchanged with one process, ``negatives=per_device`` or no Trainer attached; else the
        global batch (B_0 + ... + B_{W-1}, V, D), ranks in order, which requires grad through every rank.

    Why the gradients equal those of ONE process on the global batch (no rescaling needed):

    1. every rank computes the SAME loss L = loss(Z) on the same gathered Z (the loss is a mean over all
       N = sum_r B_r rows), so the logged value is the one-process value;
    2. Lightning's ``all_gather(sync_grads=True)`` is ``torch.distributed.nn.functional.all_gather``,
       whose backward hands each rank the SUM over ranks of the gradients w.r.t. its own slot:
       dL_1/dz_r + ... + dL_W/dz_r = W * dL/dz_r;
    3. DDP then AVERAGES parameter gradients over ranks:
       (1/W) sum_r W * dL/dz_r * dz_r/dtheta = sum_r dL/dz_r * dz_r/dtheta = dL/dtheta,
       the one-process gradient.  (The W x W redundant loss computations are (N x N) similarity
       matrices, negligible next to the encoder.)  ``tests/test_ddp.py`` checks loss and gradients
       against one process for InfoNCE (hard negatives), CoT-BERT's and PromCSE's losses.
    Since every rank sees the same loss, NaN/inf decisions (``on_nonfinite``) agree across ranks.

    ``per_device`` is CoT-BERT's official recipe (``torch.nn.DataParallel``: each replica's loss over
    its own 128, averaged): DDP's gradient average of per-rank losses gives the same.

    ``equal_sizes``: the DataModule guarantees every rank the same B at every step (a distributed sampler pads
    the epoch; the streamed corpus with ``even_ranks``): the embeddings are gathered at once.  Otherwise the ranks
    first exchange their B and read them on the host (one device sync per step).

    Raises:
        RuntimeError: from ``torch.distributed`` when a rank does not take part (all ranks must call it).
    """
    trainer = module._trainer
    if negatives != "global" or trainer is None or trainer.world_size <= 1:
        return z
    if equal_sizes:
        return module.all_gather(z, sync_grads=True).reshape(-1, *z.shape[1:])
    sizes = [int(s) for s in module.all_gather(torch.tensor(z.shape[0], device=z.device)).reshape(-1).tolist()]
    top = max(sizes)
    padded = z if z.shape[0] == top else torch.cat([z, z.new_zeros(top - z.shape[0], *z.shape[1:])])
    gathered = module.all_gather(padded, sync_grads=True)  # (W, top, V, D)
    if all(s == top for s in sizes):
        return gathered.reshape(-1, *z.shape[1:])
    return torch.cat([gathered[r, :s] for r, s in enumerate(sizes)])
