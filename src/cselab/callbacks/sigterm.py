"""Lightning's per-step SIGTERM broadcast under DDP, made on logging steps only.

Lightning 2.x's training loop (``lightning/pytorch/loops/training_epoch_loop.py``, ``_broadcast_sigterm_tensor``,
called at the start of every batch when ``torch.distributed`` is initialised) broadcasts rank 0's "received
SIGTERM" flag and reads it with ``.item()``: under NCCL a device tensor, so one host sync per step, which stops
the host from queueing the next step.  :class:`SigtermOnLoggingSteps` lets that broadcast and read happen on the
batches of logging steps only (``(total_batch_idx + 1) % log_every_n_steps == 0``, the same on every rank, so
every rank still takes part in the same collectives).  A SIGTERM (SLURM preemption: a grace period of seconds to
minutes before SIGKILL) is then acted on at most ``log_every_n_steps - 1`` steps later; Lightning's own handler
(the checkpoint on ``SIGUSR1`` requeue, ``docs/distributed.md``) is untouched.
"""

from __future__ import annotations

import lightning as L


class SigtermOnLoggingSteps(L.Callback):
    """Wrap the training loop's SIGTERM broadcast so that it runs on logging steps only (a no-op where the running
    Lightning has no such method)."""

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        loop = trainer.fit_loop.epoch_loop
        broadcast = getattr(loop, "_broadcast_sigterm_tensor", None)
        if broadcast is None or getattr(broadcast, "cselab_logging_steps", False):
            return

        def on_logging_steps() -> None:
            every = max(1, int(trainer.log_every_n_steps or 1))
            if (trainer.fit_loop.total_batch_idx + 1) % every == 0:
                broadcast()

        on_logging_steps.cselab_logging_steps = True
        loop._broadcast_sigterm_tensor = on_logging_steps
