"""Checkpoint writing that never leaves a half-written file: temporary file, then ``os.replace``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO


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
