"""The methods' optimizer: AdamW (eps 1e-8; fused per ``optim.fused``) with the linear schedule of
``transformers.get_linear_schedule_with_warmup`` (no warm-up and weight decay 0 in every official implementation),
and the gradient clipping that Lightning's mixed-precision plugin refuses for a fused optimizer."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from cselab.methods.checks import FUSED_CHOICES
from cselab.methods.nonfinite import honours_found_inf

#: devices with a fused AdamW kernel that honours ``found_inf`` (torch >= 2.4)
FUSED_DEVICES = ("cuda", "cpu")


def configure_adamw(module) -> dict:
    """``configure_optimizers`` of a :class:`~cselab.methods.base.ContrastiveMethod`: AdamW over its trainable
    parameters (eps 1e-8, ``optim.lr``, ``optim.weight_decay``; fused per ``optim.fused``, never under float16's
    GradScaler) + linear decay after ``optim.warmup_steps`` (if > 0) or ``optim.warmup_ratio`` x the total steps of
    warm-up, stepped every optimizer step.  A fused AdamW takes the non-finite policy's ``found_inf`` flag
    (:meth:`cselab.methods.nonfinite.NonFinitePolicy.attach`).

    Returns:
        Lightning's ``{"optimizer", "lr_scheduler": {"scheduler", "interval": "step"}}``.

    Raises:
        ValueError: ``optim.fused=true`` on a device without a fused AdamW, an unknown ``optim.fused``, or an
            unknown number of training steps (a streamed corpus without ``trainer.max_steps``).
    """
    from transformers import get_linear_schedule_with_warmup

    params = [p for p in module.parameters() if p.requires_grad]
    optim, trainer = module.optim, module.trainer
    fused = optim.get("fused", "auto")
    if fused == "auto" and getattr(trainer.precision_plugin, "scaler", None) is not None:
        fused = False  # float16's GradScaler: the unscale would happen inside the kernel, after clipping
    optimizer = torch.optim.AdamW(params, lr=optim["lr"], weight_decay=optim["weight_decay"], eps=1e-8,
                                  fused=fused_adamw(fused, params))
    module.nonfinite.attach(optimizer, module.device)
    steps = trainer.estimated_stepping_batches
    if steps == float("inf"):
        raise ValueError("the number of training steps is unknown (a streamed corpus): set trainer.max_steps")
    total = max(1, int(steps))
    warmup = int(optim["warmup_steps"] or 0) or int(optim["warmup_ratio"] * total)
    scheduler = get_linear_schedule_with_warmup(optimizer, warmup, total)
    return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def clip_fused(plugin, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None) -> bool:
    """Clip the gradients of a fused AdamW without a GradScaler (``bf16-mixed``, ``32-true``), as Lightning's base
    precision plugin clips them (``torch.nn.utils.clip_grad_norm_`` / ``clip_grad_value_``): its mixed-precision
    plugin refuses to clip for any fused optimizer (it assumes float16's GradScaler, which the fused kernel
    unscales), though without a scaler the gradients are the true ones.

    Returns:
        True when clipped here; False: the caller clips as Lightning does (another optimizer, or a scaler).
    """
    from lightning.pytorch.plugins.precision import Precision
    from lightning.pytorch.utilities import GradClipAlgorithmType

    if getattr(plugin, "scaler", None) is not None or not honours_found_inf(optimizer):
        return False
    algorithm = GradClipAlgorithmType(gradient_clip_algorithm or "norm")
    Precision.clip_gradients(plugin, optimizer, float(gradient_clip_val or 0.0), algorithm)
    return True


def fused_adamw(fused: str | bool, params: Sequence[torch.nn.Parameter]) -> bool:
    """``optim.fused`` resolved for ``params``: ``auto`` -> True when every parameter is a floating tensor on a
    device of :data:`FUSED_DEVICES`; ``true`` / ``false`` as given.

    Raises:
        ValueError: an unknown value, or ``true`` for parameters on a device without the fused kernel (names
            ``optim.fused``).
    """
    if fused not in FUSED_CHOICES:
        raise ValueError(f"optim.fused={fused!r}: expected auto, true or false")
    supported = bool(params) and all(p.device.type in FUSED_DEVICES and p.is_floating_point() for p in params)
    if fused == "auto":
        return supported
    if fused and not supported:
        devices = sorted({p.device.type for p in params})
        raise ValueError(f"optim.fused=true: the fused AdamW runs on {'/'.join(FUSED_DEVICES)} float parameters, "
                         f"these are on {devices}; set optim.fused=auto or false")
    return bool(fused)
