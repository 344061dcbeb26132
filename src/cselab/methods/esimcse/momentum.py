"""ESimCSE's momentum encoder and its queue of negatives (Wu et al. 2022, Sec. 3.2, Eq. 2).

Official code (caskcsg/sentemb ``ESimCSE/esimcse/models.py`` and ``trainers.py``), transcribed:

* the momentum encoder is a second ``BertModel`` / ``RobertaModel`` of the same config (``models.py:346-350``,
  ``:415-419``), never trained by gradients.  Its weights are copied from the online encoder there, but
  ``cl_init`` then calls ``init_weights()`` (``models.py:94``: transformers 4.2.1 ``modeling_utils.py:745-757``
  re-initialises EVERY submodule, ``modeling_bert.py:696-706``: Linear / Embedding weights ~ N(0,
  ``initializer_range``), Linear biases 0, LayerNorm 1 / 0) and ``from_pretrained`` loads only the online encoder:
  the official runs start from a RANDOM momentum encoder (their logs: "Some weights of BertForCL were not
  initialized ... newly initialized: ['momentum_model.embeddings.word_embeddings.weight', ...]",
  ``ESimCSE/logs/bert-base-uncased.log:62``).  ``init="official"`` does that; ``init="copy"`` (the MoCo
  reading of the paper) starts from the online weights;
* update (``models.py:161-163``): at every training forward, after the online encoder ran and before the loss,
  ``theta_m <- momentum * theta_m + (1 - momentum) * theta`` over ``zip(encoder.parameters(),
  momentum_model.parameters())`` (every parameter, the unused pooler layer too; buffers untouched), with the
  online weights of this step (before its optimizer step);
* what it encodes (``trainers.py:626-629``, ``models.py:123-140,183-192``): after the loss, in ``model.eval()``
  (no dropout) and ``no_grad``, the FIRST view (the untouched sentence) of the batch, pooled as the online path
  ([CLS]) and passed through the ONLINE MLP (``cls.mlp``, applied whenever ``pooler_type == "cls"``);
* the queue (``trainers.py:452,631-636``): empty (``None``) at the start of every epoch; after each step the new
  (B, D) rows are appended at the end and only the last ``queue_size`` kept -- except the first append, which is
  kept whole (``pre_z1 = eval_z.clone()``, even when B > ``queue_size``).  The loss of a step uses the queue as it
  was before the step's append.  Per process: under DDP each rank queues its own batch (nothing gathered).
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch
from torch import nn

from cselab.model.backbone import Encoder
from cselab.model.encode_loop import eval_mode

#: ``method.esimcse.momentum_init``: ``official`` (random, as the official runs) | ``copy`` (the online weights)
MOMENTUM_INITS = ("official", "copy")


def init_weights_bert_421(module: nn.Module, std: float) -> None:
    """Re-initialise every Linear / Embedding / LayerNorm of ``module`` in place as transformers 4.2.1's
    ``BertPreTrainedModel._init_weights`` / ``RobertaPreTrainedModel._init_weights`` (``modeling_bert.py:696-706``,
    ``modeling_roberta.py:566-576``): weights ~ N(0, ``std``) (no zeroed padding row), Linear biases 0, LayerNorm
    weight 1 and bias 0; draws from the global torch generator, module by module in ``module.modules()`` order."""
    for m in module.modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            m.weight.data.normal_(mean=0.0, std=std)
        elif isinstance(m, nn.LayerNorm):
            m.bias.data.zero_()
            m.weight.data.fill_(1.0)
        if isinstance(m, nn.Linear) and m.bias is not None:
            m.bias.data.zero_()


class MomentumQueue(nn.Module):
    """The momentum encoder (a frozen copy of the online backbone, moved by EMA) and the queue of its embeddings.

    Args:
        online: the online :class:`cselab.model.backbone.Encoder` (its ``model`` is copied; full tuning only).
        momentum: lambda in [0, 1) (official ``--momentum`` 0.995).
        queue_size: the queue's length Q >= 1 (official ``--neg_size``: 160 for BERT-base / RoBERTa-base).
        init: :data:`MOMENTUM_INITS` (module docstring).

    State (all in the LightningModule's checkpoint): the momentum encoder's weights (``momentum_encoder.*`` in the
    state dict) and the queue (the method's checkpoint hooks).

    The values come checked (:class:`cselab.methods.esimcse.method.ESimCSEOptions`).
    """

    def __init__(self, online: Encoder, momentum: float = 0.995, queue_size: int = 160,
                 init: str = "official") -> None:
        super().__init__()
        self.momentum = float(momentum)
        self.queue_size = int(queue_size)
        model = copy.deepcopy(online.base_model)
        if init == "official":
            init_weights_bert_421(model, float(getattr(model.config, "initializer_range", 0.02)))
        model.requires_grad_(False)
        self.momentum_encoder = Encoder(model, online.family)
        self.queue: torch.Tensor | None = None

    @torch.no_grad()
    def update(self, online: Encoder) -> None:
        """``theta_m <- momentum * theta_m + (1 - momentum) * theta`` over every parameter (``models.py:161-163``).

        Raises:
            ValueError: (``zip(strict=True)``) the online model's parameters do not pair with the momentum encoder's.
        """
        m = self.momentum
        for param, param_m in zip(online.base_model.parameters(), self.momentum_encoder.model.parameters(),
                                  strict=True):
            param_m.data = param_m.data * m + param.data.to(param_m.dtype) * (1.0 - m)

    @torch.no_grad()
    def encode(self, batch: dict[str, torch.Tensor], pool: Callable, head: nn.Module | None) -> torch.Tensor:
        """(B, D) embeddings of view 0 of ``batch`` (``input_ids`` (B, V, T) ...) by the momentum encoder in eval
        mode, pooled by ``pool(output, attention_mask, rep_index)`` and passed through the online ``head`` (if
        any, in eval mode), without a graph (``trainers.py:626-629``, ``models.py:123-140,183-192``)."""
        ids, mask, rep = batch["input_ids"][:, 0], batch["attention_mask"][:, 0], batch["rep_index"][:, 0]
        with eval_mode(self.momentum_encoder, head):
            h = pool(self.momentum_encoder, ids, mask, rep)
            return (h if head is None else head(h)).detach()

    @torch.no_grad()
    def enqueue(self, z: torch.Tensor) -> None:
        """Append ``z`` (B, D) and keep the last ``queue_size`` rows; the first append keeps all B rows
        (``trainers.py:631-636``)."""
        z = z.detach().clone()
        self.queue = z if self.queue is None else torch.cat([self.queue, z])[-self.queue_size:]

    def reset(self) -> None:
        """Empty the queue (the start of every epoch, ``trainers.py:452``)."""
        self.queue = None

    def train(self, mode: bool = True) -> MomentumQueue:
        """The momentum encoder stays in eval mode (it only ever runs in ``model.eval()``, ``trainers.py:626``)."""
        super().train(mode)
        self.momentum_encoder.eval()
        return self
