"""Representations without fine-tuning (``train=false``): raw poolers, the manual prompt, static token
embeddings and the top-k token representation (PromptBERT Table 5 and Table 9).

    python run.py method=baseline pooler=avg                              # last-layer average (52.57 bert-base)
    python run.py method=baseline pooler=avg_first_last_legacy            # 56.70 (embedding + last layer)
    python run.py method=baseline pooler=static_avg                       # 56.02
    python run.py method=baseline pooler=static_avg_debiased              # 63.10 (Table 11 tokens removed)
    python run.py method=baseline prompt=promptbert_manual pooler=mask    # 67.85 (the manual prompt)
    python run.py method=baseline prompt=promptbert_manual pooler=topk method.topk_denoise=true   # Table 9
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from cselab.methods.base import ContrastiveMethod

#: representations computed by :mod:`cselab.analysis` instead of a pooler over the last layers
ANALYSIS_POOLERS = ("static_avg", "static_avg_debiased", "topk")


class Baseline(ContrastiveMethod):
    """No training: the backbone's representation as configured.

    Args:
        pooler: a pooler of :data:`cselab.model.pooling.POOLERS`, or ``static_avg`` (mean of the input word
            embeddings), ``static_avg_debiased`` (the same without the 36 most frequent tokens of Table 11,
            subword and punctuation-only tokens; text lowercased, which changes only SICK, as the paper does),
            ``topk`` (Eq. 3: top-k MLM tokens at the template's [MASK], needs an MLM head and a prompt).
        topk: k of the ``topk`` representation (200 in Table 9).
        topk_denoise: subtract the template bias before the MLM head (Table 9 "with denoising").
        **kwargs: :class:`ContrastiveMethod` arguments.

    Raises:
        ValueError: ``topk`` without a prompt; a backbone without MLM head for ``topk`` (load error).
    """

    def __init__(self, *args, pooler: str = "avg", topk: int = 200, topk_denoise: bool = False, **kwargs) -> None:
        self.analysis = pooler if pooler in ANALYSIS_POOLERS else None
        if pooler == "topk" and not kwargs.get("prompt"):
            raise ValueError("pooler=topk reads the MLM head at a template's [MASK]: choose a prompt "
                             "(prompt=promptbert_manual)")
        if pooler == "topk" and not kwargs.get("mlm"):
            kwargs["mlm"] = {"probability": 0.0}  # load the MLM head; no auxiliary loss (no training)
        super().__init__(*args, pooler="mask" if pooler == "topk" else ("avg" if self.analysis else pooler),
                         **kwargs)
        self.hparams["pooler"] = pooler
        self.topk, self.topk_denoise = int(topk), bool(topk_denoise)
        self._analysis_encode = None

    def _build_analysis_encode(self):
        from cselab.representations.static import static_avg_encoder
        from cselab.representations.topk import topk_token_encoder

        if self.analysis == "topk":
            return topk_token_encoder(self.encoder, self.tokenizer, template=self.eval_view().template, k=self.topk,
                                      denoise=self.topk_denoise, batch_size=self.eval_batch_size or 128,
                                      add_period=bool((self.prompt or {}).get("add_period_at_eval", True)))
        debiased = self.analysis == "static_avg_debiased"
        return static_avg_encoder(self.encoder, self.tokenizer, remove_biased=debiased, lowercase=debiased)

    @torch.inference_mode()
    def encode(self, sentences: Sequence[str], batch_size: int | None = None, encoder: str = "test") -> torch.Tensor:
        """:meth:`ContrastiveMethod.encode`, or the analysis representation (the same for dev and test)."""
        if self.analysis is None:
            return super().encode(sentences, batch_size, encoder=encoder)
        if self._analysis_encode is None:
            self._analysis_encode = self._build_analysis_encode()
        was_training = self.training
        self.eval()
        try:
            return self._analysis_encode(list(sentences))
        finally:
            self.train(was_training)
