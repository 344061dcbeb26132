"""Contrastive losses.  ``build_loss({"name": ..., **kwargs})`` picks one by its config name."""

from __future__ import annotations

from torch import nn

from cselab.losses.cot_infonce import CoTInfoNCE
from cselab.losses.energy_hinge import InfoNCEWithEnergyHinge
from cselab.losses.groups import GroupedLoss
from cselab.losses.infonce import InfoNCE

LOSSES: dict[str, type[nn.Module]] = {
    "infonce": InfoNCE,
    "cot_infonce": CoTInfoNCE,
    "infonce_eh": InfoNCEWithEnergyHinge,
}


def build_loss(cfg: dict) -> nn.Module:
    """Instantiate a loss from ``{"name": <one of LOSSES>, "groups": G, **its arguments}``.

    ``groups`` (default 1) > 1 wraps the loss in :class:`GroupedLoss` (each group of the batch its own
    negatives, losses averaged: CoT-BERT's official ``DataParallel`` step on one device).

    Raises:
        ValueError: unknown loss name (lists the known ones) or bad arguments (names the key).
    """
    cfg = dict(cfg)
    name = cfg.pop("name", "infonce")
    groups = cfg.pop("groups", 1)
    if name not in LOSSES:
        raise ValueError(f"loss.name={name!r}: expected one of {sorted(LOSSES)}")
    try:
        loss = LOSSES[name](**cfg)
    except TypeError as err:
        raise ValueError(f"loss={name}: bad arguments {sorted(cfg)} ({err})") from err
    return loss if int(groups) == 1 else GroupedLoss(loss, int(groups))
