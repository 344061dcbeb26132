"""What an embedding model does at test, as plain data: the model cards, the export's report and the MTEB
encoder line read it (:meth:`.embedding.EmbeddingModel.describe`)."""

from __future__ import annotations

from typing import Any

from .whitening import describe_whitening


def describe_model(model) -> dict[str, Any]:
    """``{"pooler", "head", "use_head", "head_on", "denoise", "prompt_kind" (none | prefix | input_layer | soft |
    lora), "template", "add_period", "pool_layer", "whitening"}`` of ``model`` (an
    :class:`.embedding.EmbeddingModel`) at test: its test collate, spec, head, prompt module and whitening
    transform (``whitening``: None or ``{"dim": D, "k": k, "normalize": bool}``)."""
    collate = model.collate("test")
    return {"pooler": model.representation_pooler,
            "head": "none" if model.head is None else type(model.head).__name__,
            "use_head": model.head is not None and model.spec.use_head_at_eval,
            "head_on": model.spec.head_on, "denoise": collate.denoise,
            "prompt_kind": model.backbone.prompt_kind,
            "template": collate.views[0].template, "add_period": collate.add_period,
            "pool_layer": model.spec.pool_layer,
            "whitening": describe_whitening(model.whitening)}
