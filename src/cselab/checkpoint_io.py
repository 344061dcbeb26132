"""Checkpoints for resuming: written atomically (temporary file, then ``os.replace``), and a ``last.ckpt``
that a resume never reads past an unfinished validation."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.pytorch.callbacks import ModelCheckpoint


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's ``TorchCheckpointIO`` writing to ``.<name>.tmp`` and renaming over the target.

    A process killed while saving leaves the previous checkpoint intact (plus at most a stray ``.tmp`` file,
    removed on the next save).  Local filesystems only; remote paths fall back to the plain writer.
    """

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        target = Path(path)
        if "://" in str(path):
            return super().save_checkpoint(checkpoint, path, storage_options)
        tmp = target.with_name(f".{target.name}.tmp")
        super().save_checkpoint(checkpoint, tmp, storage_options)
        os.replace(tmp, target)
        return None


class LastCheckpoint(ModelCheckpoint):
    """``checkpoints/last.ckpt`` for resuming: written at every validation and every ``every_n_train_steps``.

    Unlike a plain ``ModelCheckpoint(save_last=True, every_n_train_steps=N)``, it does not write at the end of
    a training step that a validation follows: Lightning resumes such a checkpoint *past* that validation
    (``TrainingEpochLoop.advance`` fast-forwards the validation progress of a checkpoint saved
    ``on_train_batch_end``), so a kill between the two writes would lose one point of the dev curve and, if
    it was the best, the best checkpoint.  The validation's own write, moments later, covers that step.

    Args:
        dirpath: the run's ``checkpoints`` folder.
        every_n_train_steps: also write every N optimizer steps (None: at validations only).
    """

    def __init__(self, dirpath: str | Path, every_n_train_steps: int | None = None) -> None:
        super().__init__(dirpath=dirpath, save_top_k=0, save_last=True, every_n_train_steps=every_n_train_steps)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        loop = trainer.fit_loop.epoch_loop
        fetcher = getattr(trainer.fit_loop, "_data_fetcher", None)
        if fetcher is not None and loop._should_check_val_fx(fetcher):
            return  # a validation follows this step and writes last.ckpt after it
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
