"""A test callback (``+callbacks.signal_probe._target_=signal_probe.SignalAt``, with ``tests/`` on
``PYTHONPATH``): the process sends itself a signal at the end of one training step, as a batch scheduler's SIGTERM
or a Ctrl-C would arrive during training."""

from __future__ import annotations

import os
import signal

import lightning as L


class SignalAt(L.Callback):
    """Send ``signal_name`` (``SIGTERM`` | ``SIGINT``) to this process once ``trainer.global_step`` reaches
    ``step`` (at the end of that step's batch)."""

    def __init__(self, step: int, signal_name: str = "SIGTERM") -> None:
        self.step, self.signum, self.sent = int(step), signal.Signals[signal_name], False

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        if not self.sent and trainer.global_step >= self.step:
            self.sent = True
            os.kill(os.getpid(), self.signum)
