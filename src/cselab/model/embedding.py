"""The embedding model: sentences -> template input -> backbone (+ prompt module) -> pooling (- template bias) ->
head.  ONE object serves training (its ``forward`` on collated batches), validation and test (``encode``),
``cselab.load`` and the sentence-transformers export (``save`` / ``load``: the exported folder runs this file).

Its parts, each one concept and one file of this package:

* template input (:mod:`.template_input`, ``ViewCollate``): sentence -> template-wrapped ids, the index of the
  representation token, the period rule, template-bias rows;
* backbone (:mod:`.backbone`, ``Encoder``): the untouched ``AutoModel`` run with the prompt module of
  ``tuning`` (deep / input-layer prefix :mod:`.prefix`, or the soft-template table);
* pooling (:mod:`.pooling`), template bias (:mod:`.template_bias`), head (:mod:`.heads`).

The package imports nothing of cselab outside itself (relative imports only), so that an exported folder can
hold these very files and ``SentenceTransformer(folder, trust_remote_code=True)`` runs them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from .backbone import Encoder
from .decoder_input import PromptCollate
from .heads import MLMTransformHead, build_head
from .pooling import needs_hidden_states, pool
from .template_input import ViewCollate, ViewSpec

CONFIG_FILE = "cselab_model.json"
WEIGHTS_FILE = "cselab_model.safetensors"
BACKBONE_DIR = "backbone"
ENCODERS = ("test", "dev")


def in_length_order(tokens: Sequence[Sequence[int]], batch_size: int,
                    run: Callable[[list[int]], torch.Tensor]) -> torch.Tensor | None:
    """cselab's one sort-batch-unsort loop: the sentences' indices sorted by token length (less padding), cut into
    batches of ``batch_size``, ``run(indices)`` -> (b, ...) rows for each batch, the rows put back in input order:
    (N, ...) on ``run``'s device, or None for no sentence.  Used by :meth:`EmbeddingModel.encode` and the
    representations that are not the embedding model (:mod:`cselab.representations`)."""
    order = sorted(range(len(tokens)), key=lambda i: len(tokens[i]))
    chunks = [run(order[start : start + batch_size]) for start in range(0, len(order), batch_size)]
    if not chunks:
        return None
    out = torch.cat(chunks)
    result = torch.empty_like(out)
    result[torch.tensor(order, dtype=torch.long, device=out.device)] = out
    return result


class EmbeddingModel(nn.Module):
    """The inference path of every method (and the forward of its training step).

    Args:
        backbone: the :class:`Encoder` (prompt modules already added by :meth:`add_prompt`, or added here from
            ``config["tuning"]`` when ``apply_tuning``).
        tokenizer: the backbone's Hugging Face tokenizer.
        head: the projection head (``MLPHead``, ``MLMTransformHead``) or None.
        config: what the model is, JSON-serialisable (saved as ``cselab_model.json``):

            * ``pooler``: the pooler applied to the backbone output (:data:`.pooling.POOLERS`);
            * ``use_head_at_eval``: apply the head at evaluation (False: SimCSE's ``mlp_only_train``);
            * ``head_on``: with a template bias, ``difference`` = head(h - h_hat) or ``each`` = head(h) - head(h_hat);
            * ``train_views`` / ``eval_view``: ``[field, template | None]`` pairs (the method's views);
            * ``mask_index``, ``add_period_at_eval``: the template's representation [MASK] and the period rule;
            * ``denoise`` (``none`` | ``position`` | ``pad``), ``denoise_at_eval``, ``denoise_positions``
              (``official`` | ``aligned``), ``dev_encoder`` (``{"add_period", "denoise"}`` or None);
            * ``max_seq_len`` (training truncation), ``eval_max_seq_len``, ``eval_batch_size``, ``eval_precision``;
            * ``mlm_probability`` (training collate only), ``tuning`` (``{"name": full|frozen|prefix|soft_prompt|
              lora, ...}``), ``head`` (``mlp`` | ``mlm_transform`` | ``none``), ``family``;
            * decoders (``family: decoder``, :class:`.decoder_input.PromptCollate`): ``pool_layer`` (the hidden
              state ``last_token`` reads: -1, or -2 for PretCoT / KE), ``eval_rules`` (the official evaluation
              sentence rules; the decoder prompts set it, and the official code applies them only with a
              template), ``decode_cleanup`` (the training truncation's decode).

    Raises:
        ValueError: a config value out of its range (names the key).
    """

    def __init__(self, backbone: Encoder, tokenizer, head: nn.Module | None, config: dict[str, Any],
                 apply_tuning: bool = True) -> None:
        super().__init__()
        self.backbone = backbone
        self.tokenizer = tokenizer
        self.head = head
        self.config = dict(config)
        self._collates: dict[str, ViewCollate] = {}
        self._token_cache: dict = {}
        if apply_tuning:
            self.add_prompt(self.config.get("tuning") or {"name": "full"})

    # ----------------------------------------------------------------------------------------- prompt module
    @property
    def soft_templates(self) -> list[str] | None:
        """The templates sharing the continuous-template table (``tuning=soft_prompt``), in slot order."""
        if (self.config.get("tuning") or {}).get("name") != "soft_prompt":
            return None
        views = [t for _, t in [*self.config["train_views"], self.config["eval_view"]]]
        if any(t is None for t in views):
            raise ValueError("tuning=soft_prompt needs a template on every view (choose a prompt)")
        return list(dict.fromkeys(views))

    def add_prompt(self, tuning: dict[str, Any]) -> None:
        """Add the prompt module of ``tuning`` to the untouched backbone (and freeze it unless ``full``).

        Raises:
            ValueError: an unknown ``tuning.name`` or a bad prefix option (names the ``tuning.*`` key).
        """
        cfg = {k: v for k, v in dict(tuning).items() if k != "_doc"}
        name = cfg.pop("name", "full")
        if name == "full":
            return
        if name == "frozen":
            self.backbone.freeze_backbone()
        elif name == "prefix":
            self.backbone.add_prefix(
                int(cfg.get("pre_seq_len", 16)),
                variant=cfg.get("variant", "deep"),
                positions=cfg.get("prefix_positions", "shifted"),
                prefix_projection=bool(cfg.get("prefix_projection", False)),
                prefix_hidden_size=int(cfg.get("prefix_hidden_size", 512)),
                dropout=float(cfg.get("dropout", 0.1)),
            )
        elif name == "soft_prompt":
            self.backbone.add_soft_template(self.collate("train").soft_init_ids)
        elif name == "lora":
            self.backbone.add_lora(r=int(cfg.get("r", 64)), alpha=cfg.get("alpha", 16),
                                   dropout=float(cfg.get("dropout", 0.05)),
                                   target_modules=cfg.get("target_modules", "all-linear"), bias=cfg.get("bias", "none"))
        else:
            raise ValueError(f"tuning.name={name!r}: expected full, frozen, prefix, soft_prompt or lora")

    def merge_lora(self) -> None:
        """Fold the LoRA adapters into the backbone (:meth:`.backbone.Encoder.merge_lora`); ``tuning`` becomes
        ``{"name": "full", "merged": <the LoRA config>}`` so that :meth:`save` writes a plain model.

        Raises:
            ValueError: the model has no LoRA adapters.
        """
        lora = dict(self.config.get("tuning") or {})
        self.backbone.merge_lora()
        self.config["tuning"] = {"name": "full", "merged": lora}

    # ----------------------------------------------------------------------------------------- template input
    @property
    def representation_pooler(self) -> str:
        """The pooler applied to the backbone output (SimCSE's ``cls`` with a head is [CLS], then the head)."""
        pooler = self.config.get("pooler", "cls")
        return "cls_before_pooler" if pooler == "cls" and self.head is not None else pooler

    def collate(self, kind: str) -> ViewCollate:
        """The template input of ``kind``: ``train`` (the method's views, truncation, denoising rows, MLM
        masks), ``test`` (the eval view tokenized as the official test encoder: the whole string, the period
        rule, the bias only with ``denoise_at_eval``) or ``dev`` (the official in-training dev batcher when
        ``dev_encoder`` is set: its own period rule and denoising; else the test one).  Built once, cached.

        Raises:
            ValueError: an unknown ``kind``.
        """
        if kind == "dev" and not self.config.get("dev_encoder"):
            kind = "test"
        if kind not in self._collates:
            self._collates[kind] = self._build_collate(kind)
        return self._collates[kind]

    def _build_collate(self, kind: str) -> ViewCollate | PromptCollate:
        cfg = self.config
        if self.backbone.is_decoder:
            return self._build_prompt_collate(kind)
        denoise_mode = cfg.get("denoise", "none")
        if kind == "train":
            views, add_period, denoise, official = cfg["train_views"], False, True, False
        elif kind == "test":
            views, official = [cfg["eval_view"]], True
            add_period, denoise = bool(cfg.get("add_period_at_eval", False)), bool(cfg.get("denoise_at_eval"))
        elif kind == "dev":
            dev = cfg["dev_encoder"]
            views, official = [cfg["eval_view"]], False
            add_period, denoise = bool(dev.get("add_period", False)), bool(dev.get("denoise", False))
        else:
            raise ValueError(f"collate({kind!r}): expected train, test or dev")
        training = kind == "train"
        return ViewCollate(
            self.tokenizer,
            [ViewSpec(field, template) for field, template in views],
            max_seq_len=cfg.get("max_seq_len", 32) if training else cfg.get("eval_max_seq_len"),
            denoise=denoise_mode if denoise else "none",
            mask_index=int(cfg.get("mask_index", -1)),
            add_period=add_period,
            position_offset=self.backbone.position_offset if cfg.get("denoise_positions") == "aligned" else 0,
            max_positions=self.backbone.max_positions,
            soft_templates=self.soft_templates,
            official_test_tokenization=official,
            mlm_probability=float(cfg.get("mlm_probability", 0.0)) if training else 0.0,
        )

    def _build_prompt_collate(self, kind: str) -> PromptCollate:
        """A decoder's template input: training truncates the sentence (``max_seq_len``), test and dev apply the
        official evaluation sentence rules (``eval_rules``) and never truncate (kongds/scaling_sentemb
        ``evaluation.py:197-209``, ``ft_llm.py:221-239``)."""
        cfg = self.config
        if kind not in ("train", "test", "dev"):
            raise ValueError(f"collate({kind!r}): expected train, test or dev")
        training = kind == "train"
        views = cfg["train_views"] if training else [cfg["eval_view"]]
        return PromptCollate(self.tokenizer, [ViewSpec(field, template) for field, template in views],
                             max_seq_len=cfg.get("max_seq_len", 32) if training else cfg.get("eval_max_seq_len"),
                             eval_rules=not training and bool(cfg.get("eval_rules", False)),
                             decode_cleanup=cfg.get("decode_cleanup"))

    # ----------------------------------------------------------------------------------------- forward
    def forward_views(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Representations (B, V, D) of a collated batch and, with template-bias rows, the matching biases
        (B, V, D) (the [MASK] state of the template alone, PromptBERT Eq. 4), else None."""
        ids, mask = batch["input_ids"], batch["attention_mask"]
        b, v, t = ids.shape
        pooler = self.representation_pooler
        tpl = batch.get("template_index")
        layer = int(self.config.get("pool_layer", -1))
        out = self.backbone(ids.view(b * v, t), mask.view(b * v, t),
                            output_hidden_states=needs_hidden_states(pooler, layer),
                            template_index=tpl.view(b * v, t) if tpl is not None else None)
        h = pool(pooler, out, mask.view(b * v, t), batch["rep_index"].view(-1), layer=layer).view(b, v, -1)
        if "bias_input_ids" not in batch:
            return h, None
        bias_out = self.backbone(
            batch["bias_input_ids"], batch["bias_attention_mask"], position_ids=batch.get("bias_position_ids")
        )
        last = bias_out.last_hidden_state
        bias = last[torch.arange(last.shape[0], device=last.device), batch["bias_rep_index"]]  # (R, D)
        return h, bias[batch["bias_row"]]

    def represent(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Sentence representations before the head: (B, V, D), template bias already subtracted."""
        h, bias = self.forward_views(batch)
        return h if bias is None else h - bias

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Embeddings (B, V, D) of a collated batch: the head applied in training, and at evaluation unless the
        head trains only (``use_head_at_eval`` False).  PromptBERT Eq. 4 with its heads: ``head(h - h_hat)``
        (``head_on=difference``) or ``head(h) - head(h_hat)`` (``each``, official sup BERT)."""
        h, bias = self.forward_views(batch)
        use_head = self.head is not None and (self.training or bool(self.config.get("use_head_at_eval")))
        if bias is not None and use_head and self.config.get("head_on", "difference") == "each":
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
        the checkpoint (``encoder="dev"``): (N, D) float32 on CPU, rows in input order.

        The one encode loop of cselab: sentences are tokenized once, sorted by token length (less padding),
        encoded in batches of ``batch_size`` (default ``eval_batch_size``, else 256 on GPU, 128 on CPU) under
        ``torch.inference_mode`` and ``eval_precision`` (``auto``: bf16 autocast on GPU, float32 on CPU; ``32``;
        ``bf16``), then put back in input order; every submodule's train/eval mode is restored after.  The
        tokenization of the last few sentence lists is cached (STS-B dev is encoded at every validation).

        Raises:
            ValueError: ``encoder`` is neither ``test`` nor ``dev``.
        """
        if encoder not in ENCODERS:
            raise ValueError(f"encode(encoder={encoder!r}): expected 'test' or 'dev'")
        collate = self.collate(encoder)
        device = self.device
        batch_size = batch_size or self.config.get("eval_batch_size") or (256 if device.type == "cuda" else 128)
        tokens = self._tokenized(collate, tuple(sentences))
        precision = str(self.config.get("eval_precision", "auto"))
        bf16 = precision == "bf16" or (precision == "auto" and device.type == "cuda")
        autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16)

        def run(idx: list[int]) -> torch.Tensor:
            batch = collate.build({collate.views[0].field: [tokens[i] for i in idx]})
            batch = {k: t.to(device, non_blocking=True) for k, t in batch.items()}
            with autocast:
                return self(batch)[:, 0].float().cpu()

        modes = [(m, m.training) for m in self.modules()]  # restored module by module (a shared backbone too)
        self.eval()
        try:
            out = in_length_order(tokens, batch_size, run)
        finally:
            for module, mode in modes:
                module.training = mode
        return out if out is not None else torch.zeros(0, self.backbone.hidden_size)

    def _tokenized(self, collate: ViewCollate, sentences: tuple[str, ...]) -> list[list[int]]:
        """Token ids per sentence for ``encode``, from a cache of the last 4 sentence lists."""
        key = (id(collate), sentences)
        hit = self._token_cache.get(key)
        if hit is None or hit[0] is not collate:  # the collate itself is kept, so its id is never reused
            hit = self._token_cache[key] = (collate, collate.tokenize(list(sentences)))
            while len(self._token_cache) > 4:
                self._token_cache.pop(next(iter(self._token_cache)))
        return hit[1]

    def describe(self) -> dict[str, Any]:
        """What the model does at test: ``{"pooler", "head", "use_head", "head_on", "denoise", "prompt_kind"
        (none | prefix | input_layer | soft | lora), "template", "add_period", "pool_layer"}`` (model cards, the
        export's report)."""
        collate, encoder = self.collate("test"), self.backbone
        kind = "none"
        if encoder.tuning == "prefix":
            kind = "input_layer" if encoder.prefix_variant == "input_layer" else "prefix"
        elif encoder.tuning in ("soft_prompt", "lora"):
            kind = "soft" if encoder.tuning == "soft_prompt" else "lora"
        return {"pooler": self.representation_pooler,
                "head": "none" if self.head is None else type(self.head).__name__,
                "use_head": self.head is not None and bool(self.config.get("use_head_at_eval")),
                "head_on": self.config.get("head_on"), "denoise": collate.denoise, "prompt_kind": kind,
                "template": collate.views[0].template, "add_period": collate.add_period,
                "pool_layer": int(self.config.get("pool_layer", -1))}

    # ----------------------------------------------------------------------------------------- save / load
    def save(self, folder: str | os.PathLike) -> None:
        """Write the model into ``folder``: ``cselab_model.json`` (this config + the backbone's family and
        pooler-layer presence), ``backbone/`` (the backbone's Hugging Face config and tokenizer) and
        ``cselab_model.safetensors`` (every weight: backbone, prompt module, head; the MLM head of training
        is not part of the embedding model).  :meth:`load` rebuilds the same model from it."""
        from safetensors.torch import save_model

        os.makedirs(folder, exist_ok=True)
        base = self.backbone.base_model
        config = {**self.config, "family": self.backbone.family,
                  "has_pooler_layer": getattr(base, "pooler", None) is not None,
                  "head": _head_name(self.head)}
        with open(os.path.join(folder, CONFIG_FILE), "w", encoding="utf-8") as f:
            json.dump(config, f, indent=2)
        base.config.save_pretrained(os.path.join(folder, BACKBONE_DIR))
        self.tokenizer.save_pretrained(os.path.join(folder, BACKBONE_DIR))
        mlm = self.backbone.mlm
        self.backbone.mlm = None  # not saved: training only
        try:
            save_model(self, os.path.join(folder, WEIGHTS_FILE))
        finally:
            self.backbone.mlm = mlm

    @classmethod
    def load(cls, folder: str | os.PathLike, device: str | torch.device = "cpu") -> EmbeddingModel:
        """The model :meth:`save` wrote into ``folder`` (local files only).

        Raises:
            FileNotFoundError: ``folder`` lacks ``cselab_model.json`` (not a saved cselab model).
        """
        from safetensors.torch import load_model
        from transformers import AutoConfig, AutoModel, AutoTokenizer

        path = os.path.join(folder, CONFIG_FILE)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{path}: not a saved cselab embedding model (no {CONFIG_FILE})")
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
        hf_dir = os.path.join(folder, BACKBONE_DIR)
        hf_config = AutoConfig.from_pretrained(hf_dir, local_files_only=True)
        try:  # BERT / RoBERTa-like: no pooler layer when the saved backbone had none
            model = AutoModel.from_config(hf_config, add_pooling_layer=bool(config.get("has_pooler_layer", True)))
        except TypeError:
            model = AutoModel.from_config(hf_config)
        tokenizer = AutoTokenizer.from_pretrained(hf_dir, local_files_only=True)
        head = build_head(config.get("head", "none"), int(hf_config.hidden_size), init="pytorch")  # weights: below
        out = cls(Encoder(model, config.get("family", "bert")), tokenizer, head, config)
        load_model(out, os.path.join(folder, WEIGHTS_FILE), strict=True, device=str(device))
        return out.to(device).eval()


def _head_name(head: nn.Module | None) -> str:
    if head is None:
        return "none"
    return "mlm_transform" if isinstance(head, MLMTransformHead) else "mlp"
