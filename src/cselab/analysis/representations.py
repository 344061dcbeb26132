"""One ``encode(sentences) -> Tensor[N, D]`` per representation of a raw backbone (no training): SimCSE's
poolers, PromptBERT's template [MASK] state, the static token average and the top-k token representation
(``cselab analysis --pooler``, :func:`cselab.analysis.plots_data.representation_encoders`)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from cselab.model.embedding import EmbeddingModel
from cselab.model.pooling import POOLERS
from cselab.model.spec import EmbeddingSpec
from cselab.representations.static import static_avg_encoder
from cselab.representations.topk import manual_template, mask_model, topk_token_encoder

#: every ``--pooler`` value
REPRESENTATIONS: tuple[str, ...] = (*POOLERS, "static_avg", "topk")


def make_encode_fn(
    encoder,
    tokenizer,
    pooler: str,
    template: str | None = None,
    k: int = 200,
    denoise: bool = False,
    remove_biased: bool = False,
    lowercase: bool = False,
    batch_size: int = 64,
) -> Callable[[list[str]], torch.Tensor]:
    """``encode(sentences) -> Tensor[N, D]`` (float32, CPU) for a representation of :data:`REPRESENTATIONS`.

    ``mask`` / ``topk`` use ``template`` (default: the manual template of the encoder's family) with
    PromptBERT's evaluation period rule; the layer poolers encode ``[CLS] s [SEP]`` without truncation.

    Raises:
        ValueError: unknown pooler; ``denoise`` with a representation that has no template; ``topk`` on a
            backbone without MLM head.
    """
    if pooler not in REPRESENTATIONS:
        raise ValueError(f"pooler={pooler!r}: expected one of {REPRESENTATIONS}")
    if denoise and pooler not in ("mask", "topk"):
        raise ValueError(f"--denoise needs a template representation (mask or topk), not pooler={pooler!r}")
    if pooler == "static_avg":
        return static_avg_encoder(encoder, tokenizer, remove_biased=remove_biased, lowercase=lowercase)
    if pooler == "topk":
        return topk_token_encoder(encoder, tokenizer, template, k=k, denoise=denoise, batch_size=batch_size)
    if pooler == "mask":
        return mask_model(encoder, tokenizer, template or manual_template(encoder.family), denoise, batch_size).encode

    # the layer poolers ARE the embedding model without a head or template ([CLS] s [SEP], no truncation)
    spec = EmbeddingSpec(family=encoder.family, pooler=pooler, head="none", train_views=[("text", None)],
                         eval_batch_size=batch_size, eval_precision="32")
    return EmbeddingModel(encoder, tokenizer, None, spec, apply_tuning=False).encode
