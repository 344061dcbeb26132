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

from cselab.methods.promptbert import PromptBERT


class PromptEOL(PromptBERT):
    """PromptEOL / PretCoT / KE: the views are the prompt's (``sup_view`` x 3 in sup, ``train_views`` in unsup,
    ``eval_view`` at test), as :class:`~cselab.methods.promptbert.PromptBERT` reads them; the decoder template
    input (:class:`cselab.model.decoder_input.PromptCollate`) and ``pooler=last_token`` make it a decoder method.
    With ``train=False`` a ``tuning=lora`` becomes ``frozen``: no adapters are added (they would start as the
    identity), so a direct-inference model saves and exports as the plain backbone.

    Raises:
        ConfigError: a backbone that is not a decoder LLM (``backbone.family`` must be ``decoder``), or what
            :func:`cselab.methods.checks.check_decoder_args` refuses.
    """

    def __init__(self, *args, **kwargs) -> None:
        from cselab.methods.checks import ConfigError
        from cselab.model.loading import backbone_family

        backbone = kwargs.get("backbone") or (args[0] if args else {})
        family = backbone.get("family") or backbone_family(backbone["name_or_path"])
        if family != "decoder":
            raise ConfigError(f"method=prompteol needs a decoder LLM (backbone.family=decoder), got backbone "
                              f"{backbone.get('name_or_path')!r} of family {family}: e.g. backbone=opt_1_3b, or "
                              "offline backbone=tiny_opt (make tiny-decoders)")
        if not kwargs.get("train", True) and (kwargs.get("tuning") or {}).get("name") == "lora":
            kwargs["tuning"] = {"name": "frozen"}  # direct inference: no adapters (zero-initialised LoRA = identity)
        super().__init__(*args, **kwargs)
