"""SNCSE (Wang and Dou 2023): PromptBERT-style template views, the negated sentence as a soft negative, InfoNCE +
the Bidirectional Margin Loss (:mod:`cselab.methods.sncse.loss`).

Official behaviour kept (Sense-GVT/SNCSE, docs/fidelity.md "SNCSE"):

* three views per sentence (``train_SNCSE.py:518-536``): the sentence in template 1 (``This sentence : "[X]"
  means [MASK] .``), in template 2 (``This sentence of "[X]" means [MASK] .``), and its soft negative in
  template 2; the period rule `` .`` in training and at test; ``max_seq_length`` 32 counts the whole input;
* the [MASK] state of the last layer, MLP (Linear + Tanh) in training only (``models.py:132-142``,
  ``--pooler_type cls --mlp_only_train``), no template denoising;
* the test encoder: template 1, the period rule, the [MASK] state without the MLP (``bert_prediction.py:15-33,
  67-71``); the checkpoint selection is the same encoder on STS-B dev (``bert_evaluation.py``);
* no gather across GPUs (``cl_forward`` has none): ``negatives=per_device``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cselab.methods.base import ContrastiveMethod, template_of
from cselab.model.template_input import ViewSpec

#: the data field holding the soft negative (:class:`cselab.methods.sncse.data.SoftNegativeDataModule`)
SOFT_NEGATIVE_FIELD = "soft_neg"


class SNCSE(ContrastiveMethod):
    """SNCSE; views from the prompt config (``train_views`` = anchor and positive templates,
    ``soft_negative_view``, ``eval_view``); unsupervised only (the paper's setting)."""

    method_name = "sncse"
    settings = ("unsup",)
    families = ("bert", "roberta")

    @classmethod
    def view_specs(cls, prompt: Mapping[str, Any] | None, setting: str,
                   family: str) -> tuple[list[ViewSpec], ViewSpec]:
        """[text in ``train_views[0]``, text in ``train_views[1]``, soft_neg in ``soft_negative_view``] and the
        test view ``eval_view`` (official ``train_SNCSE.py:518-536``, ``bert_prediction.py:69-70``).

        Raises:
            KeyError: no prompt, or a view the prompt does not define for ``family``.
            ValueError: ``train_views`` is not two names.
        """
        if not prompt:
            raise KeyError("method=sncse needs its templates: prompt=sncse (or another prompt with view1/view2)")
        _, eval_view = super().view_specs(prompt, setting, family)
        names = list(prompt.get("train_views", ["view1", "view2"]))
        if len(names) != 2:
            raise ValueError(f"prompt.train_views={names}: SNCSE takes two (anchor, positive)")
        soft = prompt.get("soft_negative_view", names[1])
        views = [ViewSpec("text", template_of(prompt, family, n)) for n in names]
        return [*views, ViewSpec(SOFT_NEGATIVE_FIELD, template_of(prompt, family, soft))], eval_view
