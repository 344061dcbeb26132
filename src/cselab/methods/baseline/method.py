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
from dataclasses import dataclass
from typing import Any, ClassVar

from cselab.methods.base import ContrastiveMethod
from cselab.methods.checks import check_training
from cselab.methods.options import build_options, option
from cselab.model.spec import ConfigError
from cselab.representations.token import TOKEN_REPRESENTATIONS, TokenRepresentation


@dataclass(frozen=True)
class BaselineOptions:
    """The top-k token representation's options, keys of ``method`` itself (PromptBERT Table 9)."""

    node: ClassVar[str] = ""
    topk: int = option(200, "an integer >= 1 (Eq. 3's k)", lambda v: v >= 1)
    topk_denoise: bool = option(False, "true or false (subtract the template bias before the MLM head)")


class Baseline(ContrastiveMethod):
    """No training: the backbone's representation through the embedding model (a pooler of
    :data:`cselab.model.pooling.POOLERS`, ``mask`` with a prompt), no head by default."""

    method_name = "baseline"
    options_type = BaselineOptions

    def __init__(self, backbone: dict, model: Mapping[str, Any] | None = None, train: bool = False,
                 **method: Any) -> None:
        """Every method's arguments (:class:`ContrastiveMethod`), with ``train`` false unless given: the backbone's
        representation as it is, a template used at test without training on it."""
        super().__init__(backbone, model, train=train, **method)


def build_baseline(*, backbone: dict[str, Any], model: Mapping[str, Any], options: Any = None,
                   **method: Any) -> Baseline | TokenRepresentation:
    """``method=baseline`` (the ``_target_`` of ``conf/method/baseline.yaml``): a :class:`TokenRepresentation`
    for ``model.pooler`` in :data:`TOKEN_REPRESENTATIONS` (with ``options``' ``topk`` / ``topk_denoise``, Table 9),
    else a :class:`Baseline` of the ``module`` arguments.

    Raises:
        ConfigError: what :meth:`check_config` refuses.
    """
    if model.get("pooler") in TOKEN_REPRESENTATIONS:
        o = build_options(BaselineOptions, options)
        return TokenRepresentation(backbone=backbone, pooler=model["pooler"], prompt=model.get("prompt"), topk=o.topk,
                                   topk_denoise=o.topk_denoise, eval_batch_size=model.get("eval_batch_size"))
    return Baseline(backbone=backbone, model=model, options=options, **method)


def check_config(*, backbone: dict[str, Any], model: Mapping[str, Any], **method: Any) -> None:
    """The config-time check of ``method=baseline``: a token representation needs a template for ``topk``;
    the embedding model is checked as every method's (:meth:`ContrastiveMethod.check_config`).

    Raises:
        ConfigError: names the key and what was expected.
    """
    pooler = model.get("pooler")
    if pooler in TOKEN_REPRESENTATIONS:
        build_options(BaselineOptions, method.get("options"))
        check_training(method.get("loss"), method.get("optim"), bool(method.get("train")))
        if pooler == "topk" and not model.get("prompt"):
            raise ConfigError("method.pooler=topk needs a template (a [MASK] representation) but prompt=none "
                              "(choose a prompt: prompt=promptbert ...)")
        return
    Baseline.check_config(backbone=backbone, model=model, **method)


build_baseline.check_config = check_config  # what cselab.methods.checks.check_module calls
build_baseline.options_type = BaselineOptions  # what cselab.run.spec.module_node reads
Baseline.factory = staticmethod(build_baseline)  # what method_class("baseline") gives (cselab.methods.registry)
