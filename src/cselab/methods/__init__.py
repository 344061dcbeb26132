"""Method registry: ``method.name`` -> LightningModule class."""

from __future__ import annotations

from cselab.methods.base import ContrastiveMethod
from cselab.methods.baseline import Baseline
from cselab.methods.cot_bert import CoTBERT
from cselab.methods.prompt_tuning import DCPCSE, SCPCSE, OptiPrompt, PromCSE
from cselab.methods.promptbert import PromptBERT
from cselab.methods.simcse import SimCSE

METHODS: dict[str, type[ContrastiveMethod]] = {
    "simcse": SimCSE,
    "promptbert": PromptBERT,
    "baseline": Baseline,
    "cot_bert": CoTBERT,
    "dcpcse": DCPCSE,
    "promcse": PromCSE,
    "scpcse": SCPCSE,
    "optiprompt": OptiPrompt,
}


def method_class(name: str) -> type[ContrastiveMethod]:
    """The LightningModule class of ``method.name``; ValueError lists the known names."""
    if name not in METHODS:
        raise ValueError(f"method.name={name!r}: expected one of {sorted(METHODS)}")
    return METHODS[name]
