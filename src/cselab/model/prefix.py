"""Continuous prompts on a frozen backbone with PEFT: deep prefixes (P-tuning v2) and input-layer prompts.

Used by DCPCSE and PromCSE (``tuning=prefix``).  PEFT's ``PrefixTuningConfig`` gives per-layer key/value
prefixes of length ``pre_seq_len`` (an Embedding of ``pre_seq_len x (layers * 2 * hidden)``, optionally through
the reparameterising MLP ``prefix_projection``), passed to the backbone as its past key/values.  What PEFT does
not do and the official code (P-tuning v2 / DCPCSE / PromCSE) does is added here:

* dropout (0.1) on the prefix key/values at every forward pass in training (a forward hook on PEFT's
  ``PrefixEncoder``);
* initialisation N(0, 0.02) (PEFT's Embedding starts at N(0, 1)); the official model's ``init_weights`` used
  ``initializer_range = 0.02``; with ``prefix_projection`` the projection MLP's Linear layers are N(0, 0.02)
  with zero biases too (official ``cl_init`` -> ``init_weights``, DCPCSE ``dcpcse/models.py:128``; PEFT keeps
  PyTorch's default Linear init);
* one prefix draw per training step: the official model calls ``get_prompt`` once per forward and the same
  past key/values serve the contrastive and the MLM pass (DCPCSE ``dcpcse/models.py:161, 193``), so inside
  :meth:`PrefixDraw.shared` every forward on the same batch size reuses the first draw (one dropout mask);
* the **layer-shared** variant (PromCSE Table 3): one (pre_seq_len, 2 * hidden) table repeated for every layer;
* the **input-layer** variant (PromCSE Table 3 "input-layer-only"): PEFT's prompt tuning, ``pre_seq_len``
  trainable vectors prepended to the input embeddings only; their output positions are removed again so that
  poolers see ``[CLS] ... [SEP]`` as usual.

Position ids of the real tokens (``prefix_positions``):

* ``shifted`` (default, official code's behaviour): positions count the prefix, as transformers does with past
  key/values -- real tokens start at ``pre_seq_len`` for BERT and ``pre_seq_len + 2`` for RoBERTa; so the
  usable sentence length drops by ``pre_seq_len``;
* ``unshifted``: real tokens keep the positions they have without a prefix (0 / 2 onwards), the pretrained
  alignment; not available for the input-layer variant, whose prompts are real input positions.
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from torch import nn

PREFIX_VARIANTS = ("deep", "layer_shared", "input_layer")
PREFIX_POSITIONS = ("shifted", "unshifted")


class PrefixDraw:
    """The dropout on the prefix key/values (a forward hook on PEFT's prompt encoder), with optional sharing.

    Outside :meth:`shared`, every forward draws a new dropout mask (training) over the (B, P, L * 2H) prefix.
    Inside it, the first output of each shape is kept and returned again: one draw per training step, which is
    what the official ``get_prompt`` gives the contrastive and the MLM pass.  Gradients flow through the kept
    tensor from every pass that uses it.
    """

    def __init__(self, dropout: float) -> None:
        self.dropout = float(dropout)
        self._kept: dict[torch.Size, torch.Tensor] | None = None

    def __call__(self, module: nn.Module, args, out: torch.Tensor) -> torch.Tensor:
        if self._kept is not None and out.shape in self._kept:
            return self._kept[out.shape]
        if self.dropout > 0:
            out = F.dropout(out, self.dropout, module.training)
        if self._kept is not None:
            self._kept[out.shape] = out
        return out

    @contextlib.contextmanager
    def shared(self, kept: dict[torch.Size, torch.Tensor] | None = None):
        """Within the block, forwards of the same batch size share one prefix draw.  ``kept``: draws to serve
        (shape -> (n, P, L * 2H) tensor, e.g. rows of a draw made earlier: the cached step); the block's new
        draws are added to it.  Yields the dict of draws."""
        self._kept = {} if kept is None else kept
        try:
            yield self._kept
        finally:
            self._kept = None


class LayerSharedPrefix(nn.Module):
    """One prefix table shared by every layer: (B, P) token ids -> (B, P, layers * 2 * hidden).

    Attributes:
        weight: (P, 2 * hidden) -- the keys and values of the prefix, repeated for each of ``num_layers``.
    """

    def __init__(self, num_tokens: int, hidden_size: int, num_layers: int, init_std: float = 0.02) -> None:
        super().__init__()
        self.num_layers = num_layers
        self.weight = nn.Parameter(torch.randn(num_tokens, 2 * hidden_size) * init_std)

    def forward(self, prefix: torch.Tensor) -> torch.Tensor:
        kv = F.embedding(prefix, self.weight)  # (B, P, 2H)
        return kv.repeat(1, 1, self.num_layers)  # (B, P, L * 2H): [k0 v0 k0 v0 ...] per layer


def check_prefix(pre_seq_len: int, variant: str, positions: str = "shifted") -> None:
    """The prefix's values: a run's config (:class:`cselab.model.spec.TuningSpec`, as a ``ConfigError``) and
    :meth:`cselab.model.backbone.Encoder.add_prefix` called directly.

    Raises:
        ValueError: ``pre_seq_len < 1``, an unknown ``variant`` or ``positions``, or ``input_layer`` with
            unshifted positions (names the ``tuning.*`` key).
    """
    if pre_seq_len < 1:
        raise ValueError(f"tuning.pre_seq_len must be >= 1, got {pre_seq_len}")
    if variant not in PREFIX_VARIANTS:
        raise ValueError(f"tuning.variant={variant!r}: expected one of {PREFIX_VARIANTS}")
    if positions not in PREFIX_POSITIONS:
        raise ValueError(f"tuning.prefix_positions={positions!r}: expected one of {PREFIX_POSITIONS}")
    if variant == "input_layer" and positions != "shifted":
        raise ValueError("tuning.variant=input_layer puts the prompt in the input sequence: its real tokens "
                         "always follow it (tuning.prefix_positions must be 'shifted')")


def apply_prefix_tuning(
    model: nn.Module,
    pre_seq_len: int,
    variant: str = "deep",
    prefix_projection: bool = False,
    prefix_hidden_size: int = 512,
    dropout: float = 0.1,
    init_std: float = 0.02,
) -> nn.Module:
    """Wrap a Hugging Face encoder with PEFT prompt learning; the backbone's own weights are frozen.

    Args:
        model: a BERT / RoBERTa ``PreTrainedModel`` (base model, not the MLM wrapper).
        pre_seq_len: prefix length P >= 1 (DCPCSE 10-16, PromCSE 10-16).
        variant: ``deep`` (every layer, P-tuning v2), ``layer_shared`` or ``input_layer``.
        prefix_projection: reparameterise the prefix through Linear-Tanh-Linear (P-tuning v2 option).
        prefix_hidden_size: hidden width of that projection.
        dropout: dropout on the prefix key/values (deep variants) or prompt vectors (input layer), training only.
        init_std: std of the normal initialisation of the prefix table.

    Returns:
        the ``PeftModelForFeatureExtraction`` wrapping ``model``; its prompt encoder carries the
        :class:`PrefixDraw` hook as ``cselab_prefix_draw``.

    Raises:
        ValueError: ``pre_seq_len < 1`` or an unknown variant (:func:`check_prefix`).
    """
    check_prefix(pre_seq_len, variant)
    from peft import PrefixTuningConfig, PromptTuningConfig, TaskType, get_peft_model

    config = model.config
    if variant == "input_layer":
        peft_cfg = PromptTuningConfig(task_type=TaskType.FEATURE_EXTRACTION, num_virtual_tokens=pre_seq_len)
    else:
        peft_cfg = PrefixTuningConfig(
            task_type=TaskType.FEATURE_EXTRACTION,
            num_virtual_tokens=pre_seq_len,
            prefix_projection=prefix_projection and variant == "deep",
            encoder_hidden_size=prefix_hidden_size,
        )
    peft_model = get_peft_model(model, peft_cfg)
    encoder = peft_model.prompt_encoder[peft_model.active_adapter]
    if variant == "layer_shared":
        encoder.embedding = LayerSharedPrefix(pre_seq_len, config.hidden_size, config.num_hidden_layers, init_std)
    else:
        nn.init.normal_(encoder.embedding.weight, std=init_std)
    transform = getattr(encoder, "transform", None)  # prefix_projection: Linear-Tanh-Linear
    if transform is not None:
        from .heads import bert_init_

        bert_init_(transform, init_std)
    draw = PrefixDraw(dropout)
    encoder.register_forward_hook(draw)
    encoder.cselab_prefix_draw = draw
    return peft_model

