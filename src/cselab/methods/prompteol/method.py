"""PromptEOL (Jiang et al. 2023), Pretended CoT and Knowledge Enhancement (Zhang et al. 2024) on decoder LLMs.

One method, the prompt group picks the prompt (``prompt=prompteol | prompteol_icl | pretcot | knowledge |
promptsth | promptsum``): the sentence in an "explicit one word limitation" template, the representation the
hidden state of the prompt's last token (``method.pooler=last_token``; PretCoT / KE read ``hidden_states[-2]``,
the prompt's ``layer``).  No head, no template denoising.

Official behaviour kept (kongds/scaling_sentemb ``ft_llm.py``, ``evaluation.py``; docs/fidelity.md):

* ``method.train=false``: direct inference (the papers' "without fine-tuning" rows; ICL rows with
  ``prompt=prompteol_icl``);
* sup (the default): contrastive fine-tuning on NLI triplets, the same template on premise, entailment and
  contradiction (``ft_llm.py:352-376``), SimCSE's InfoNCE with hard negatives at temperature 0.05
  (``ft_llm.py:202-218``), LoRA adapters (``tuning=lora``) on the frozen backbone;
* unsup: the same prompt twice, dropout making the views (the official non-NLI branch, ``ft_llm.py:155-158``).
"""

from __future__ import annotations

from cselab.methods.promptbert.method import PromptBERT


class PromptEOL(PromptBERT):
    """PromptEOL / PretCoT / KE: the views are the prompt's (``sup_view`` x 3 in sup, ``train_views`` in unsup,
    ``eval_view`` at test), as :class:`~cselab.methods.promptbert.method.PromptBERT` reads them; the decoder template
    input (:class:`cselab.model.decoder_input.PromptCollate`) and ``pooler=last_token`` make it a decoder method.
    With ``train=False`` a ``tuning=lora`` becomes ``frozen`` (:class:`ContrastiveMethod`).

    Raises:
        ConfigError: a backbone that is not a decoder LLM (``backbone.family`` must be ``decoder``), or what
            :class:`cselab.model.spec.EmbeddingSpec` refuses on a decoder.
    """

    method_name = "prompteol"
    tunings = ("lora", "full", "frozen")
    families = ("decoder",)
