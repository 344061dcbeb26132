"""PromptBERT (Jiang et al. 2022): template [MASK] representation, two templates as views, template denoising.

Official behaviour kept (docs/fidelity.md):

* unsup: view 1 and view 2 are two different templates around the same sentence (dropout on), the [MASK]
  state minus the template bias (``denoise=position``, Eq. 4), MLP (Linear + Tanh) on ``h - h_hat`` in training
  only; the test encodes with view 1, no denoising, after appending "." to sentences not ending in ``. ? " '``.
* sup: view 1 for premise, entailment and contradiction, denoised, hard negatives as SimCSE.
* Table 8's objective ablation is the prompt's ``train_views`` list and ``denoise``:
  ``[view1, view1]`` + none (same template + dropout), ``[view1, view2]`` + none, ``[view1, view2]`` + position.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cselab.methods.base import ContrastiveMethod, template_of
from cselab.model.template_input import ViewSpec


class PromptBERT(ContrastiveMethod):
    """PromptBERT; views come from the prompt config (``train_views`` unsup, ``sup_view`` sup, ``eval_view``)."""

    method_name = "promptbert"

    @classmethod
    def view_specs(cls, prompt: Mapping[str, Any] | None, setting: str,
                   family: str) -> tuple[list[ViewSpec], ViewSpec]:
        """unsup: the prompt's ``train_views`` templates (default view1, view2); sup: ``sup_view`` on the
        triplet; test: ``eval_view`` (:meth:`ContrastiveMethod.view_specs`).

        Raises:
            KeyError: a view the prompt does not define for ``family``.
        """
        _, eval_view = super().view_specs(prompt, setting, family)
        prompt = prompt or {}
        if setting == "sup":
            tpl = template_of(prompt, family, prompt.get("sup_view", "view1"))
            return [ViewSpec("sent0", tpl), ViewSpec("sent1", tpl), ViewSpec("hard_neg", tpl)], eval_view
        names = list(prompt.get("train_views", ["view1", "view2"]))
        return [ViewSpec("text", template_of(prompt, family, name)) for name in names], eval_view
