"""SCPCSE (shallow continuous prompts): PromptBERT's [MASK] representation with ``tuning=soft_prompt``: the manual
template's tokens become trainable vectors on a frozen backbone."""

from __future__ import annotations

from cselab.methods.promptbert.method import PromptBERT


class SCPCSE(PromptBERT):
    """SCPCSE: ``tuning=soft_prompt`` on the manual template, [MASK] representation."""

    method_name = "scpcse"
    tunings = ("soft_prompt",)
