"""Methods that train continuous prompts on a frozen backbone.

* :class:`DCPCSE` (deep prefixes, P-tuning v2, optional MLM auxiliary loss) and :class:`PromCSE` (the same
  prefixes, plus the energy-based hinge loss in the sup setting) are SimCSE's views and [CLS] + MLP with
  ``tuning=prefix``.
* :class:`SCPCSE` and :class:`OptiPrompt` are PromptBERT's [MASK] representation with ``tuning=soft_prompt``:
  the manual template's tokens become trainable vectors.

The behaviour lives in the shared base (``tuning``, ``mlm``); these classes give the names and check that the
configuration is the method's.
"""

from __future__ import annotations

from cselab.methods.promptbert import PromptBERT
from cselab.methods.simcse import SimCSE


def _require_tuning(kwargs: dict, expected: str, method: str) -> None:
    name = (kwargs.get("tuning") or {}).get("name", "full")
    if name != expected:
        raise ValueError(f"method={method} trains {expected} prompts on a frozen backbone; got tuning={name} "
                         f"(use tuning={expected})")


class DCPCSE(SimCSE):
    """DCPCSE: ``tuning=prefix``; ``mlm`` on for RoBERTa unsup (paper)."""

    def __init__(self, *args, **kwargs) -> None:
        _require_tuning(kwargs, "prefix", "dcpcse")
        super().__init__(*args, **kwargs)


class PromCSE(SimCSE):
    """PromCSE: ``tuning=prefix``; sup uses ``loss=infonce_eh`` (the config picks it per setting)."""

    def __init__(self, *args, **kwargs) -> None:
        _require_tuning(kwargs, "prefix", "promcse")
        super().__init__(*args, **kwargs)


class SCPCSE(PromptBERT):
    """SCPCSE: ``tuning=soft_prompt`` on the manual template, [MASK] representation."""

    def __init__(self, *args, **kwargs) -> None:
        _require_tuning(kwargs, "soft_prompt", "scpcse")
        super().__init__(*args, **kwargs)


class OptiPrompt(SCPCSE):
    """PromptBERT's OptiPrompt: the same continuous template, PromptBERT's hyper-parameters."""
