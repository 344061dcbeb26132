"""Representations without fine-tuning (``method.train=false``): raw poolers, the manual prompt (the embedding model,
:class:`Baseline`), static token embeddings and the top-k token representation (PromptBERT Table 5 and Table 9:
a plain ``encode`` object, :class:`cselab.representations.token.TokenRepresentation`); :func:`build_baseline`
picks by ``pooler``.

    python run.py method=baseline method.pooler=avg                              # last-layer average (52.57 bert-base)
    python run.py method=baseline method.pooler=avg_first_last_legacy            # 56.70 (embedding + last layer)
    python run.py method=baseline method.pooler=static_avg                       # 56.02
    python run.py method=baseline method.pooler=static_avg_debiased              # 63.10 (Table 11 tokens removed)
    python run.py method=baseline prompt=promptbert_manual method.pooler=mask    # 67.85 (the manual prompt)
    python run.py method=baseline prompt=promptbert_manual method.pooler=topk method.topk_denoise=true   # Table 9
"""

from __future__ import annotations

from typing import Any

from cselab.methods.base import ContrastiveMethod
from cselab.representations.token import TOKEN_REPRESENTATIONS, TokenRepresentation

#: representations that are not the embedding model's forward (plain encode objects)
ANALYSIS_POOLERS = TOKEN_REPRESENTATIONS


class Baseline(ContrastiveMethod):
    """No training: the backbone's representation through the embedding model (a pooler of
    :data:`cselab.model.pooling.POOLERS`, ``mask`` with a prompt), no head by default.

    Args:
        **kwargs: :class:`ContrastiveMethod` arguments; ``topk`` / ``topk_denoise`` (for the token
            representations) are ignored here.
    """

    def __init__(self, *args, topk: int = 200, topk_denoise: bool = False, **kwargs) -> None:
        super().__init__(*args, **kwargs)


def build_baseline(**kwargs: Any) -> Baseline | TokenRepresentation:
    """``method=baseline``: a :class:`TokenRepresentation` for ``pooler`` in :data:`ANALYSIS_POOLERS`, else a
    :class:`Baseline` (the ``_target_`` of ``conf/method/baseline.yaml``)."""
    if kwargs.get("pooler") in ANALYSIS_POOLERS:
        return TokenRepresentation(**kwargs)
    return Baseline(**kwargs)
