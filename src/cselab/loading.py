"""Load a trained model from a checkpoint: ``cselab.load(path).encode(sentences)``."""

from __future__ import annotations

import importlib
import os


def load(checkpoint: str | os.PathLike, map_location: str = "cpu"):
    """Rebuild the method saved in a cselab checkpoint, in eval mode, ready to ``encode`` as at test.

    Templates, prompts and heads are applied as at test (the method's own ``encode``).  The backbone is loaded
    from its recorded ``name_or_path`` (prompt-tuned checkpoints hold only the trained tensors).

    Raises:
        FileNotFoundError: no such checkpoint.
        ValueError: the file is not a cselab checkpoint (no recorded method class).
    """
    import torch

    if not os.path.exists(checkpoint):
        raise FileNotFoundError(f"checkpoint {checkpoint} does not exist")
    ckpt = torch.load(checkpoint, map_location=map_location, weights_only=False)
    path = ckpt.get("cselab_method_class")
    if not path:
        raise ValueError(f"{checkpoint} is not a cselab checkpoint (no 'cselab_method_class' entry)")
    module, _, name = path.rpartition(".")
    cls = getattr(importlib.import_module(module), name)
    model = cls.load_from_checkpoint(checkpoint, map_location=map_location, weights_only=False)
    return model.eval()
