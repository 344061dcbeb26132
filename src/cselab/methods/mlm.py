"""DCPCSE's auxiliary masked-LM task: loss = CL + weight * decay^(step / decay_steps) * MLM.

Source: DCPCSE ``dcpcse/models.py`` (``cl_forward``: ``mlm_weight`` and the MLM cross-entropy on the masked
copies of the views, prompts applied; ``:429-430, 446-447``: the pretrained LM head, its decoder a separate,
trainable copy).  The masked inputs are the training collate's ``mlm_input_ids`` / ``mlm_labels``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from cselab.methods.options import build_options, option

LM_HEADS = ("untied", "tied")


@dataclass(frozen=True)
class MLMOptions:
    """The ``method.mlm`` node, typed (:func:`cselab.methods.options.build_options`); its defaults are DCPCSE's
    (``run.sh``: ``--do_mlm --mlm_weight 0.1``; ``conf/method/dcpcse.yaml``'s ``mlm_config``).

    Attributes:
        weight: the MLM term's weight at step 0 (``mlm_weight``).
        decay: its decay per ``decay_steps`` optimizer steps: ``weight * decay ** (step / decay_steps)``.
        decay_steps: optimizer steps per decay factor (> 0).
        probability: the share of eligible tokens the training collate masks, in [0, 1).
        lm_head: ``untied`` (official: a trainable copy of the pretrained decoder) or ``tied``.
    """

    node: ClassVar[str] = "mlm"
    weight: float = option(0.1, ">= 0", lambda v: v >= 0)
    decay: float = option(0.95, "> 0", lambda v: v > 0)
    decay_steps: float = option(100, "> 0", lambda v: v > 0)
    probability: float = option(0.15, "a share in [0, 1)", lambda v: 0 <= v < 1)
    lm_head: str = option("untied", "'untied' or 'tied'", lambda v: v in LM_HEADS)

    def weight_at(self, step: int) -> float:
        """``weight * decay ** (step / decay_steps)`` (DCPCSE ``cl_forward``'s ``mlm_weight``, decayed)."""
        return float(self.weight) * float(self.decay) ** (step / float(self.decay_steps))


def mlm_head(mlm: torch.nn.Module) -> torch.nn.Module:
    """The prediction head of a Hugging Face masked-LM model (BERT ``cls``, RoBERTa ``lm_head``).

    Raises:
        ValueError: the model has none of them.
    """
    for name in ("cls", "lm_head", "predictions"):
        head = getattr(mlm, name, None)
        if isinstance(head, torch.nn.Module):
            return head
    raise ValueError(f"cannot find the MLM head of {type(mlm).__name__}")


def mlm_head_own_parameters(encoder) -> list[torch.nn.Parameter]:
    """The MLM head's parameters except a decoder weight tied to the word embeddings."""
    model = encoder.model
    tied = model.get_input_embeddings().weight if hasattr(model, "get_input_embeddings") else None
    return [p for p in mlm_head(encoder.mlm).parameters() if p is not tied]


class AuxiliaryMLM:
    """The MLM auxiliary task of a method (``method.mlm``), on the backbone's MLM model (``encoder.mlm``).

    Args:
        config: the ``method.mlm`` node (:class:`MLMOptions`, or a mapping of its fields).
        encoder: the :class:`cselab.model.backbone.Encoder`, loaded with its MLM head.
        tuning: ``tuning.name``; on a frozen backbone (anything but ``full``) the head's own layers still train.

    ``lm_head``: ``untied`` (official DCPCSE: the whole LM head trains, its V x D decoder a separate copy of the
    pretrained one) or ``tied`` (the decoder stays tied to the frozen word embeddings).

    Raises:
        ValueError: the backbone has no MLM head; ConfigError: what :class:`MLMOptions` refuses (names
            ``method.mlm.<key>``).
    """

    def __init__(self, config: MLMOptions | Mapping[str, Any], encoder, tuning: str = "full") -> None:
        self.options = build_options(MLMOptions, config)
        if encoder.mlm is None:
            raise ValueError("method.mlm needs the backbone's MLM head")
        if self.options.lm_head == "untied":
            self._untie_decoder(encoder)
        if tuning != "full":  # the head's own layers train (untied: the decoder copy too)
            for p in mlm_head_own_parameters(encoder):
                p.requires_grad_(True)

    @staticmethod
    def _untie_decoder(encoder) -> None:
        """Give the MLM head a decoder of its own: a trainable copy of the (pretrained, tied) decoder weight
        (official ``RobertaForCL`` builds its ``lm_head`` after freezing the backbone and ties nothing)."""
        head = mlm_head(encoder.mlm)
        decoder = getattr(head, "decoder", None) or getattr(getattr(head, "predictions", None), "decoder", None)
        if decoder is None:
            raise ValueError(f"method.mlm.lm_head=untied: cannot find the decoder of {type(head).__name__}")
        decoder.weight = torch.nn.Parameter(decoder.weight.detach().clone())
        encoder.mlm.config.tie_word_embeddings = False

    def weight(self, step: int) -> float:
        """``weight * decay ** (step / decay_steps)`` at optimizer step ``step`` (:meth:`MLMOptions.weight_at`)."""
        return self.options.weight_at(step)

    def loss(self, encoder, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Masked-LM cross-entropy on the masked copies of the views (prompts applied), mean over the masked
        tokens: ``mlm_input_ids`` / ``mlm_labels`` / ``attention_mask`` (B, V, T) -> scalar."""
        # the mean over the masked tokens, their count kept on the device (no host sync); none masked: 0, with
        # zero gradients for every MLM parameter (cross_entropy's own mean would be 0 / 0)
        return self.loss_sum(encoder, batch, slice(None)) / (batch["mlm_labels"] != -100).sum().clamp(min=1)

    def loss_sum(self, encoder, batch: dict[str, torch.Tensor], rows: slice) -> torch.Tensor:
        """The MLM cross-entropy SUMMED over the masked tokens of the flattened sequences ``rows`` (of the B * V):
        a float32 (float64 model: float64) scalar; :meth:`loss` is the sum over all rows divided by the batch's masked-token count (the
        cached step's chunks, :mod:`cselab.methods.cached_step`)."""
        ids, mask, labels = batch["mlm_input_ids"], batch["attention_mask"], batch["mlm_labels"]
        b, v, t = ids.shape
        tpl = batch.get("template_index")
        out = encoder(ids.view(b * v, t)[rows], mask.view(b * v, t)[rows],
                      template_index=tpl.view(b * v, t)[rows] if tpl is not None else None)
        logits = mlm_head(encoder.mlm)(out.last_hidden_state)  # bf16 / fp16 logits: the loss in float32
        logits = logits.reshape(-1, logits.shape[-1]).to(torch.promote_types(logits.dtype, torch.float32))
        return torch.nn.functional.cross_entropy(logits, labels.view(b * v, t)[rows].reshape(-1), ignore_index=-100,
                                                 reduction="sum")
