"""The contrastive losses that several methods share (a loss only one method uses lives in its folder,
``cselab/methods/<name>/loss.py``).  :func:`cselab.methods.losses.build_loss` builds any loss from its config:
``_target_``, or its ``name`` alone (:data:`LOSSES` here, plus each method folder's ``LOSSES``)."""

from __future__ import annotations

from torch import nn

from cselab.losses.cot_infonce import CoTInfoNCE
from cselab.losses.energy_hinge import InfoNCEWithEnergyHinge
from cselab.losses.infonce import InfoNCE

#: the shared losses by name (``loss.name``)
LOSSES: dict[str, type[nn.Module]] = {
    "infonce": InfoNCE,
    "cot_infonce": CoTInfoNCE,
    "infonce_eh": InfoNCEWithEnergyHinge,
}

