"""The global RNG states (torch, CUDA, numpy, Python) in every checkpoint, restored when a fit resumes.

Lightning saves no RNG state; without it a resumed run draws other dropout masks than an uninterrupted one.
"""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
from lightning.fabric.utilities.seed import _collect_rng_states, _set_rng_states


class RNGState(L.Callback):
    """Save the RNG states with each checkpoint (``checkpoint["callbacks"]["RNGState"]``) and restore them when
    ``fit`` resumes from it.

    The states are rank 0's; under DDP every rank starts from the same seed, so they are every rank's.  Lightning
    restores callback states only for ``fit``: loading a checkpoint to test or to encode leaves the RNG alone.
    A checkpoint written on a machine with another number of GPUs restores the CPU generators only.
    """

    def state_dict(self) -> dict[str, Any]:
        return {"rng_states": _collect_rng_states()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        states = state_dict.get("rng_states")
        if not states:
            return
        if "torch.cuda" in states and len(states["torch.cuda"]) != torch.cuda.device_count():
            states = {k: v for k, v in states.items() if k != "torch.cuda"}  # another machine: CPU RNG only
        _set_rng_states(states)
