"""Load a trained model from a checkpoint: ``cselab.load(path).encode(sentences)``."""

from __future__ import annotations

import importlib
import os
import warnings

#: Lightning's warning for a non-strict load; a frozen-backbone checkpoint holds only its trained tensors, the
#: backbone's come from its ``name_or_path``, so the frozen keys are expected to be missing (checked instead)
_FROZEN_KEYS_WARNING = "Found keys that are in the model state dict but not in the checkpoint"


def load(checkpoint: str | os.PathLike, map_location: str = "cpu", method: str | None = None,
         backbone: dict | None = None):
    """Rebuild the method saved in a cselab checkpoint, in eval mode, ready to ``encode`` as at test.

    ``checkpoint`` may also be a run directory (its best checkpoint, as ``cselab transfer`` takes it) or an exported
    folder (``cselab export``, any sentence-transformers folder): the latter is encoded exactly as
    ``SentenceTransformer(folder)`` (:func:`cselab.exported.load_exported`; ``method`` and ``backbone`` do not apply).

    Templates, prompts and heads are applied as at test (the method's own ``encode``).  The backbone is loaded
    from its recorded ``name_or_path`` (prompt-tuned checkpoints hold only the trained tensors).  A checkpoint
    written before the embedding spec (flat ``pooler``, ``lr`` ... hyper-parameters) is read in today's layout
    (:func:`cselab.methods.checks.split_legacy`; the flat keys are not constructor arguments, so Lightning
    drops them).

    Args:
        checkpoint: a ``.ckpt`` written by a cselab run, a run directory, or an exported folder.
        map_location: device for the tensors.
        method: the method's config name (``promptbert`` ...) for checkpoints that do not record their class
            (written before the class was recorded); ignored when the checkpoint records it.
        backbone: backbone keys to change (``{"dtype": "float32", "load_in_4bit": False}``): the backbone is
            reloaded from its ``name_or_path`` with them and the checkpoint's tensors loaded on top (a LoRA /
            prefix checkpoint: its trained tensors onto the unquantised base; ``eval.test_backbone``).

    Raises:
        FileNotFoundError: no such checkpoint; a folder that is neither a run directory nor an exported folder;
            a run directory without a best checkpoint.
        ValueError: no recorded method class and no ``method`` given; a checkpoint of a frozen-backbone method
            (LoRA, prefixes, soft prompts) that lacks some of the method's trainable tensors (named).
    """
    import torch

    from cselab.exported import is_exported_folder, load_exported
    from cselab.methods.checks import split_legacy
    from cselab.run_dir import best_checkpoint, is_run_dir

    if not os.path.exists(checkpoint):
        raise FileNotFoundError(f"checkpoint {checkpoint} does not exist")
    if is_exported_folder(checkpoint):
        return load_exported(checkpoint, device=map_location)
    if is_run_dir(checkpoint):
        checkpoint = best_checkpoint(checkpoint)
    if os.path.isdir(checkpoint):
        raise FileNotFoundError(f"{checkpoint} is a folder but neither a run directory (results.json, checkpoints/) "
                                "nor an exported folder (modules.json, cselab_model.json)")
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
    with warnings.catch_warnings():  # the frozen backbone's keys: expected to be missing, checked below
        warnings.filterwarnings("ignore", message=_FROZEN_KEYS_WARNING)
        recorded = dict(ckpt.get("hyper_parameters") or {})
        changed = split_legacy(recorded) if "model" not in recorded else {}  # written before the embedding spec
        if backbone:
            changed["backbone"] = {**dict(recorded.get("backbone") or {}), **dict(backbone)}
        model = cls.load_from_checkpoint(checkpoint, map_location=map_location, weights_only=False, **changed)
    if not getattr(model, "strict_loading", True):
        trained = {n for n, p in model.named_parameters() if p.requires_grad}
        missing = sorted(trained - set(ckpt.get("state_dict", {})))
        if missing:
            raise ValueError(f"{checkpoint}: {len(missing)} trained tensors of {type(model).__name__} are not in the "
                             f"checkpoint, e.g. {', '.join(missing[:3])}; was it written by another configuration?")
    return model.eval()
