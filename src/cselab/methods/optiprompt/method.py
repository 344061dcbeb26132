"""PromptBERT's OptiPrompt (Jiang et al. 2022, Sec. 6): the continuous template of :mod:`cselab.methods.scpcse.method`
with PromptBERT's hyper-parameters."""

from __future__ import annotations

from cselab.methods.scpcse.method import SCPCSE


class OptiPrompt(SCPCSE):
    """PromptBERT's OptiPrompt: the same continuous template, PromptBERT's hyper-parameters."""

    method_name = "optiprompt"
