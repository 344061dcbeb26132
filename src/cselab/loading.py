"""Load a trained model from a checkpoint: ``cselab.load(path).encode(sentences)``."""

from __future__ import annotations

import importlib
import os


def load(checkpoint: str | os.PathLike, map_location: str = "cpu", method: str | None = None):
    """Rebuild the method saved in a cselab checkpoint, in eval mode, ready to ``encode`` as at test.

    Templates, prompts and heads are applied as at test (the method's own ``encode``).  The backbone is loaded
    from its recorded ``name_or_path`` (prompt-tuned checkpoints hold only the trained tensors).

    Args:
        checkpoint: a ``.ckpt`` written by a cselab run.
        map_location: device for the tensors.
        method: the method's config name (``promptbert`` ...) for checkpoints that do not record their class
            (written before the class was recorded); ignored when the checkpoint records it.

    Raises:
        FileNotFoundError: no such checkpoint.
        ValueError: no recorded method class and no ``method`` given.
    """
    import torch

    if not os.path.exists(checkpoint):
        raise FileNotFoundError(f"checkpoint {checkpoint} does not exist")
    ckpt = torch.load(checkpoint, map_location=map_location, weights_only=False)
    path = ckpt.get("cselab_method_class")
    if path:
        module, _, name = path.rpartition(".")
        cls = getattr(importlib.import_module(module), name)
    elif method:
        from cselab.methods import method_class

        cls = method_class(method)
    else:
        raise ValueError(f"{checkpoint} records no method class ('cselab_method_class'): pass "
                         "cselab.load(path, method='<method name>')")
    model = cls.load_from_checkpoint(checkpoint, map_location=map_location, weights_only=False)
    return model.eval()
