"""The embedding model: sentences -> template input -> backbone (+ prompt module) -> pooling (- template bias) ->
head.  ONE object serves training (its ``forward`` on collated batches), validation and test (``encode``),
``cselab.load`` and the sentence-transformers export (``save`` / ``load``: the exported folder runs this file).

Its parts, each one concept and one file of this package:

* template input (:mod:`.template_input`, ``ViewCollate``): sentence -> template-wrapped ids, the index of the
  representation token, the period rule, template-bias rows;
* backbone (:mod:`.backbone`, ``Encoder``): the untouched ``AutoModel`` run with the prompt module of
  ``tuning`` (deep / input-layer prefix :mod:`.prefix`, or the soft-template table);
* pooling (:mod:`.pooling`), template bias (:mod:`.template_bias`), head (:mod:`.heads`);
* at test only, after the head: the optional BERT-whitening transform (:mod:`.whitening`, :attr:`EmbeddingModel.whitening`),
  fitted by the run's evaluation (:mod:`cselab.evaluation.whitening`) and saved with the model.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from .backbone import Encoder
from .collates import build_collate
from .embedding_folder import load_folder, save_folder
from .encode_loop import TokenCache, eval_mode, in_length_order
from .pooling import needs_hidden_states, pool
from .spec import EmbeddingSpec, TuningSpec
from .template_input import ViewCollate
from .whitening import Whitening, install_on_load


class EmbeddingModel(nn.Module):
    """The inference path of every method (and the forward of its training step).

    Args:
        backbone: the :class:`Encoder` (prompt modules already added by :meth:`add_prompt`, or added here from
            ``spec.tuning`` when ``apply_tuning``).
        tokenizer: the backbone's Hugging Face tokenizer.
        head: the projection head (``MLPHead``, ``MLMTransformHead``) or None.
        spec: what the model is (:class:`.spec.EmbeddingSpec`, saved as ``cselab_model.json``); replace it with
            :meth:`respec`.
    """

    def __init__(self, backbone: Encoder, tokenizer, head: nn.Module | None, spec: EmbeddingSpec,
                 apply_tuning: bool = True) -> None:
        super().__init__()
        if not isinstance(spec, EmbeddingSpec):
            raise TypeError(f"EmbeddingModel(spec=...): expected an EmbeddingSpec, got {type(spec).__name__} "
                            "(EmbeddingSpec.from_dict reads a saved dict)")
        self.backbone = backbone
        self.tokenizer = tokenizer
        self.head = head
        self.spec = spec
        #: BERT-whitening applied after the head by ``encode(encoder="test")`` (:meth:`set_whitening`), or None
        self.whitening: Whitening | None = None
        self.register_load_state_dict_pre_hook(install_on_load)  # whitening.* in a state dict installs one
        self._collates: dict[tuple[str, int, int | None], ViewCollate] = {}
        self._token_cache = TokenCache(4)  # encode's token ids of the last 4 sentence lists
        if apply_tuning:
            self.add_prompt(spec.tuning)

    def respec(self, **changes: Any) -> None:
        """Replace fields of :attr:`spec` (e.g. ``eval_batch_size``); the cached template inputs are rebuilt.

        Raises:
            ConfigError: a new value out of its range.
        """
        self.spec = dataclasses.replace(self.spec, **changes)
        self._collates.clear()
        self._token_cache.clear()

    # ----------------------------------------------------------------------------------------- prompt module
    def add_prompt(self, tuning: TuningSpec) -> None:
        """Add the prompt module of ``tuning`` (:class:`.spec.TuningSpec`) to the untouched backbone, with the
        spec's options, frozen unless ``full``: the frozen backbone, prefixes, the continuous template table (its
        slots: the train collate's templates) or LoRA adapters (:class:`.backbone.Encoder`'s methods).  Called
        when a model is built or loaded.

        Raises:
            ValueError: a prefix option the backbone cannot take (names the ``tuning.*`` key).
        """
        backbone, name = self.backbone, tuning.name
        if name == "frozen":
            backbone.freeze_backbone()
        elif name == "prefix":
            backbone.add_prefix(tuning.pre_seq_len, variant=tuning.variant, positions=tuning.prefix_positions,
                                prefix_projection=tuning.prefix_projection,
                                prefix_hidden_size=tuning.prefix_hidden_size, dropout=tuning.dropout_value)
        elif name == "soft_prompt":
            backbone.add_soft_template(self.collate("train").soft_init_ids)
        elif name == "lora":
            backbone.add_lora(r=tuning.r, alpha=tuning.alpha, dropout=tuning.dropout_value,
                              target_modules=tuning.target_modules, bias=tuning.bias)

    def merge_lora(self) -> None:
        """Fold the LoRA adapters into the backbone (:meth:`.backbone.Encoder.merge_lora`); ``tuning`` becomes
        ``TuningSpec("full", merged=<the LoRA config>)`` so that :meth:`save` writes a plain model.

        Raises:
            ValueError: the model has no LoRA adapters.
        """
        lora = self.spec.tuning.to_dict()
        self.backbone.merge_lora()
        self.respec(tuning=TuningSpec("full", merged=lora))

    # ----------------------------------------------------------------------------------------- template input
    @property
    def representation_pooler(self) -> str:
        """The pooler applied to the backbone output (SimCSE's ``cls`` with a head is [CLS], then the head)."""
        pooler = self.spec.pooler
        return "cls_before_pooler" if pooler == "cls" and self.head is not None else pooler

    def collate(self, kind: str, mlm_seed: int = 0, pad_to_multiple_of: int | None = None) -> ViewCollate:
        """The template input of ``kind``: ``train`` (the method's views, truncation, denoising rows, MLM
        masks seeded by ``mlm_seed``), ``test`` (the eval view tokenized as the official test encoder: the whole
        string, the period rule, the bias only with ``denoise_at_eval``) or ``dev`` (the official in-training dev
        batcher when ``dev_encoder`` is set: its own period rule and denoising; else the test one); widths padded
        to a multiple of ``pad_to_multiple_of`` (None: not padded).  Built once per arguments, cached.

        Raises:
            ValueError: an unknown ``kind``.
        """
        if kind == "dev" and self.spec.dev_encoder is None:
            kind = "test"
        key = (kind, int(mlm_seed), pad_to_multiple_of)
        if key not in self._collates:
            self._collates[key] = build_collate(self.spec, self.tokenizer, self.backbone, kind, mlm_seed=int(mlm_seed),
                                                pad_to_multiple_of=pad_to_multiple_of)
        return self._collates[key]

    # ----------------------------------------------------------------------------------------- forward
    def sequence_states(self, batch: dict[str, torch.Tensor], rows: slice | None = None) -> torch.Tensor:
        """Pooled representations (n, D) of the batch's sequences, flattened example-major (row ``i * V + j`` is
        view ``j`` of example ``i``), of all B * V rows or of ``rows`` only (a chunk: the cached step,
        :mod:`cselab.methods.cached_step`).  No template bias, no head."""
        ids, mask = batch["input_ids"], batch["attention_mask"]
        b, v, t = ids.shape
        ids, mask, rep = ids.view(b * v, t), mask.view(b * v, t), batch["rep_index"].view(-1)
        tpl = batch.get("template_index")
        tpl = tpl.view(b * v, t) if tpl is not None else None
        if rows is not None:
            ids, mask, rep, tpl = ids[rows], mask[rows], rep[rows], tpl[rows] if tpl is not None else None
        pooler, layer = self.representation_pooler, self.spec.pool_layer
        out = self.backbone(ids, mask, output_hidden_states=needs_hidden_states(pooler, layer), template_index=tpl)
        return pool(pooler, out, mask, rep, layer=layer)

    def bias_states(self, batch: dict[str, torch.Tensor]) -> torch.Tensor | None:
        """The template-bias rows (R, D): the [MASK] state of the template alone, one row per distinct sentence
        length (PromptBERT Eq. 4, :mod:`.template_bias`); None without ``bias_input_ids``."""
        if "bias_input_ids" not in batch:
            return None
        out = self.backbone(batch["bias_input_ids"], batch["bias_attention_mask"],
                            position_ids=batch.get("bias_position_ids"))
        last = out.last_hidden_state
        return last[torch.arange(last.shape[0], device=last.device), batch["bias_rep_index"]]

    def forward_views(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Representations (B, V, D) of a collated batch and, with template-bias rows, the matching biases
        (B, V, D) (the [MASK] state of the template alone, PromptBERT Eq. 4), else None."""
        b, v = batch["input_ids"].shape[:2]
        h = self.sequence_states(batch).view(b, v, -1)
        bias = self.bias_states(batch)
        return h, None if bias is None else bias[batch["bias_row"]]

    def represent(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Sentence representations before the head: (B, V, D), template bias already subtracted."""
        h, bias = self.forward_views(batch)
        return h if bias is None else h - bias

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Embeddings (B, V, D) of a collated batch (:meth:`embed_states` of :meth:`forward_views`)."""
        b, v = batch["input_ids"].shape[:2]
        return self.embed_states(self.sequence_states(batch).view(b, v, -1), self.bias_states(batch), batch)

    def embed_states(self, h: torch.Tensor, bias_rows: torch.Tensor | None,
                     batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Embeddings (B, V, D) from the representations ``h`` (B, V, D) and the template-bias rows ``bias_rows``
        (R, D) or None (picked per sequence by ``batch["bias_row"]`` (B, V)): the head applied in training, and
        at evaluation unless the head trains only (``use_head_at_eval`` False).  PromptBERT Eq. 4 with its heads:
        ``head(h - h_hat)`` (``head_on=difference``) or ``head(h) - head(h_hat)`` (``each``, official sup BERT)."""
        bias = None if bias_rows is None else bias_rows[batch["bias_row"]]
        use_head = self.head is not None and (self.training or self.spec.use_head_at_eval)
        if bias is not None and use_head and self.spec.head_on == "each":
            return self.head(h) - self.head(bias)
        if bias is not None:
            h = h - bias
        return self.head(h) if use_head else h

    # ----------------------------------------------------------------------------------------- encode
    @property
    def device(self) -> torch.device:
        """The device of the backbone's weights."""
        return next(self.backbone.parameters()).device

    @torch.inference_mode()
    def encode(self, sentences: Sequence[str], batch_size: int | None = None, encoder: str = "test") -> torch.Tensor:
        """Embed sentences as at test (``encoder="test"``) or as the in-training dev evaluation that selects
        the checkpoint (``encoder="dev"``): (N, D) float32 on CPU, rows in input order; at test with a
        :attr:`whitening` transform, its output (N, k) (applied in float32 after the head).

        The one encode loop of cselab: sentences are tokenized once, sorted by token length (less padding),
        encoded in batches of ``batch_size`` (default ``eval_batch_size``, else 256 on GPU, 128 on CPU) under
        ``torch.inference_mode`` and ``eval_precision`` (``auto``: bf16 autocast on GPU, float32 on CPU; ``32``;
        ``bf16``), then put back in input order; every submodule's train/eval mode is restored after.  The
        tokenization of the last few sentence lists is cached (STS-B dev is encoded at every validation).

        Raises:
            ValueError: ``encoder`` is neither ``test`` nor ``dev``.
        """
        if encoder not in ("test", "dev"):
            raise ValueError(f"encode(encoder={encoder!r}): expected 'test' or 'dev'")
        collate, device = self.collate(encoder), self.device
        batch_size = batch_size or self.spec.eval_batch_size or (256 if device.type == "cuda" else 128)
        tokens = self._token_cache.tokens(collate, tuple(sentences))
        precision = self.spec.eval_precision
        bf16 = precision == "bf16" or (precision == "auto" and device.type == "cuda")
        autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16)

        whitening = self.whitening if encoder == "test" else None
        if whitening is not None and whitening.kernel.device != device:
            whitening.to(device)

        def run(idx: list[int]) -> torch.Tensor:
            batch = collate.build({collate.views[0].field: [tokens[i] for i in idx]})
            batch = {k: t.to(device, non_blocking=True) for k, t in batch.items()}
            with autocast:
                z = self(batch)[:, 0].float()
            return (z if whitening is None else whitening(z)).cpu()  # float32, outside autocast

        with eval_mode(self):  # every submodule's mode restored after (a shared backbone too)
            out = in_length_order(tokens, batch_size, run)
        if out is None:
            return torch.zeros(0, self.embedding_dim if whitening is None else whitening.out_features)
        return out

    def set_whitening(self, whitening: Whitening | None) -> None:
        """Install (None: remove) the whitening transform that ``encode(encoder="test")`` applies after the head,
        on the model's device, saved with the model; never in training or the dev encoder.

        Raises:
            ValueError: its input dimension is not :attr:`embedding_dim`.
        """
        if whitening is not None and whitening.in_features != self.embedding_dim:
            raise ValueError(f"whitening: fitted on {whitening.in_features}-d embeddings, this model's are "
                             f"{self.embedding_dim}-d")
        self.whitening = None if whitening is None else whitening.to(self.device)

    @property
    def embedding_dim(self) -> int:
        """D of :meth:`forward`'s embeddings (before whitening): the backbone's hidden size (the heads keep it)."""
        return int(self.backbone.hidden_size)

    def num_trainable_parameters(self) -> int:
        """Number of parameters with ``requires_grad`` (the prompt module and head of a frozen backbone)."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad)

    def describe(self) -> dict[str, Any]:
        """What the model does at test, as plain data (the model cards, the export's report and the MTEB encoder
        line read it): ``{"pooler", "head", "use_head", "head_on", "denoise", "prompt_kind" (none | prefix |
        input_layer | soft | lora), "template", "add_period", "pool_layer", "whitening"}`` from its test collate,
        spec, head, prompt module and whitening transform (``whitening``: None or ``{"dim": D, "k": k,
        "normalize": bool}``)."""
        collate, w = self.collate("test"), self.whitening
        return {"pooler": self.representation_pooler,
                "head": "none" if self.head is None else type(self.head).__name__,
                "use_head": self.head is not None and self.spec.use_head_at_eval,
                "head_on": self.spec.head_on, "denoise": collate.denoise,
                "prompt_kind": self.backbone.prompt_kind,
                "template": collate.views[0].template, "add_period": collate.add_period,
                "pool_layer": self.spec.pool_layer,
                "whitening": None if w is None else {"dim": w.in_features, "k": w.out_features,
                                                     "normalize": w.normalize}}

    # ----------------------------------------------------------------------------------------- save / load
    def save(self, folder: str | os.PathLike) -> None:
        """Write the model into ``folder`` (:func:`.embedding_folder.save_folder`: ``cselab_model.json``,
        ``backbone/`` config and tokenizer, ``cselab_model.safetensors``); :meth:`load` rebuilds it."""
        save_folder(self, folder)

    @classmethod
    def load(cls, folder: str | os.PathLike, device: str | torch.device = "cpu") -> EmbeddingModel:
        """The model :meth:`save` wrote into ``folder`` (local files only; :func:`.embedding_folder.load_folder`).

        Raises:
            FileNotFoundError: ``folder`` lacks ``cselab_model.json`` (not a saved cselab model).
            ConfigError: its ``cselab_model.json`` is not a spec this cselab reads.
        """
        return load_folder(cls, folder, device)

