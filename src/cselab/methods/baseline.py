"""Representations without fine-tuning (``train=false``): raw poolers and the manual prompt."""

from __future__ import annotations

from cselab.methods.base import ContrastiveMethod


class Baseline(ContrastiveMethod):
    """No training: the backbone's representation as configured (``pooler``; a prompt gives [MASK] states).

    ``method=baseline pooler=avg`` is SimCSE's evaluator on a raw model; with a prompt and ``pooler=mask`` it is
    PromptBERT's non-fine-tuned manual-prompt row (Table 5).
    """

