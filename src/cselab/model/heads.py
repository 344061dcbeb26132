"""Projection heads applied on top of the sentence representation, and how they are initialised.

Source: SimCSE ``MLPLayer`` (Linear(D, D) + Tanh on [CLS]), reused by PromptBERT, CoT-BERT, DCPCSE and PromCSE
on their representation (PromptBERT: on ``h - h_hat``); PromptBERT's sup BERT and OptiPrompt heads are BERT's
MLM-head transform.

Initialisation (``method.head_init``, see ``docs/fidelity.md``):

* ``bert`` (default, the official code): every official model calls ``cl_init`` -> ``cls.init_weights()``,
  BERT's ``_init_weights``: Linear weights N(0, ``initializer_range``) (0.02 for BERT and RoBERTa), biases 0,
  LayerNorm weight 1 / bias 0 (SimCSE ``simcse/models.py:95``, Prompt-BERT ``prompt_bert/models.py:53-63``,
  CoT-BERT ``models.py:110-121``, DCPCSE ``dcpcse/models.py:128``, PromCSE ``promcse/models.py:132``);
* ``pretrained_mlm``: the head's weights are the backbone checkpoint's ``cls.predictions.transform``
  (Prompt-BERT ``train.py:581-584``, ``evaluation.py:104-117``; only ``mlm_transform`` heads);
* ``pytorch``: PyTorch's default ``nn.Linear`` init (U(+-1/sqrt(D)) weights and biases), cselab's behaviour
  before the fidelity ledger; kept to reproduce older runs.
"""

from __future__ import annotations

import torch
from torch import nn

HEAD_INITS = ("bert", "pretrained_mlm", "pytorch")


class MLPHead(nn.Module):
    """SimCSE's MLP: ``tanh(W x + b)``, (..., D) -> (..., D)."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.activation = nn.Tanh()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.activation(self.dense(x))


class MLMTransformHead(nn.Module):
    """BERT's MLM-head transform: ``LayerNorm(GELU(W x + b))``, (..., D) -> (..., D).

    PromptBERT's official sup BERT head, applied as ``head(h) - head(h_hat)`` at train and test, and OptiPrompt's
    training head; the parameter names are those of Hugging Face's ``BertPredictionHeadTransform``
    (``dense``, ``LayerNorm``), so the checkpoint's ``cls.predictions.transform`` loads into it as is.
    """

    def __init__(self, hidden_size: int, layer_norm_eps: float = 1e-12) -> None:
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.activation = nn.GELU()
        self.LayerNorm = nn.LayerNorm(hidden_size, eps=layer_norm_eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.activation(self.dense(x)))


class ProjectionMLP(nn.Module):
    """DiffCSE's BatchNorm projector (``--batchnorm``): Linear(D, 2D, no bias) -> BatchNorm1d(2D) -> ReLU ->
    Linear(2D, D, no bias) -> BatchNorm1d(D, affine=False); (..., D) -> (..., D).

    The leading dimensions are flattened into ONE BatchNorm batch (the official head sees the (B * V, D) rows of
    both views together: DiffCSE ``diffcse/models.py:35-50, 176-179``).  The BatchNorm layers keep PyTorch's
    initialisation (``_init_weights`` of transformers 4.2.1 touches Linear / Embedding / LayerNorm only).
    """

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(hidden_size, hidden_size * 2, bias=False), nn.BatchNorm1d(hidden_size * 2), nn.ReLU(inplace=True),
            nn.Linear(hidden_size * 2, hidden_size, bias=False), nn.BatchNorm1d(hidden_size, affine=False))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x.reshape(-1, x.shape[-1])).view(x.shape)


#: ``method.head`` -> its class (``none``: no head)
HEAD_CLASSES: dict[str, type[nn.Module]] = {"mlp": MLPHead, "mlm_transform": MLMTransformHead, "mlp_bn": ProjectionMLP}
HEADS = ("none", *HEAD_CLASSES)


def head_name(head: nn.Module | None) -> str:
    """The ``method.head`` name of a built head (``none`` for None; :data:`HEAD_CLASSES`, another module: ``mlp``)."""
    if head is None:
        return "none"
    return next((name for name, cls in HEAD_CLASSES.items() if isinstance(head, cls)), "mlp")


def bert_init_(module: nn.Module, std: float = 0.02) -> None:
    """BERT's ``_init_weights`` on every Linear / LayerNorm of ``module``, in place: Linear weights N(0, std),
    biases 0; LayerNorm weight 1, bias 0.

    Source: transformers ``BertPreTrainedModel._init_weights`` as called by the official ``cl_init`` ->
    ``cls.init_weights()`` (SimCSE ``simcse/models.py:95``).
    """
    for m in module.modules():
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, mean=0.0, std=std)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)


def build_head(name: str, hidden_size: int, init: str = "bert", std: float = 0.02,
               pretrained: dict[str, torch.Tensor] | None = None) -> nn.Module | None:
    """``"mlp"`` -> :class:`MLPHead`; ``"mlm_transform"`` -> :class:`MLMTransformHead`; ``"mlp_bn"`` ->
    :class:`ProjectionMLP` (DiffCSE); ``"none"`` -> None.

    Args:
        name: ``method.head``.
        hidden_size: D.
        init: ``method.head_init``: ``bert`` (N(0, std) weights, zero biases: the official code), ``pytorch``
            (PyTorch's default) or ``pretrained_mlm`` (load ``pretrained``).
        std: the backbone's ``initializer_range`` (0.02 for BERT / RoBERTa).
        pretrained: for ``pretrained_mlm``: the checkpoint's ``cls.predictions.transform`` state dict
            (``dense.weight``, ``dense.bias``, ``LayerNorm.weight``, ``LayerNorm.bias``).

    Raises:
        ValueError: unknown head (lists the known ones), ``pretrained_mlm`` on a head other than
            ``mlm_transform`` or without ``pretrained`` weights (names ``method.head_init``); an unknown ``init``
            is refused by :class:`.spec.EmbeddingSpec` (``method.head_init``).
    """
    if name == "none":
        return None
    if name not in HEAD_CLASSES:
        raise ValueError(f"method.head={name!r}: expected one of {HEADS}")
    head = HEAD_CLASSES[name](hidden_size)
    if init == "bert":
        bert_init_(head, std)
    elif init == "pretrained_mlm":
        if name != "mlm_transform":
            raise ValueError(f"method.head_init=pretrained_mlm needs method.head=mlm_transform, got {name!r}")
        if pretrained is None:
            raise ValueError("method.head_init=pretrained_mlm: no pretrained MLM-head transform was given")
        head.load_state_dict(pretrained)
    return head
