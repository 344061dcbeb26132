"""Contrastive losses.  ``build_loss(cfg)`` instantiates the class named by the config's ``_target_`` (a new loss is
its module + its ``conf/loss/*.yaml``); the built-in ones can also be named by ``name`` alone."""

from __future__ import annotations

from torch import nn

from cselab.losses.bml import InfoNCEWithBML
from cselab.losses.cot_infonce import CoTInfoNCE
from cselab.losses.energy_hinge import InfoNCEWithEnergyHinge
from cselab.losses.groups import GroupedLoss
from cselab.losses.infonce import InfoNCE

LOSSES: dict[str, type[nn.Module]] = {
    "infonce": InfoNCE,
    "cot_infonce": CoTInfoNCE,
    "infonce_eh": InfoNCEWithEnergyHinge,
    "sncse_bml": InfoNCEWithBML,
}


def build_loss(node: dict) -> nn.Module:
    """Instantiate a loss from ``{"_target_": "pkg.module.Class", "name": ..., "groups": G, **its arguments}``
    (``_target_`` absent: the built-in loss of that ``name``, :data:`LOSSES`).

    ``groups`` (default 1) > 1 wraps the loss in :class:`GroupedLoss` (each group of the batch its own
    negatives, losses averaged: CoT-BERT's official ``DataParallel`` step on one device).

    Raises:
        ValueError: unknown loss name (lists the known ones) or bad arguments (names the key).
    """
    args = dict(node)
    name = args.pop("name", "infonce")
    groups = args.pop("groups", 1)
    target = args.pop("_target_", None)
    if target is not None:
        from hydra.utils import get_class

        try:
            cls = get_class(target)
        except Exception as err:
            raise ValueError(f"loss._target_={target!r}: cannot import it ({err})") from err
    elif name in LOSSES:
        cls = LOSSES[name]
    else:
        raise ValueError(f"loss.name={name!r} without loss._target_: expected one of {sorted(LOSSES)}")
    try:
        loss = cls(**args)
    except TypeError as err:
        raise ValueError(f"loss={name}: bad arguments {sorted(args)} ({err})") from err
    return loss if int(groups) == 1 else GroupedLoss(loss, int(groups))
