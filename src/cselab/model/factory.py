"""Build an :class:`~cselab.model.embedding.EmbeddingModel` from a method's arguments (the ``method.*`` config).

Loading by name (hub id, folder, ``package:``) happens here, so this file is not shipped in exported folders;
an exported model is rebuilt by :meth:`EmbeddingModel.load` from its own files.
"""

from __future__ import annotations

from typing import Any

from cselab.model.embedding import EmbeddingModel
from cselab.model.heads import build_head
from cselab.model.loading import load_backbone, load_mlm_transform
from cselab.model.template_input import ViewSpec


def build_embedding_model(
    backbone: dict[str, Any],
    train_views: list[ViewSpec],
    eval_view: ViewSpec,
    *,
    pooler: str = "cls",
    head: str = "mlp",
    head_init: str = "bert",
    mlp_only_train: bool = True,
    head_on: str = "difference",
    prompt: dict[str, Any] | None = None,
    denoise: str = "none",
    denoise_at_eval: bool = False,
    denoise_positions: str = "official",
    dev_encoder: dict[str, Any] | None = None,
    max_seq_len: int = 32,
    eval_max_seq_len: int | None = None,
    eval_batch_size: int | None = None,
    eval_precision: str = "auto",
    tuning: dict[str, Any] | None = None,
    mlm: dict[str, Any] | None = None,
) -> EmbeddingModel:
    """The embedding model of a method, its backbone in train mode (dropout makes the unsup views).

    Args:
        backbone: ``{"name_or_path", "family"}`` and, optional, ``dtype`` (``auto``: bf16 on a GPU),
            ``load_in_4bit``, ``decode_cleanup`` (``conf/backbone``); ``mlm`` set loads the MLM head with it.
        train_views, eval_view: the method's views (which field, which template).
        pooler, head, head_init, mlp_only_train, head_on: the representation and the head
            (:mod:`cselab.model.pooling`, :mod:`cselab.model.heads`; ``head_init=pretrained_mlm`` loads the
            checkpoint's ``cls.predictions.transform``).
        prompt: the prompt config (``mask_index``, ``add_period_at_eval``; decoders: ``layer``, the hidden state
            ``last_token`` reads, and ``eval_rules``) or None.
        denoise, denoise_at_eval, denoise_positions, dev_encoder: the template bias in training, at test, its
            position ids, and the dev encoder's ``{"add_period", "denoise"}`` (docs/fidelity.md).
        max_seq_len, eval_max_seq_len, eval_batch_size, eval_precision: truncation and ``encode``'s batching.
        tuning: ``{"name": full | frozen | prefix | soft_prompt, ...}`` (the prompt module).
        mlm: the MLM auxiliary task's config (its ``probability`` masks the training collate) or None.

    Raises:
        BackboneUnavailableError: the backbone (or the head's pretrained transform) cannot be loaded.
        ValueError: a bad head / init / tuning value (names the key).
    """
    encoder, tokenizer = load_backbone(backbone["name_or_path"], backbone.get("family"), mlm_head=mlm is not None,
                                       dtype=backbone.get("dtype"), load_in_4bit=bool(backbone.get("load_in_4bit")))
    encoder.train()
    pretrained = load_mlm_transform(backbone["name_or_path"]) if head_init == "pretrained_mlm" and head != "none" \
        else None
    std = float(getattr(encoder.model.config, "initializer_range", 0.02))
    head_module = build_head(head, encoder.hidden_size, init=head_init, std=std, pretrained=pretrained)
    prompt = prompt or {}
    dev = None
    if dev_encoder is not None:
        dev = {"add_period": bool(dev_encoder.get("add_period", False)),
               "denoise": bool(dev_encoder.get("denoise", False)) and denoise != "none"}
    return EmbeddingModel(encoder, tokenizer, head_module, {
        "pooler": pooler, "use_head_at_eval": not mlp_only_train, "head_on": head_on,
        "train_views": [[v.field, v.template] for v in train_views],
        "eval_view": [eval_view.field, eval_view.template],
        "mask_index": int(prompt.get("mask_index", -1)),
        "add_period_at_eval": bool(prompt.get("add_period_at_eval", False)),
        "denoise": denoise, "denoise_at_eval": bool(denoise_at_eval), "denoise_positions": denoise_positions,
        "dev_encoder": dev, "max_seq_len": max_seq_len, "eval_max_seq_len": eval_max_seq_len,
        "eval_batch_size": eval_batch_size, "eval_precision": str(eval_precision),
        "mlm_probability": float(mlm.get("probability", 0.15)) if mlm else 0.0,
        "tuning": dict(tuning) if tuning else {"name": "full"},
        "pool_layer": int(prompt.get("layer", -1)), "eval_rules": bool(prompt.get("eval_rules", False)),
        "decode_cleanup": backbone.get("decode_cleanup"),
    })
