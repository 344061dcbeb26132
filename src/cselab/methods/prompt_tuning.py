"""Methods that train continuous prompts on a frozen backbone.

* :class:`DCPCSE` (deep prefixes, P-tuning v2, optional MLM auxiliary loss) and :class:`PromCSE` (the same
  prefixes, plus the energy-based hinge loss in the sup setting) are SimCSE's views and [CLS] + MLP with
  ``tuning=prefix``.
* :class:`SCPCSE` and :class:`OptiPrompt` are PromptBERT's [MASK] representation with ``tuning=soft_prompt``:
  the manual template's tokens become trainable vectors.

The behaviour lives in the shared base (``tuning``, ``mlm``); these classes give the names and check that the
configuration is the method's (``tunings``, checked by :func:`cselab.methods.checks.check_method`).
"""

from __future__ import annotations

from cselab.methods.promptbert import PromptBERT
from cselab.methods.simcse import SimCSE


class DCPCSE(SimCSE):
    """DCPCSE: ``tuning=prefix``; ``mlm`` on for RoBERTa unsup (paper)."""

    method_name = "dcpcse"
    tunings = ("prefix",)


class PromCSE(SimCSE):
    """PromCSE: ``tuning=prefix``; sup uses ``loss=infonce_eh`` (the config picks it per setting)."""

    method_name = "promcse"
    tunings = ("prefix",)


class SCPCSE(PromptBERT):
    """SCPCSE: ``tuning=soft_prompt`` on the manual template, [MASK] representation."""

    method_name = "scpcse"
    tunings = ("soft_prompt",)


class OptiPrompt(SCPCSE):
    """PromptBERT's OptiPrompt: the same continuous template, PromptBERT's hyper-parameters."""

    method_name = "optiprompt"
