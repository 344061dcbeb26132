"""The methods' optimizer: AdamW (eps 1e-8; the update of transformers 4.2.1's AdamW by default, ``optim.adamw``;
fused per ``optim.fused``) with the linear schedule of ``transformers.get_linear_schedule_with_warmup`` (no warm-up
and weight decay 0 in every official implementation), and the gradient clipping that Lightning's mixed-precision
plugin refuses for a fused optimizer."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence

import torch

from cselab.methods.checks import FUSED_CHOICES
from cselab.methods.nonfinite import honours_found_inf

#: devices with a fused AdamW kernel that honours ``found_inf`` (torch >= 2.4)
FUSED_DEVICES = ("cuda", "cpu")


class TransformersAdamW(torch.optim.AdamW):
    """``torch.optim.AdamW`` (its fused, foreach or for-loop kernel) making the update of transformers 4.2.1's
    ``AdamW``, the optimizer of every official implementation: SimCSE, PromptBERT, CoT-BERT, DCPCSE, PromCSE and the
    SimCSE forks (DiffCSE, ESimCSE, SNCSE, RankCSE) pin ``transformers==4.2.1`` (their ``requirements.txt``) and train
    with its ``Trainer``, whose ``create_optimizer_and_scheduler`` builds ``transformers.AdamW``
    (``trainer.py:545-590``; ``adam_epsilon`` 1e-8, betas (0.9, 0.999): ``training_args.py:290-292``); PromptEOL's
    ``ft_llm.py:469-489`` (transformers of July 2023) leaves ``optim`` at its default then, ``adamw_hf``, the same
    class (4.31.0 ``training_args.py:1026``, ``optimization.py:468-474``).

    transformers adds epsilon to ``sqrt(v)`` before the bias correction (``optimization.py:344-355``)::

        p <- p - lr * sqrt(1 - beta2^t) / (1 - beta1^t) * m / (sqrt(v) + eps)

    torch adds it after: ``p <- p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)``, the same update
    with ``eps_t = eps / sqrt(1 - beta2^t)``.  Before each step this class sets each group's ``eps`` to that value (a
    float on the host: nothing is read from the device), so the two agree to rounding; the difference it removes is
    largest in the first steps and for small gradients (at t = 1, ``sqrt(v) = 0.032 |g|``: torch's epsilon is 32x
    smaller there).  The step ``t`` is counted per group (``transformers_steps``, saved with the optimizer's state):
    transformers counts it per parameter, which is the same count since every trainable parameter of a method gets a
    gradient at every step (``tests/test_contract.py::test_every_trainable_parameter_gets_a_gradient``).
    A step whose update the fused kernel skips on the device (``found_inf``, ``nonfinite.policy=skip``; the
    official Trainer never skips) is counted here but not in torch's state: from then on ``eps_t`` is that of the
    next step (a relative change below ``1 - beta2 = 1e-3`` of it, and none once ``beta2^t`` is negligible).

    Weight decay (0 in every official run) is transformers': decoupled and applied **after** the update, to the
    updated weights (``optimization.py:357-366``: ``p <- p - lr * weight_decay * p``), where torch applies it
    before (``p <- p * (1 - lr * weight_decay)``, then the update: a difference of ``lr * weight_decay`` times the
    update).  Torch's kernel runs with each group's decay set to 0 for the step, then one ``_foreach_add_`` a group
    subtracts ``lr * weight_decay * p`` from its parameters that have a gradient; a step the fused kernel skips on the
    device (``found_inf`` = 1) skips the decay too (the factor is computed on the device: nothing is read on the
    host).  The Trainer's groups (biases and LayerNorm weights not decayed) are :func:`decay_groups`.

    Args:
        params: the parameters (or groups) to optimize.
        lr, betas, eps, weight_decay, fused: as ``torch.optim.AdamW``; ``eps`` is transformers' epsilon.

    Raises:
        ValueError: as ``torch.optim.AdamW`` (a negative ``lr`` or ``eps``, ``fused`` on an unsupported device).
    """

    def __init__(self, params: Iterable[torch.nn.Parameter] | Iterable[dict], lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0,
                 fused: bool | None = None) -> None:
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, fused=fused)
        for group in self.param_groups:
            group.setdefault("transformers_eps", group["eps"])
            group.setdefault("transformers_steps", 0)

    def step(self, closure: Callable[[], torch.Tensor] | None = None) -> torch.Tensor | None:
        """One update: ``closure`` first (Lightning's: the forward, backward and the hooks before the update),
        then each group's ``eps`` for this step, then torch's update."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            if "transformers_steps" not in group:  # a state saved by torch.optim.AdamW (resume.allow_changed)
                group["transformers_eps"] = group["eps"]
                group["transformers_steps"] = _torch_steps(self, group)
            group["transformers_steps"] += 1
            beta2 = group["betas"][1]
            group["eps"] = group["transformers_eps"] / math.sqrt(1.0 - beta2 ** group["transformers_steps"])
        decays = [(group, group["weight_decay"]) for group in self.param_groups if group["weight_decay"]]
        try:
            for group, _ in decays:
                group["weight_decay"] = 0.0  # torch's decay (before the update) off: transformers' after it
            super().step()
        finally:
            for group, weight_decay in decays:
                group["weight_decay"] = weight_decay
        for group, weight_decay in decays:
            self._decay_after_update(group, weight_decay)
        return loss

    @torch.no_grad()
    def _decay_after_update(self, group: dict, weight_decay: float) -> None:
        """transformers 4.2.1 ``optimization.py:357-366``: ``p.data.add_(p.data, alpha=-lr * weight_decay)`` on
        each updated parameter of ``group`` (those with a gradient), the same operation; skipped with the update
        when the fused kernel's ``found_inf`` is set (then ``p + (-rate * (1 - found_inf)) * p``, the factor a
        device tensor: nothing read on the host)."""
        params = [p for p in group["params"] if p.grad is not None]
        if not params:
            return
        rate = group["lr"] * weight_decay
        found_inf = getattr(self, "found_inf", None)
        if found_inf is None or not group.get("fused"):
            torch._foreach_add_(params, params, alpha=-rate)
            return
        for device, on_device in _by_device(params).items():
            factor = (found_inf.to(device=device, dtype=torch.float64) - 1.0) * rate  # -rate, or 0 when skipped
            torch._foreach_add_(on_device, torch._foreach_mul(on_device, factor))


def _by_device(params: Sequence[torch.Tensor]) -> dict[torch.device, list[torch.Tensor]]:
    """``params`` grouped by device, in order (``_foreach_mul`` by a 0-d tensor takes tensors of its device)."""
    grouped: dict[torch.device, list[torch.Tensor]] = {}
    for p in params:
        grouped.setdefault(p.device, []).append(p)
    return grouped


def _torch_steps(optimizer: torch.optim.Optimizer, group: dict) -> int:
    """The steps torch's state counts for ``group`` (its first parameter with a state; 0 if none): read once, when
    a state saved by ``torch.optim.AdamW`` is continued by :class:`TransformersAdamW`."""
    for p in group["params"]:
        step = optimizer.state.get(p, {}).get("step")
        if step is not None:
            return int(step)
    return 0


def configure_adamw(module) -> dict:
    """``configure_optimizers`` of a :class:`~cselab.methods.base.ContrastiveMethod`: AdamW over its trainable
    parameters (eps 1e-8, ``optim.lr``, ``optim.weight_decay``; ``optim.adamw``: ``transformers`` =
    :class:`TransformersAdamW`, the official code's update, with the HF Trainer's weight-decay groups
    (:func:`decay_groups`), or ``torch`` = ``torch.optim.AdamW`` over one group; fused per ``optim.fused``, never
    under float16's GradScaler) + linear decay after ``optim.warmup_steps`` (if > 0) or ``optim.warmup_ratio`` x
    the total steps of warm-up, stepped every optimizer step.  A fused AdamW takes the non-finite policy's ``found_inf`` flag
    (:meth:`cselab.methods.nonfinite.NonFinitePolicy.attach`).

    Returns:
        Lightning's ``{"optimizer", "lr_scheduler": {"scheduler", "interval": "step"}}``.

    Raises:
        ValueError: ``optim.fused=true`` on a device without a fused AdamW, an unknown ``optim.fused``, or an
            unknown number of training steps (a streamed corpus without ``trainer.max_steps``).
    """
    from transformers import get_linear_schedule_with_warmup

    named = [(name, p) for name, p in module.named_parameters() if p.requires_grad]
    params = [p for _, p in named]
    optim, trainer = module.optim, module.trainer
    fused = optim.get("fused", "auto")
    if fused == "auto" and getattr(trainer.precision_plugin, "scaler", None) is not None:
        fused = False  # float16's GradScaler: the unscale would happen inside the kernel, after clipping
    # (optim.adamw checked with the config: cselab.methods.checks.check_training)
    official = optim["adamw"] == "transformers"  # (the method's optim holds every key: OPTIM_DEFAULTS)
    adamw = TransformersAdamW if official else torch.optim.AdamW
    groups = decay_groups(named, optim["weight_decay"]) if official and optim["weight_decay"] else params
    optimizer = adamw(groups, lr=optim["lr"], weight_decay=optim["weight_decay"], eps=1e-8,
                      fused=fused_adamw(fused, params))
    module.nonfinite.attach(optimizer, module.device)
    steps = trainer.estimated_stepping_batches
    if steps == float("inf"):
        raise ValueError("the number of training steps is unknown (a streamed corpus): set trainer.max_steps")
    total = max(1, int(steps))
    warmup = int(optim["warmup_steps"] or 0) or int(optim["warmup_ratio"] * total)
    scheduler = get_linear_schedule_with_warmup(optimizer, warmup, total)
    return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


#: parameter names the HF Trainer leaves out of weight decay: a name containing one of these (transformers 4.2.1
#: ``trainer.py:553-562``)
NO_DECAY = ("bias", "LayerNorm.weight")


def decay_groups(named: Sequence[tuple[str, torch.nn.Parameter]], weight_decay: float) -> list[dict]:
    """The HF Trainer's two parameter groups (``optim.weight_decay`` > 0 with ``optim.adamw=transformers``): every
    parameter whose name holds no :data:`NO_DECAY` entry decays by ``weight_decay``; biases and LayerNorm weights
    (BERT's and RoBERTa's ``LayerNorm``) do not (``no_decay: True``; a decoder's norms are named otherwise, and
    PromptEOL trains LoRA matrices only).  An empty group is left out.

    Returns:
        ``[{"params", "weight_decay"}, {"params", "weight_decay": 0.0, "no_decay": True}]``.
    """
    spared = {name for name, _ in named if any(nd in name for nd in NO_DECAY)}
    groups = [{"params": [p for name, p in named if name not in spared], "weight_decay": weight_decay},
              {"params": [p for name, p in named if name in spared], "weight_decay": 0.0, "no_decay": True}]
    return [g for g in groups if g["params"]]


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
