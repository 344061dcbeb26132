"""Method registry: ``method.name`` -> LightningModule class."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cselab.methods.base import ContrastiveMethod
from cselab.methods.baseline import build_baseline
from cselab.methods.cot_bert import CoTBERT
from cselab.methods.diffcse import DiffCSE
from cselab.methods.esimcse import ESimCSE
from cselab.methods.prompt_tuning import DCPCSE, SCPCSE, OptiPrompt, PromCSE
from cselab.methods.promptbert import PromptBERT
from cselab.methods.prompteol import PromptEOL
from cselab.methods.rankcse import RankCSE
from cselab.methods.simcse import SimCSE
from cselab.methods.sncse import SNCSE

METHODS: dict[str, type[ContrastiveMethod] | Callable[..., Any]] = {
    "simcse": SimCSE,
    "promptbert": PromptBERT,
    "baseline": build_baseline,  # a Baseline, or a TokenRepresentation for static_avg* / topk
    "cot_bert": CoTBERT,
    "dcpcse": DCPCSE,
    "promcse": PromCSE,
    "scpcse": SCPCSE,
    "optiprompt": OptiPrompt,
    "prompteol": PromptEOL,
    "sncse": SNCSE,
    "diffcse": DiffCSE,
    "esimcse": ESimCSE,
    "rankcse": RankCSE,
}


def method_class(name: str) -> type[ContrastiveMethod] | Callable[..., Any]:
    """The LightningModule class of ``method.name``; ValueError lists the known names."""
    if name not in METHODS:
        raise ValueError(f"method.name={name!r}: expected one of {sorted(METHODS)}")
    return METHODS[name]
