"""Contrastive losses.  ``build_loss({"name": ..., **kwargs})`` picks one by its config name."""

from __future__ import annotations

from torch import nn

from cselab.losses.cot_infonce import CoTInfoNCE
from cselab.losses.energy_hinge import InfoNCEWithEnergyHinge
from cselab.losses.infonce import InfoNCE

LOSSES: dict[str, type[nn.Module]] = {
    "infonce": InfoNCE,
    "cot_infonce": CoTInfoNCE,
    "infonce_eh": InfoNCEWithEnergyHinge,
}


def build_loss(cfg: dict) -> nn.Module:
    """Instantiate a loss from ``{"name": <one of LOSSES>, **its arguments}``.

    Raises:
        ValueError: unknown loss name (lists the known ones) or bad arguments (names the key).
    """
    cfg = dict(cfg)
    name = cfg.pop("name", "infonce")
    if name not in LOSSES:
        raise ValueError(f"loss.name={name!r}: expected one of {sorted(LOSSES)}")
    try:
        return LOSSES[name](**cfg)
    except TypeError as err:
        raise ValueError(f"loss={name}: bad arguments {sorted(cfg)} ({err})") from err
