"""Training throughput (samples, batches and FLOPs per second, MFU) measured without a device sync per batch."""

from __future__ import annotations

import time
from typing import Any

import torch
from lightning.pytorch.callbacks import ThroughputMonitor
from lightning.pytorch.utilities import rank_zero_only

from cselab.io.progress import is_logging_step


class LoggingStepThroughput(ThroughputMonitor):
    """Lightning's ``ThroughputMonitor`` whose clock is read on logging steps only.

    Lightning's monitor calls ``torch.cuda.synchronize()`` after EVERY training batch (so that ``perf_counter``
    sees the device's work), which stops the host from queueing the next step while the device runs this one.
    Here the batches, samples and FLOPs (``pl_module.flops_per_batch``, :class:`cselab.callbacks.flops.FlopCounter`) are
    summed on the host at every batch (no device value is read), and the device is synchronised and the clock read
    only on logging steps (:func:`cselab.io.progress.is_logging_step`): each window point covers the
    ``log_every_n_steps`` batches since the previous one, whose FLOPs it carries, so the rates (and MFU) are those of
    those batches, device time included.  ``window_size`` counts logging steps (at least 2).  Validation is
    measured as Lightning does.

    Args:
        batch_size_fn: examples of a batch (:func:`cselab.data.datamodule.batch_size`).
        **kwargs: ``ThroughputMonitor``'s (``window_size``, ``separator``, ``length_fn``).
    """

    def __init__(self, batch_size_fn, **kwargs: Any) -> None:
        super().__init__(batch_size_fn, **kwargs)
        self._pending_flops = 0
        self._flops_known = True

    @rank_zero_only
    def on_train_start(self, trainer, *_: Any) -> None:
        super().on_train_start(trainer)
        self._pending_flops, self._flops_known = 0, True

    @rank_zero_only
    def on_train_batch_end(self, trainer, pl_module, outputs: Any, batch: Any, *_: Any) -> None:
        stage = trainer.state.stage
        self._samples[stage] += self.batch_size_fn(batch)
        self._batches[stage] += 1
        if self.length_fn is not None:
            self._lengths[stage] += self.length_fn(batch)
        flops = getattr(pl_module, "flops_per_batch", None)
        if flops is None:
            self._flops_known = False
        else:
            self._pending_flops += int(flops)
        if trainer.fit_loop._should_accumulate() or not is_logging_step(trainer):
            return
        if trainer.strategy.root_device.type == "cuda":
            torch.cuda.synchronize()  # once per logging step: the clock covers the device's work
        self._throughputs[stage].update(
            time=time.perf_counter() - self._t0s[stage], batches=self._batches[stage], samples=self._samples[stage],
            lengths=None if self.length_fn is None else self._lengths[stage],
            flops=self._pending_flops if self._flops_known else None)
        self._pending_flops, self._flops_known = 0, True
        self._compute(trainer)
