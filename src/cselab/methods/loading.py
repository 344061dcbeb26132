"""Load a trained model from a checkpoint: ``cselab.load(path).encode(sentences)``."""

from __future__ import annotations

import os
import warnings

#: Lightning's warning for a non-strict load; a frozen-backbone checkpoint holds only its trained tensors, the
#: backbone's come from its ``name_or_path``, so the frozen keys are expected to be missing (checked instead)
_FROZEN_KEYS_WARNING = "Found keys that are in the model state dict but not in the checkpoint"


def load(target: str | os.PathLike, map_location: str = "cpu", method: str | None = None,
         backbone: dict | None = None, pooler: str | None = None, family: str | None = None):
    """The model a target names, in eval mode, ready to ``encode`` as at test: the one loader of every command that
    takes a model (``cselab transfer``, ``mteb``, ``export``, ``analysis``; RankCSE's teachers).

    ``target`` is any of :data:`cselab.io.targets.TARGETS` (:func:`cselab.io.targets.resolve_target`):

    * a run directory: its best checkpoint; a ``.ckpt``: the method saved in it (below);
    * an exported folder (``cselab export``, any sentence-transformers folder): encoded exactly as
      ``SentenceTransformer(folder)`` (:func:`cselab.methods.exported.load_exported`; ``method`` and ``backbone`` do not
      apply) -- unless ``pooler`` is given: then the folder is read as a bare backbone;
    * a backbone (a ``conf/backbone`` name, hub id, model folder or ``package:<module>``): ``method=baseline`` on
      it with ``pooler`` (default ``avg``) and ``family`` (default: the named backbone's, else its config's).

    Templates, prompts and heads of a checkpoint are applied as at test (the method's own ``encode``).  The backbone
    is loaded from its recorded ``name_or_path`` (prompt-tuned checkpoints hold only the trained tensors).  A
    checkpoint written before the embedding spec (flat ``pooler``, ``lr`` ... hyper-parameters) is read in today's
    layout (:func:`cselab.methods.checks.split_legacy`; the flat keys are not constructor arguments, so Lightning
    drops them); one written before the typed options (``esimcse={...}``, ``rtd={...}``, ``teachers=[...]``
    hyper-parameters) gets them as ``options`` (:func:`cselab.methods.checks.fold_options`).

    Args:
        target: a run directory, a ``.ckpt`` written by a cselab run, an exported folder or a backbone.
        map_location: device for the tensors.
        method: the method's config name (``promptbert`` ...) for checkpoints that do not record their class
            (written before the class was recorded); ignored when the checkpoint records it.
        backbone: backbone keys to change (``{"dtype": "float32", "load_in_4bit": False}``): the backbone is
            reloaded from its ``name_or_path`` with them and the checkpoint's tensors loaded on top (a LoRA /
            prefix checkpoint: its trained tensors onto the unquantised base; ``eval.test_backbone``).
        pooler: a backbone's pooler (``avg`` when None); given with an exported folder, the folder is read as a
            bare backbone with it; ignored for a run directory or checkpoint (they use their own).
        family: a backbone's template family (``bert`` | ``roberta`` | ``decoder``; None: read from the model).

    Raises:
        FileNotFoundError: :class:`cselab.io.targets.TargetError` (the target names no model; one message listing
            what a target may be) or a missing file.
        ValueError: no recorded method class and no ``method`` given; a checkpoint of a frozen-backbone method
            (LoRA, prefixes, soft prompts) that lacks some of the method's trainable tensors (named).
        cselab.model.loading.BackboneUnavailableError: a backbone that is not local and the hub is unreachable.
    """
    import torch

    from cselab.io.targets import resolve_target
    from cselab.methods.checks import fold_options, split_legacy
    from cselab.methods.exported import load_exported
    from cselab.methods.registry import method_class, recorded_class

    resolved = resolve_target(target)
    if resolved.kind == "exported" and pooler is None:
        return load_exported(resolved.path, device=map_location)
    if resolved.kind in ("exported", "backbone"):
        spec = {"name_or_path": resolved.path, "family": family or resolved.family, **dict(backbone or {})}
        model = method_class("baseline")(backbone=spec, model={"pooler": pooler or "avg", "head": "none"},
                                         train=False)
        return model.to(map_location).eval()
    checkpoint = resolved.path
    ckpt = torch.load(checkpoint, map_location=map_location, weights_only=False)
    path = ckpt.get("cselab_method_class")
    if path:
        cls = recorded_class(path)
    elif method:
        cls = method_class(method)
    else:
        raise ValueError(f"{checkpoint} records no method class ('cselab_method_class'): pass "
                         "cselab.load(path, method='<method name>')")
    with warnings.catch_warnings():  # the frozen backbone's keys: expected to be missing, checked below
        warnings.filterwarnings("ignore", message=_FROZEN_KEYS_WARNING)
        recorded = dict(ckpt.get("hyper_parameters") or {})
        changed = split_legacy(recorded) if "model" not in recorded else {}  # written before the embedding spec
        folded = fold_options(cls, recorded)  # written before the typed options (esimcse=, rtd=, teachers= ...)
        if "options" in folded and "options" not in recorded:
            changed["options"] = folded["options"]
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
