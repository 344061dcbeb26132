"""One ``encode(sentences) -> Tensor[N, D]`` per representation of a raw backbone (no training): SimCSE's
poolers, PromptBERT's template [MASK] state, the static token average and the top-k token representation
(``cselab analysis --pooler``, :func:`cselab.analysis.representation_encoders`)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from cselab.model.pooling import POOLERS, needs_hidden_states, pool
from cselab.model.template_input import ViewCollate, ViewSpec
from cselab.representations.static import static_avg_encoder
from cselab.representations.topk import manual_template, mask_states, topk_token_encoder

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
        tpl = template or manual_template(encoder.family)

        def encode_mask(sentences: list[str]) -> torch.Tensor:
            return mask_states(encoder, tokenizer, tpl, sentences, denoise=denoise, batch_size=batch_size).cpu()

        return encode_mask

    collate = ViewCollate(tokenizer, [ViewSpec("text")], max_seq_len=None, add_period=False,
                          position_offset=encoder.position_offset, max_positions=encoder.max_positions)

    @torch.no_grad()
    def encode_layers(sentences: list[str]) -> torch.Tensor:
        device = next(encoder.model.parameters()).device
        tokens = collate.tokenize(list(sentences))
        order = sorted(range(len(tokens)), key=lambda i: len(tokens[i]))
        was_training = encoder.model.training
        encoder.model.eval()
        chunks = []
        try:
            for start in range(0, len(order), batch_size):
                idx = order[start : start + batch_size]
                batch = collate.build({"text": [tokens[i] for i in idx]})
                ids = batch["input_ids"][:, 0].to(device)
                att = batch["attention_mask"][:, 0].to(device)
                out = encoder(ids, att, output_hidden_states=needs_hidden_states(pooler))
                chunks.append(pool(pooler, out, att, batch["rep_index"][:, 0].to(device)).float().cpu())
        finally:
            encoder.model.train(was_training)
        if not chunks:
            return torch.zeros(0, encoder.hidden_size)
        out = torch.cat(chunks)
        result = torch.empty_like(out)
        result[torch.tensor(order, dtype=torch.long)] = out
        return result

    return encode_layers
