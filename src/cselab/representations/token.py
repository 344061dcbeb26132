"""The non-trained token representations as a plain ``encode`` object (no LightningModule), scored by the same
evaluator as every method: ``static_avg`` / ``static_avg_debiased`` (PromptBERT Table 5 / 11) and ``topk``
(Eq. 3, Table 9)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from cselab.model.loading import load_backbone
from cselab.representations.static import static_avg_encoder
from cselab.representations.topk import topk_token_encoder

TOKEN_REPRESENTATIONS = ("static_avg", "static_avg_debiased", "topk")


class TokenRepresentation:
    """``encode(sentences) -> (N, D)`` of a token representation of the raw backbone.

    Args:
        backbone: ``{"name_or_path", "family"}``; ``topk`` loads its MLM head.
        pooler: ``static_avg`` (mean of the input word embeddings), ``static_avg_debiased`` (the same without the
            Table 11 tokens, subword and punctuation-only tokens, text lowercased) or ``topk`` (the MLM head's top-k
            tokens at the template's [MASK], weighted word embeddings).
        prompt: the prompt config (``topk``: the template of ``eval_view`` for the family, the period rule).
        topk: k (200 in Table 9); topk_denoise: subtract the template bias before the MLM head.
        eval_batch_size: sentences per forward pass (``topk``; default 128).
        **_: the other method arguments of the run's ``module`` node (a representation trains nothing).

    Raises:
        ValueError: an unknown representation, or ``topk`` without a template (names the config key).
        BackboneUnavailableError: the backbone (or, for ``topk``, its MLM head) cannot be loaded.
    """

    def __init__(self, backbone: dict[str, Any], pooler: str, prompt: dict[str, Any] | None = None, topk: int = 200,
                 topk_denoise: bool = False, eval_batch_size: int | None = None, **_: Any) -> None:
        if pooler not in TOKEN_REPRESENTATIONS:
            raise ValueError(f"method.pooler={pooler!r}: expected one of {TOKEN_REPRESENTATIONS}")
        if pooler == "topk" and not prompt:
            raise ValueError("pooler=topk reads the MLM head at a template's [MASK]: choose a prompt "
                              "(prompt=promptbert_manual)")
        self.pooler, self.backbone = pooler, dict(backbone)
        self.template, self.topk, self.topk_denoise, self.add_period = None, int(topk), bool(topk_denoise), False
        self.encoder, self.tokenizer = load_backbone(backbone["name_or_path"], backbone.get("family"),
                                                     mlm_head=pooler == "topk")
        self.encoder.eval()
        if pooler == "topk":
            family = self.encoder.family
            self.template = prompt["templates"][family][prompt.get("eval_view", "view1")]
            self.add_period = bool(prompt.get("add_period_at_eval", True))
            self._encode = topk_token_encoder(self.encoder, self.tokenizer, template=self.template, k=int(topk),
                                              denoise=bool(topk_denoise), batch_size=eval_batch_size or 128,
                                              add_period=self.add_period)
        else:
            debiased = pooler == "static_avg_debiased"
            self._encode = static_avg_encoder(self.encoder, self.tokenizer, remove_biased=debiased,
                                              lowercase=debiased)

    @torch.inference_mode()
    def encode(self, sentences: Sequence[str], batch_size: int | None = None, encoder: str = "test") -> torch.Tensor:
        """(N, D) float32 on CPU, rows in input order; the same for the dev and the test split."""
        return self._encode(list(sentences)).float().cpu()

    def num_trainable_parameters(self) -> int:
        """0: a representation trains nothing."""
        return 0

    def describe(self) -> dict[str, Any]:
        """What it does at test, with the keys of :meth:`cselab.model.embedding.EmbeddingModel.describe` (no head,
        no prompt module) and ``representation``: ``token`` (not an embedding model's forward: no export)."""
        return {"pooler": self.pooler, "head": "none", "use_head": False, "head_on": None,
                "denoise": "position" if self.topk_denoise else "none", "prompt_kind": "none",
                "template": self.template, "add_period": self.add_period, "pool_layer": -1, "representation": "token",
                "topk": self.topk if self.pooler == "topk" else None}
