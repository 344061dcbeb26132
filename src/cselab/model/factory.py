"""Build an :class:`~cselab.model.embedding.EmbeddingModel` from its :class:`~cselab.model.spec.EmbeddingSpec`
and the backbone's name.

Loading by name (hub id, folder, ``package:``) happens here, so this file is not shipped in exported folders;
an exported model is rebuilt by :meth:`EmbeddingModel.load` from its own files.
"""

from __future__ import annotations

from typing import Any

from cselab.model.embedding import EmbeddingModel
from cselab.model.heads import build_head
from cselab.model.loading import load_backbone, load_mlm_transform
from cselab.model.spec import EmbeddingSpec


def build_embedding_model(backbone: dict[str, Any], spec: EmbeddingSpec, *, mlm_head: bool = False) -> EmbeddingModel:
    """The embedding model of ``spec`` on the backbone ``backbone``, in train mode (dropout makes the unsup views).

    Args:
        backbone: ``{"name_or_path", "family"}`` and, optional, ``dtype`` (``auto``: bf16 on a GPU),
            ``load_in_4bit`` (``conf/backbone``).
        spec: what the model is (the views, pooler, head, template bias, prompt module ...).
        mlm_head: load the backbone with its MLM head (the MLM auxiliary loss, ``method.mlm``).

    Raises:
        BackboneUnavailableError: the backbone (or the head's pretrained transform) cannot be loaded.
        ValueError: a head / init the backbone cannot take (names the key).
    """
    encoder, tokenizer = load_backbone(backbone["name_or_path"], backbone.get("family"), mlm_head=mlm_head,
                                       dtype=backbone.get("dtype"), load_in_4bit=bool(backbone.get("load_in_4bit")))
    encoder.train()
    pretrained = None
    if spec.head_init == "pretrained_mlm" and spec.head != "none":
        pretrained = load_mlm_transform(backbone["name_or_path"])
    std = float(getattr(encoder.model.config, "initializer_range", 0.02))
    head = build_head(spec.head, encoder.hidden_size, init=spec.head_init, std=std, pretrained=pretrained)
    return EmbeddingModel(encoder, tokenizer, head, spec)
