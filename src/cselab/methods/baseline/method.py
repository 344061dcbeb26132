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

from collections.abc import Mapping
from typing import Any

from cselab.methods.base import ContrastiveMethod
from cselab.methods.checks import ConfigError, check_training
from cselab.representations.token import TOKEN_REPRESENTATIONS, TokenRepresentation

#: representations that are not the embedding model's forward (plain encode objects)
ANALYSIS_POOLERS = TOKEN_REPRESENTATIONS


class Baseline(ContrastiveMethod):
    """No training: the backbone's representation through the embedding model (a pooler of
    :data:`cselab.model.pooling.POOLERS`, ``mask`` with a prompt), no head by default."""

    method_name = "baseline"


def build_baseline(*, backbone: dict[str, Any], model: Mapping[str, Any], topk: int = 200,
                   topk_denoise: bool = False, **method: Any) -> Baseline | TokenRepresentation:
    """``method=baseline`` (the ``_target_`` of ``conf/method/baseline.yaml``): a :class:`TokenRepresentation`
    for ``model.pooler`` in :data:`ANALYSIS_POOLERS` (with ``topk`` / ``topk_denoise``, Table 9), else a
    :class:`Baseline` of the other ``module`` arguments.

    Raises:
        ConfigError: what :meth:`check_config` refuses.
    """
    if model.get("pooler") in ANALYSIS_POOLERS:
        return TokenRepresentation(backbone=backbone, pooler=model["pooler"], prompt=model.get("prompt"), topk=topk,
                                   topk_denoise=topk_denoise, eval_batch_size=model.get("eval_batch_size"))
    return Baseline(backbone=backbone, model=model, **method)


def check_config(*, backbone: dict[str, Any], model: Mapping[str, Any], **method: Any) -> None:
    """The config-time check of ``method=baseline``: a token representation needs a template for ``topk``;
    the embedding model is checked as every method's (:meth:`ContrastiveMethod.check_config`).

    Raises:
        ConfigError: names the key and what was expected.
    """
    pooler = model.get("pooler")
    if pooler in ANALYSIS_POOLERS:
        check_training(method.get("loss"), method.get("optim"), bool(method.get("train")))
        if pooler == "topk" and not model.get("prompt"):
            raise ConfigError("method.pooler=topk needs a template (a [MASK] representation) but prompt=none "
                              "(choose a prompt: prompt=promptbert ...)")
        return
    Baseline.check_config(backbone=backbone, model=model, **method)


build_baseline.check_config = check_config  # what cselab.methods.checks.check_module calls
Baseline.factory = staticmethod(build_baseline)  # what method_class("baseline") gives (cselab.methods.registry)
