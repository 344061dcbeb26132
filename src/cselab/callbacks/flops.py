"""FLOPs of each training step for Lightning's ``ThroughputMonitor`` (``train/device/flops_per_sec``, MFU)."""

from __future__ import annotations

import contextlib
from typing import Any

import lightning as L
import torch


class FlopCounter(L.Callback):
    """Set ``pl_module.flops_per_batch`` for every training batch: its forward (the step up to the loss) counted by
    ``torch.utils.flop_counter`` once per distinct set of batch tensor shapes (padded width, bias rows, views), x3
    for forward + backward (the usual rule).  ``ThroughputMonitor`` reads the attribute after every batch; put this
    callback before it.  Under ``trainer.cached_step`` the count ends when the step calls
    ``pl_module.flops_forward_done`` (its first pass and loss: the model's forward; the second pass and the
    MLM auxiliary pass, made in the step's own backward passes, are not counted: the MLM pass's FLOPs are left out).

    Args:
        max_shapes: at most this many distinct batch shapes are counted (a counted step runs the counter's Python
            dispatch); a batch of a new shape beyond them keeps the last count.
    """

    def __init__(self, max_shapes: int = 4096) -> None:
        self.max_shapes = int(max_shapes)
        self.by_shape: dict[tuple, int] = {}
        self._counting: tuple[contextlib.ExitStack, Any, tuple] | None = None

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        key = tuple((k, tuple(v.shape)) for k, v in sorted(batch.items())
                    if isinstance(v, torch.Tensor)) if isinstance(batch, dict) else ()
        if key in self.by_shape or len(self.by_shape) >= self.max_shapes:
            pl_module.flops_per_batch = self.by_shape.get(key, getattr(pl_module, "flops_per_batch", None))
            return
        from torch.utils.flop_counter import FlopCounterMode

        # compiled code runs eagerly while counted: dynamo does not trace under a dispatch mode, and a frame it
        # skipped once it would never compile again (torch._dynamo.convert_frame); the stance leaves it alone
        modes = contextlib.ExitStack()  # left in reverse order (the counter, then the stance)
        modes.enter_context(torch.compiler.set_stance("force_eager"))
        self._counting = (modes, modes.enter_context(FlopCounterMode(display=False)), key)
        # the cached step (trainer.cached_step) ends its forward before its own backward passes: it calls this
        pl_module.flops_forward_done = lambda: self._stop(pl_module)

    def on_before_backward(self, trainer: L.Trainer, pl_module: L.LightningModule, loss: torch.Tensor) -> None:
        self._stop(pl_module)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        self._stop(pl_module)  # a skipped step (no backward) ends its count here

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        if self._counting is not None:
            self._counting[0].close()
            self._counting = None

    def _stop(self, pl_module: L.LightningModule) -> None:
        pl_module.flops_forward_done = None
        if self._counting is None:
            return
        modes, counter, key = self._counting
        modes.close()
        self._counting = None
        pl_module.flops_per_batch = self.by_shape[key] = 3 * int(counter.get_total_flops())
