"""DiffCSE (Chuang et al., NAACL 2022): unsupervised SimCSE plus conditional replaced-token detection.

loss = InfoNCE(z1, z2) + lambda_weight * RTD, where the RTD discriminator, conditioned on each view's sentence
embedding, detects the tokens a frozen MLM generator replaced in a masked copy of that view
(:mod:`cselab.methods.diffcse.rtd`).  Official: voidism/DiffCSE ``diffcse/models.py:127-273`` (``cl_forward``); the
representation is SimCSE's [CLS] with, in training only, the BatchNorm projector (``--batchnorm``,
``models.py:35-50, 119``; ``--mlp_only_train``): the evaluated encoder is the backbone with ``cls_before_pooler``
(README.md:120-124), which is what ``cselab export`` writes (the generator and discriminator are training-only).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import torch

from cselab.methods.base import ContrastiveMethod
from cselab.methods.diffcse.rtd import OFFICIAL_GENERATORS, ReplacedTokenDetection, RTDOptions, load_generator
from cselab.model.spec import ConfigError, EmbeddingSpec


class DiffCSE(ContrastiveMethod):
    """DiffCSE: SimCSE's dropout views and InfoNCE, plus ``rtd.lambda_weight`` x the RTD loss.

    Args:
        options: :class:`cselab.methods.diffcse.rtd.RTDOptions` (``method.rtd``) or a mapping of its fields:
            ``generator`` (a masked LM's hub id / folder / ``package:<module>``, or ``backbone``; official
            ``distilbert-base-uncased`` / ``distilroberta-base``), ``masking_ratio`` (official 0.30),
            ``lambda_weight`` (0.005), ``condition`` (``after_head``: the projector's output conditions the
            discriminator, official default; ``before_head``: the [CLS] state, official ``--before_mlp``, whose
            code applies the projector to the unflattened (B, 2, D) tensor, models.py:204-206, and so crashes with
            the BatchNorm projector: with ``head=mlp_bn`` cselab's extension, the projector over the B * V rows),
            ``generator_dropout`` (true: the generator runs in the model's train mode, as the official module).
        the others: :class:`cselab.methods.base.ContrastiveMethod`.

    The checkpoint holds the discriminator, its head and the (frozen) generator: a resumed run continues with
    them; the export is the encoder alone.

    Raises:
        ConfigError: ``trainer.cached_step`` (refused by name), ``method.mlm``, ``setting=sup``, a tuning other
            than ``full``, a bad ``method.rtd`` value (named).
        BackboneUnavailableError: the generator cannot be loaded (names the offline alternatives).
    """

    method_name = "diffcse"
    tunings = ("full",)
    settings = ("unsup",)
    families = ("bert", "roberta")
    options_type = RTDOptions

    def build_own_parts(self) -> None:
        """The generator (frozen) and the discriminator (:class:`ReplacedTokenDetection`) of ``method.rtd``."""
        o = self.options
        self.model.respec(mlm_probability=o.masking_ratio)  # the collate's masked copies (train.py:499)
        generator_name = o.generator or OFFICIAL_GENERATORS[self.spec.family]
        generator = load_generator(generator_name, self.hparams.backbone["name_or_path"], self.tokenizer)
        self.rtd = ReplacedTokenDetection(o, generator, self.encoder.base_model, self.tokenizer.cls_token_id)
        self.rtd.train(self.training)
        self._rtd_loss: torch.Tensor | None = None

    @classmethod
    def check_config(cls, *, options: Mapping[str, Any] | RTDOptions | None = None,
                     cached_step: Mapping[str, Any] | None = None, mlm: Mapping[str, Any] | None = None,
                     **kwargs: Any) -> EmbeddingSpec:
        """The base checks, and the refusals (``trainer.cached_step``, ``method.mlm``); the spec's masking rate is
        ``method.rtd.masking_ratio``.

        Raises:
            ConfigError: names the key and what was expected.
        """
        if (cached_step or {}).get("chunk_size") is not None:
            raise ConfigError(
                "method=diffcse does not run trainer.cached_step: the RTD loss couples each sequence's embedding with "
                "a discriminator pass over that sequence's generated tokens, and the BatchNorm projector normalises "
                "over the whole batch, so chunked recomputation would not give the uncached step's loss and "
                "gradients; set trainer.cached_step.chunk_size=null (or lower data.batch_size)")
        if mlm:
            raise ConfigError("method=diffcse has no MLM auxiliary loss (method.mlm); its masked copies feed the RTD "
                              "generator: set method.rtd.masking_ratio instead")
        options = cls.method_options(options)
        spec = super().check_config(mlm=mlm, cached_step=cached_step, options=options, **kwargs)
        return replace(spec, mlm_probability=options.masking_ratio)

    def forward_loss(self, batch: dict[str, torch.Tensor], extras: Mapping[str, torch.Tensor] | None = None,
                     ) -> tuple[torch.Tensor, None, int]:
        """``InfoNCE(gather(z)) + lambda_weight * RTD`` (official ``models.py:169-273``): the views' [CLS] states
        ``h`` (B, V, D), the projector's ``z = head(h)`` (B, V, D); the contrastive loss on the gathered ``z``
        (DDP: the official all-gathers z1, z2, ``models.py:215-237``), the RTD loss on this rank's sequences
        (B * V, example-major as ``mlm_input_ids.view(-1, T)``), conditioned on ``z`` (or ``h`` with
        ``condition=before_head``).  Returns ``(loss, None, examples the contrastive loss saw)``."""
        ids, mask = batch["input_ids"], batch["attention_mask"]
        b, v, t = ids.shape
        h = self.model.sequence_states(batch).view(b, v, -1)
        z = self.model.embed_states(h, self.model.bias_states(batch), batch)
        gathered = self.gather_embeddings(z)
        loss = self.contrastive_loss(gathered, extras)
        if "mlm_input_ids" not in batch:  # a batch collated without masked copies: the contrastive loss only
            self._rtd_loss = None
            return loss, None, gathered.shape[0]
        cond = h if self.options.condition == "before_head" else z
        rtd = self.rtd(ids.view(b * v, t), batch["mlm_input_ids"].view(b * v, t), mask.view(b * v, t),
                       cond.reshape(b * v, -1))
        self._rtd_loss = rtd.detach()
        return loss + self.options.lambda_weight * rtd, None, gathered.shape[0]

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor | None:
        """The base step (its loss already holds ``lambda_weight * RTD``); logs ``train/rtd_loss``."""
        loss = super().training_step(batch, batch_idx)
        if loss is not None and self._rtd_loss is not None:
            self.log("train/rtd_loss", self._rtd_loss, batch_size=int(batch["input_ids"].shape[0]))
        return loss
