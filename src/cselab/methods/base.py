"""The shared contrastive LightningModule: views -> encoder -> representation (- template bias) -> head -> loss.

Every method is this module plus a choice of views (which field, which template), representation (pooler or
[MASK] state), denoising, head and loss.  Subclasses only say which views they train on and how they encode
at test; the forward path, the optimizer (AdamW, linear decay, no warm-up, weight decay 0, as all the official
implementations) and the evaluation ``encode`` live here.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.fabric.utilities.seed import _collect_rng_states, _set_rng_states

from cselab.data.collate import ViewCollate, ViewSpec
from cselab.encoders.backbone import load_backbone, load_mlm_transform
from cselab.encoders.heads import build_head
from cselab.encoders.poolers import POOLERS, needs_hidden_states, pool
from cselab.files import atomic_write_text
from cselab.losses import build_loss


class NonFiniteLossError(FloatingPointError):
    """The training loss became NaN or inf (the batch's sentences are saved beside the checkpoints)."""


class ContrastiveMethod(L.LightningModule):
    """Base of all methods.

    Args:
        backbone: ``{"name_or_path": str, "family": "bert"|"roberta"}`` (``conf/backbone``).
        setting: ``unsup`` (one sentence, dropout views) or ``sup`` (NLI triplets sent0, sent1, hard_neg).
        pooler: representation: a name of :data:`cselab.encoders.poolers.POOLERS`; with ``head=mlp``,
            ``cls`` means SimCSE's [CLS] + MLP.
        head: ``mlp`` (Linear + Tanh) | ``mlm_transform`` (dense + GELU + LayerNorm) | ``none``.
        head_init: ``bert`` (N(0, ``initializer_range``) weights, zero biases: the official ``cl_init``),
            ``pretrained_mlm`` (the checkpoint's ``cls.predictions.transform``: PromptBERT sup BERT, OptiPrompt)
            or ``pytorch`` (PyTorch's default init); see :mod:`cselab.encoders.heads`.
        mlp_only_train: apply the head in training only (SimCSE unsup; PromptBERT unsup).
        head_on: with a template bias, ``difference`` = head(h - h_hat) (PromptBERT unsup, RoBERTa sup) or
            ``each`` = head(h) - head(h_hat) (PromptBERT sup BERT, official code).
        denoise_at_eval: subtract the template bias at test too (PromptBERT sup, whose head sees it).
        dev_encoder: how STS-B dev (checkpoint selection) encodes, when it differs from the test encoder:
            ``{"add_period": bool, "denoise": bool}`` (the official trainers' dev batcher: PromptBERT without the
            period rule and with the template bias subtracted, CoT-BERT without the period rule), or None: the
            test encoder (``eval.dev_encoder=test``).  See :meth:`encode`.
        loss: loss config (``name`` + its arguments, see :func:`cselab.losses.build_loss`).
        prompt: template config or None (``templates`` per family, ``mask_index``, ``add_period_at_eval``).
        denoise: ``none`` | ``position`` | ``pad`` (training only).
        denoise_positions: position ids of the ``position`` bias rows: ``official`` (counted from 0 for every
            family, as Prompt-BERT's ``get_delta``, ``prompt_bert/models.py:96, 293``: for RoBERTa that is NOT the
            numbering of its real inputs, which starts at ``padding_idx + 1``) or ``aligned`` (the backbone's own
            numbering, so every template token of the bias row has the position it has in the real input).
            BERT: the same.
        max_seq_len: sentence truncation in training (tokens).
        eval_max_seq_len: sentence truncation at evaluation (None: none, as SimCSE's evaluator).
        eval_batch_size: sentences per forward pass in :meth:`encode` (None: 256 on a GPU, 128 on CPU).
        eval_precision: :meth:`encode`'s arithmetic: ``auto`` (bf16 autocast on a GPU, float32 on CPU), ``32``
            (float32 everywhere: scores identical to SimCSE's evaluator) or ``bf16`` (bf16 autocast on GPU and
            CPU; faster on CPUs with AVX512-BF16 / AMX, scores differ in the second decimal).
        lr, weight_decay, warmup_ratio: AdamW and linear schedule.
        train: False for methods evaluated without fine-tuning.
        tuning: what trains: ``{"name": "full"}`` (the whole backbone), ``frozen`` (heads only), ``prefix``
            (deep continuous prompts, P-tuning v2: ``pre_seq_len``, ``variant``, ``prefix_projection``,
            ``prefix_hidden_size``, ``dropout``, ``prefix_positions``; see :mod:`cselab.encoders.prefix`) or
            ``soft_prompt`` (the template tokens become trainable vectors initialised from their embeddings).
            Frozen backbones stay in train mode (dropout) and checkpoints hold only the trained tensors.
        mlm: DCPCSE's auxiliary MLM loss ``{"weight": 0.1, "decay": 0.95, "decay_steps": 100,
            "probability": 0.15, "lm_head": "untied"}`` or None: loss = CL + weight * decay^(step / decay_steps)
            * MLM.  Needs a backbone with its MLM head (refused otherwise).  ``lm_head``: ``untied`` (official
            DCPCSE: the whole LM head trains, its V x D decoder a separate copy of the pretrained one) or
            ``tied`` (the decoder stays tied to the frozen word embeddings; only the head's own layers train).
            The prefix is drawn once per step for the contrastive and the MLM pass (official ``get_prompt``).
        on_nonfinite: ``stop`` (raise :class:`NonFiniteLossError`) or ``skip`` (no optimizer step) when the
            loss is NaN / inf; either way the step and the batch's sentences are written to
            ``<run dir>/nonfinite_step<N>.json``.
        negatives: ``global`` (DDP: every rank's loss sees the embeddings of all ranks, gathered with
            gradients, see :meth:`gather_embeddings`) or ``per_device`` (each rank's loss over its own batch).

    Raises:
        ValueError: unknown pooler / setting, or a config combination that cannot work (named keys).
    """

    def __init__(
        self,
        backbone: dict,
        setting: str = "unsup",
        pooler: str = "cls",
        head: str = "mlp",
        mlp_only_train: bool = True,
        head_on: str = "difference",
        denoise_at_eval: bool = False,
        head_init: str = "bert",
        dev_encoder: dict | None = None,
        denoise_positions: str = "official",
        loss: dict | None = None,
        prompt: dict | None = None,
        denoise: str = "none",
        max_seq_len: int = 32,
        eval_max_seq_len: int | None = None,
        eval_batch_size: int | None = None,
        eval_precision: str = "auto",
        lr: float = 3e-5,
        weight_decay: float = 0.0,
        warmup_ratio: float = 0.0,
        train: bool = True,
        on_nonfinite: str = "stop",
        negatives: str = "global",
        tuning: dict | None = None,
        mlm: dict | None = None,
        **extra: Any,
    ) -> None:
        super().__init__()
        self.save_hyperparameters(logger=False)  # in checkpoints; the loggers get the run's config (pipeline)
        if pooler not in POOLERS:
            raise ValueError(f"method.pooler={pooler!r}: expected one of {POOLERS}")
        if setting not in ("unsup", "sup"):
            raise ValueError(f"setting.name={setting!r}: expected 'unsup' or 'sup'")
        if pooler == "mask" and not prompt:
            raise ValueError("method.pooler=mask needs a template: choose a prompt (prompt=promptbert ...)")
        if denoise != "none" and not prompt:
            raise ValueError(f"denoise={denoise} needs a template: choose a prompt or set denoise=none")
        self.mlm = dict(mlm) if mlm else None
        self.encoder, self.tokenizer = load_backbone(
            backbone["name_or_path"], backbone.get("family"), mlm_head=self.mlm is not None
        )
        self.encoder.train()  # from_pretrained returns eval mode; dropout makes the unsup views
        self.tuning = dict(tuning) if tuning else {"name": "full"}
        pretrained = (load_mlm_transform(backbone["name_or_path"])
                      if head_init == "pretrained_mlm" and head != "none" else None)
        std = float(getattr(self.encoder.model.config, "initializer_range", 0.02))
        self.head = build_head(head, self.encoder.hidden_size, init=head_init, std=std, pretrained=pretrained)
        self.loss_fn = build_loss(loss or {"name": "infonce"})
        self.setting = setting
        self.pooler = pooler
        self.mlp_only_train = mlp_only_train
        if head_on not in ("difference", "each"):
            raise ValueError(f"method.head_on={head_on!r}: expected 'difference' or 'each'")
        if denoise_at_eval and denoise == "none":
            raise ValueError("method.denoise_at_eval=true needs denoise=position or pad")
        self.head_on = head_on
        self.denoise_at_eval = denoise_at_eval
        self.dev_encoder = dict(dev_encoder) if dev_encoder else None
        if denoise_positions not in ("official", "aligned"):
            raise ValueError(f"denoise_positions={denoise_positions!r}: expected 'official' or 'aligned'")
        self.denoise_positions = denoise_positions
        if self.dev_encoder and set(self.dev_encoder) - {"add_period", "denoise"}:
            raise ValueError(f"method.dev_encoder={self.dev_encoder}: expected keys add_period, denoise")
        self.prompt = dict(prompt) if prompt else None
        self.denoise = denoise
        self.max_seq_len = max_seq_len
        self.eval_max_seq_len = eval_max_seq_len
        self.eval_batch_size = eval_batch_size
        if str(eval_precision) not in ("auto", "32", "bf16"):
            raise ValueError(f"eval.precision={eval_precision!r}: expected auto, 32 or bf16")
        self.eval_precision = str(eval_precision)
        self.do_train = train
        if on_nonfinite not in ("stop", "skip"):
            raise ValueError(f"method.on_nonfinite={on_nonfinite!r}: expected 'stop' or 'skip'")
        self.on_nonfinite = on_nonfinite
        if negatives not in ("global", "per_device"):
            raise ValueError(f"negatives={negatives!r}: expected 'global' or 'per_device'")
        self.negatives = negatives
        self.skipped_nonfinite = 0
        self._train_collate: ViewCollate | None = None
        self._eval_collate: ViewCollate | None = None
        self._dev_collate: ViewCollate | None = None
        self._soft_templates: list[str] | None = None
        self._apply_tuning()

    # ----------------------------------------------------------------- tuning
    def _apply_tuning(self) -> None:
        """Freeze the backbone and add prompts as ``tuning`` says; unfreeze the MLM head's own layers."""
        cfg = dict(self.tuning)
        name = cfg.pop("name", "full")
        cfg.pop("_doc", None)
        if name == "full":
            pass
        elif name == "frozen":
            self.encoder.freeze_backbone()
        elif name == "prefix":
            self.encoder.add_prefix(
                int(cfg.get("pre_seq_len", 16)),
                variant=cfg.get("variant", "deep"),
                positions=cfg.get("prefix_positions", "shifted"),
                prefix_projection=bool(cfg.get("prefix_projection", False)),
                prefix_hidden_size=int(cfg.get("prefix_hidden_size", 512)),
                dropout=float(cfg.get("dropout", 0.1)),
            )
        elif name == "soft_prompt":
            if self.denoise != "none":
                raise ValueError("tuning=soft_prompt with template denoising is not supported (set denoise=none)")
            views = [v.template for v in [*self.train_views(), self.eval_view()]]
            if any(t is None for t in views):
                raise ValueError("tuning=soft_prompt needs a template on every view (choose a prompt)")
            self._soft_templates = list(dict.fromkeys(views))
            self.encoder.add_soft_template(self.train_collate.soft_init_ids)
        else:
            raise ValueError(f"tuning.name={name!r}: expected full, frozen, prefix or soft_prompt")
        if self.mlm is not None:
            if self.encoder.mlm is None:
                raise ValueError("method.mlm needs the backbone's MLM head")
            lm_head = self.mlm.get("lm_head", "untied")
            if lm_head not in ("untied", "tied"):
                raise ValueError(f"method.mlm.lm_head={lm_head!r}: expected 'untied' or 'tied'")
            if lm_head == "untied":
                self._untie_mlm_decoder()
            if name != "full":  # the head's own layers train (untied: the decoder copy too)
                for p in self._mlm_head_own_parameters():
                    p.requires_grad_(True)
        self._freeze_unused_layers()
        self.strict_loading = name == "full"

    def _freeze_unused_layers(self) -> None:
        """Freeze the layers no training step uses, so that every trainable parameter gets a gradient.

        The backbone's own pooler (dense + tanh) serves only ``pooler=cls`` without a head, and the MLM head's
        own layers only the MLM auxiliary loss (``method.mlm``).  Frozen, they keep their pretrained values
        (checkpoints and exports still hold them), stay out of the trainable-parameter count and the optimizer,
        and plain ``ddp`` works (DDP fails on a trainable parameter without a gradient unless it searches
        the graph for unused ones every step: ``ddp_find_unused_parameters_true``).
        """
        pooler = getattr(self.encoder.model, "pooler", None)
        if pooler is not None and self.representation_pooler != "cls":
            pooler.requires_grad_(False)
        if self.encoder.mlm is not None and self.mlm is None:
            for p in self._mlm_head_own_parameters():
                p.requires_grad_(False)

    def _untie_mlm_decoder(self) -> None:
        """Give the MLM head a decoder of its own: a trainable copy of the (pretrained, tied) decoder weight.

        Official DCPCSE ``RobertaForCL`` builds its ``lm_head`` after freezing the backbone and defines no
        ``get_output_embeddings``, so nothing ties it: the pretrained LM head, its V x D decoder included, is
        loaded as a separate module and trains (``dcpcse/models.py:429-430, 446-447``; docs/fidelity.md).
        """
        head = _mlm_head(self.encoder.mlm)
        decoder = getattr(head, "decoder", None) or getattr(getattr(head, "predictions", None), "decoder", None)
        if decoder is None:
            raise ValueError(f"method.mlm.lm_head=untied: cannot find the decoder of {type(head).__name__}")
        decoder.weight = torch.nn.Parameter(decoder.weight.detach().clone())
        self.encoder.mlm.config.tie_word_embeddings = False

    def _mlm_head_own_parameters(self) -> list[torch.nn.Parameter]:
        """The MLM head's parameters except its decoder weight, which is tied to the word embeddings."""
        model = self.encoder.model
        tied = model.get_input_embeddings().weight if hasattr(model, "get_input_embeddings") else None
        return [p for p in _mlm_head(self.encoder.mlm).parameters() if p is not tied]

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Record the method class (for :func:`cselab.load`); with a frozen backbone keep only the trained
        tensors (prompts, heads) and the backbone's identity."""
        checkpoint["cselab_method_class"] = f"{type(self).__module__}.{type(self).__qualname__}"
        checkpoint["rng_states"] = _collect_rng_states()
        if self.encoder.tuning == "full" and self.tuning.get("name", "full") == "full":
            return
        trained = {n for n, p in self.named_parameters() if p.requires_grad}
        checkpoint["state_dict"] = {k: v for k, v in checkpoint["state_dict"].items() if k in trained}
        checkpoint["backbone"] = dict(self.hparams.backbone)

    # ----------------------------------------------------------------- FLOPs (for MFU)
    #: FLOPs of the last training step on this rank's batch: its forward counted by ``torch.utils.flop_counter``
    #: once per distinct set of batch tensor shapes (padded width, bias rows, views), x3 for forward + backward
    #: (the usual rule).  Lightning's ``ThroughputMonitor`` reads it after every batch to log
    #: ``train/device/flops_per_sec`` and, on GPUs in its table, ``train/device/mfu``.  None until then.
    flops_per_batch: int | None = None
    #: at most this many distinct batch shapes are counted (a counted step runs the counter's Python dispatch);
    #: a batch of a new shape beyond them keeps the last count
    MAX_FLOP_SHAPES: int = 4096

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Restore the global RNG states (torch, CUDA, numpy, Python) saved with the checkpoint, so that a
        resumed run draws the same dropout masks as an uninterrupted one (Lightning saves no RNG state).

        The states are rank 0's; under DDP every rank starts from the same seed, so they are every rank's.
        Only a resumed ``fit`` restores them; loading a checkpoint to test or to encode leaves the RNG alone.
        """
        states = checkpoint.get("rng_states")
        trainer = self._trainer
        if not states or trainer is None or trainer.state.fn != "fit":  # loading to test or encode: RNG untouched
            return
        if "torch.cuda" in states and len(states["torch.cuda"]) != torch.cuda.device_count():
            states = {k: v for k, v in states.items() if k != "torch.cuda"}  # another machine: CPU RNG only
        _set_rng_states(states)

    # ----------------------------------------------------------------- views (what subclasses decide)
    def template(self, view: str) -> str:
        """The template string of a named view (``view1``, ``anchor`` ...) in the backbone family's form.

        Raises:
            KeyError: the prompt config has no such view for this family (names the config keys).
        """
        if not self.prompt:
            raise KeyError(f"no prompt configured; view {view!r} needs one")
        family = self.encoder.family
        templates = self.prompt.get("templates", {})
        if family not in templates or view not in templates[family]:
            raise KeyError(
                f"prompt.templates.{family}.{view} is not set (prompt {self.prompt.get('name')!r} has "
                f"{ {k: sorted(v) for k, v in templates.items()} })"
            )
        return templates[family][view]

    def train_views(self) -> list[ViewSpec]:
        """Views of one training example, in loss order.  Default: SimCSE (same sentence twice / triplet)."""
        if self.setting == "sup":
            return [ViewSpec("sent0"), ViewSpec("sent1"), ViewSpec("hard_neg")]
        return [ViewSpec("text"), ViewSpec("text")]

    def eval_view(self) -> ViewSpec:
        """The single view used to encode a sentence at test time: the prompt's ``eval_view`` template, if any."""
        if self.prompt:
            return ViewSpec("text", self.template(self.prompt.get("eval_view", "view1")))
        return ViewSpec("text")

    @property
    def representation_pooler(self) -> str:
        """The pooler applied to encoder outputs (SimCSE's ``cls`` with an MLP head is [CLS] then the head)."""
        return "cls_before_pooler" if self.pooler == "cls" and self.head is not None else self.pooler

    # ----------------------------------------------------------------- collates
    def _collate(self, views: Sequence[ViewSpec], training: bool, add_period: bool | None = None,
                 denoise: bool | None = None, official_test: bool = False) -> ViewCollate:
        """A collate for ``views``: training (truncation, denoising, MLM) or evaluation (the period rule and
        denoising as the test encoder, unless ``add_period`` / ``denoise`` say otherwise: the dev encoder).
        ``official_test``: tokenize as the official TEST encoder (the template with the sentence inside as one
        string, docs/fidelity.md #5); training and the in-training dev batcher tokenize the pieces apart."""
        prompt = self.prompt or {}
        if add_period is None:
            add_period = bool(prompt.get("add_period_at_eval", False)) and not training
        if denoise is None:
            denoise = training or self.denoise_at_eval
        return ViewCollate(
            self.tokenizer,
            views,
            max_seq_len=self.max_seq_len if training else self.eval_max_seq_len,
            denoise=self.denoise if denoise else "none",
            mask_index=int(prompt.get("mask_index", -1)),
            add_period=add_period,
            position_offset=self.encoder.position_offset if self.denoise_positions == "aligned" else 0,
            max_positions=self.encoder.max_positions,
            soft_templates=self._soft_templates,
            # the official TEST encoder tokenizes the template with the sentence inside as one string
            # (docs/fidelity.md #5); training and the in-training dev batcher tokenize the pieces apart
            official_test_tokenization=official_test,
            mlm_probability=float(self.mlm.get("probability", 0.15)) if self.mlm and training else 0.0,
        )

    @property
    def train_collate(self) -> ViewCollate:
        """The collate the DataModule uses for training batches."""
        if self._train_collate is None:
            self._train_collate = self._collate(self.train_views(), training=True)
        return self._train_collate

    @property
    def eval_collate(self) -> ViewCollate:
        """The collate :meth:`encode` uses at test (eval template, the eval period rule, no denoising unless
        ``denoise_at_eval``)."""
        if self._eval_collate is None:
            self._eval_collate = self._collate([self.eval_view()], training=False, official_test=True)
        return self._eval_collate

    @property
    def dev_collate(self) -> ViewCollate:
        """The collate of ``encode(..., encoder="dev")``: the official in-training dev batcher when
        ``dev_encoder`` is set (the eval template, with its own period rule and denoising), else the test one.

        Source: Prompt-BERT ``prompt_bert/trainers.py:105-116`` -> ``models.py:290-368`` (``sentemb_forward``:
        ``[CLS] s [SEP]`` re-wrapped in the template without the period rule, the template bias subtracted
        unless ``--mask_embedding_sentence_delta_no_delta_eval``); CoT-BERT ``trainers.py:78-91``.
        """
        if self.dev_encoder is None:
            return self.eval_collate
        if self._dev_collate is None:
            denoise = bool(self.dev_encoder.get("denoise", False)) and self.denoise != "none"
            self._dev_collate = self._collate([self.eval_view()], training=False,
                                              add_period=bool(self.dev_encoder.get("add_period", False)),
                                              denoise=denoise)
        return self._dev_collate

    # ----------------------------------------------------------------- forward
    def _forward_views(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Representations (B, V, D) and, with denoising, the matching template biases (B, V, D)."""
        ids, mask = batch["input_ids"], batch["attention_mask"]
        b, v, t = ids.shape
        pooler = self.representation_pooler
        tpl = batch.get("template_index")
        out = self.encoder(ids.view(b * v, t), mask.view(b * v, t), output_hidden_states=needs_hidden_states(pooler),
                           template_index=tpl.view(b * v, t) if tpl is not None else None)
        h = pool(pooler, out, mask.view(b * v, t), batch["rep_index"].view(-1)).view(b, v, -1)
        if "bias_input_ids" not in batch:
            return h, None
        bias_out = self.encoder(
            batch["bias_input_ids"], batch["bias_attention_mask"], position_ids=batch.get("bias_position_ids")
        )
        last = bias_out.last_hidden_state
        bias = last[torch.arange(last.shape[0], device=last.device), batch["bias_rep_index"]]  # (R, D)
        return h, bias[batch["bias_row"]]

    def represent(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Sentence representations before the head: (B, V, D), template bias already subtracted."""
        h, bias = self._forward_views(batch)
        return h if bias is None else h - bias

    def embed(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Representations after the head as the current mode wants them: (B, V, D).

        PromptBERT Eq. 4 with its heads: ``head(h - h_hat)`` (``head_on=difference``) or
        ``head(h) - head(h_hat)`` (``head_on=each``, official sup BERT).
        """
        h, bias = self._forward_views(batch)
        use_head = self.head is not None and (self.training or not self.mlp_only_train)
        if bias is not None and use_head and self.head_on == "each":
            return self.head(h) - self.head(bias)
        if bias is not None:
            h = h - bias
        return self.head(h) if use_head else h

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor | None:
        """The loss of one batch (see :meth:`_training_step`).  Under a trainer, sets :attr:`flops_per_batch`:
        from a cache keyed by the batch's tensor shapes, or, for a shape not seen yet, by counting this step's
        forward FLOPs."""
        if self._trainer is None:
            return self._training_step(batch, batch_idx)
        cache = self.__dict__.setdefault("_flops_by_shape", {})
        key = tuple((k, tuple(v.shape)) for k, v in sorted(batch.items()) if isinstance(v, torch.Tensor))
        if key in cache or len(cache) >= self.MAX_FLOP_SHAPES:
            self.flops_per_batch = cache.get(key, self.flops_per_batch)
            return self._training_step(batch, batch_idx)
        from torch.utils.flop_counter import FlopCounterMode

        with FlopCounterMode(display=False) as counter:
            loss = self._training_step(batch, batch_idx)
        self.flops_per_batch = cache[key] = 3 * int(counter.get_total_flops())
        return loss

    def _training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor | None:
        with self.encoder.one_prompt_draw():  # DCPCSE: the contrastive and the MLM pass share the prefix draw
            return self._step_loss(batch)

    def _step_loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor | None:
        z = self.gather_embeddings(self.embed(batch))
        loss = self.loss_fn(z)
        if self.mlm is not None and "mlm_input_ids" in batch:
            mlm_loss = self.mlm_loss(batch)
            weight = self.mlm_weight()
            self.log("train/mlm_loss", mlm_loss, batch_size=z.shape[0])
            loss = loss + weight * mlm_loss
        if not torch.isfinite(loss):
            path = self._save_nonfinite_batch(batch, loss)
            if self.on_nonfinite == "skip":
                self.skipped_nonfinite += 1
                self.log("train/skipped_nonfinite", float(self.skipped_nonfinite))
                return None  # Lightning skips the optimizer step
            raise NonFiniteLossError(
                f"training loss is {loss.item()} at step {self.global_step}; the batch's sentences are in {path} "
                "(set method.on_nonfinite=skip to skip such batches)"
            )
        self.log("train/loss", loss, prog_bar=True, batch_size=z.shape[0])
        return loss

    def gather_embeddings(self, z: torch.Tensor) -> torch.Tensor:
        """The embeddings the loss sees: this rank's (B, V, D), or under DDP with ``negatives=global`` all ranks'.

        Args:
            z: (B, V, D) embeddings of this rank's batch (any float dtype; B may differ across ranks, e.g.
                the last batch of an epoch: the rows are padded for the collective and the padding dropped).

        Returns:
            (B, V, D) unchanged with one process, ``negatives=per_device`` or no Trainer attached; else the
            global batch (B_0 + ... + B_{W-1}, V, D), ranks in order, which requires grad through every rank.

        Why the gradients equal those of ONE process on the global batch (no rescaling needed):

        1. every rank computes the SAME loss L = loss(Z) on the same gathered Z (the loss is a mean over all
           N = sum_r B_r rows), so the logged value is the one-process value;
        2. Lightning's ``all_gather(sync_grads=True)`` is ``torch.distributed.nn.functional.all_gather``,
           whose backward hands each rank the SUM over ranks of the gradients w.r.t. its own slot:
           dL_1/dz_r + ... + dL_W/dz_r = W * dL/dz_r;
        3. DDP then AVERAGES parameter gradients over ranks:
           (1/W) sum_r W * dL/dz_r * dz_r/dtheta = sum_r dL/dz_r * dz_r/dtheta = dL/dtheta,
           the one-process gradient.  (The W x W redundant loss computations are (N x N) similarity
           matrices, negligible next to the encoder.)  ``tests/test_ddp.py`` checks loss and gradients
           against one process for InfoNCE (hard negatives), CoT-BERT's and PromCSE's losses.
        Since every rank sees the same loss, NaN/inf decisions (``on_nonfinite``) agree across ranks.

        ``per_device`` is CoT-BERT's official recipe (``torch.nn.DataParallel``: each replica's loss over
        its own 128, averaged): DDP's gradient average of per-rank losses gives the same.

        Raises:
            RuntimeError: from ``torch.distributed`` when a rank does not take part (all ranks must call it).
        """
        trainer = self._trainer
        if self.negatives != "global" or trainer is None or trainer.world_size <= 1:
            return z
        sizes = [int(s) for s in self.all_gather(torch.tensor(z.shape[0], device=z.device)).reshape(-1).tolist()]
        top = max(sizes)
        padded = z if z.shape[0] == top else torch.cat([z, z.new_zeros(top - z.shape[0], *z.shape[1:])])
        gathered = self.all_gather(padded, sync_grads=True)  # (W, top, V, D)
        if all(s == top for s in sizes):
            return gathered.reshape(-1, *z.shape[1:])
        return torch.cat([gathered[r, :s] for r, s in enumerate(sizes)])

    def mlm_weight(self) -> float:
        """DCPCSE's decaying MLM weight: ``weight * decay ** (global_step / decay_steps)``."""
        cfg = self.mlm or {}
        return float(cfg.get("weight", 0.1)) * float(cfg.get("decay", 0.95)) ** (
            self.global_step / float(cfg.get("decay_steps", 100)))

    def mlm_loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Masked-LM cross-entropy on the masked copies of the views (prompts applied), mean over masked tokens."""
        ids, mask, labels = batch["mlm_input_ids"], batch["attention_mask"], batch["mlm_labels"]
        b, v, t = ids.shape
        tpl = batch.get("template_index")
        out = self.encoder(ids.view(b * v, t), mask.view(b * v, t),
                           template_index=tpl.view(b * v, t) if tpl is not None else None)
        if not bool((labels != -100).any()):  # nothing selected in this batch
            return out.last_hidden_state.sum() * 0.0
        logits = _mlm_head(self.encoder.mlm)(out.last_hidden_state)
        return torch.nn.functional.cross_entropy(logits.view(-1, logits.shape[-1]).float(), labels.view(-1),
                                                 ignore_index=-100)

    def _save_nonfinite_batch(self, batch: dict[str, torch.Tensor], loss: torch.Tensor) -> Path:
        """Write the step, the loss and the batch (first view, decoded as the model saw it) to a JSON file."""
        root = Path(self.trainer.default_root_dir) if self._trainer is not None else Path(".")
        path = root / f"nonfinite_step{self.global_step}.json"
        ids, mask = batch["input_ids"][:, 0], batch["attention_mask"][:, 0]
        texts = [self.tokenizer.decode(i[m.bool()].tolist(), skip_special_tokens=True) for i, m in zip(ids, mask, strict=True)]
        atomic_write_text(path, json.dumps({"step": int(self.global_step), "loss": str(loss.item()),
                                            "sentences": texts}, indent=1))
        return path

    # The STS callback does the evaluation; Lightning's loops only provide the schedule (val_check_interval).
    def validation_step(self, batch: Any, batch_idx: int) -> None:
        return None

    def test_step(self, batch: Any, batch_idx: int) -> None:
        return None

    # ----------------------------------------------------------------- evaluation
    @torch.inference_mode()
    def encode(self, sentences: Sequence[str], batch_size: int | None = None, encoder: str = "test") -> torch.Tensor:
        """Embed sentences as at test time (``encoder="test"``) or as the in-training dev evaluation that selects
        the checkpoint (``encoder="dev"``, :attr:`dev_collate`): (N, D) float32 on CPU, rows in input order.

        Sentences are tokenized once, sorted by token length (less padding), encoded in batches under
        ``torch.inference_mode`` under ``eval_precision`` (bf16 autocast on GPU by default); the module's
        train/eval mode is restored after.
        The tokenization and length order of the last few sentence lists are cached (the STS-B dev set is
        encoded at every validation): a list equal to a cached one skips the tokenizer.
        """
        if encoder not in ("test", "dev"):
            raise ValueError(f"encode(encoder={encoder!r}): expected 'test' or 'dev'")
        collate = self.eval_collate if encoder == "test" else self.dev_collate
        batch_size = batch_size or self.eval_batch_size or (256 if self.device.type == "cuda" else 128)
        tokens, order = self._tokenized(collate, tuple(sentences))
        was_training = self.training
        self.eval()
        device = self.device
        bf16 = self.eval_precision == "bf16" or (self.eval_precision == "auto" and device.type == "cuda")
        autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16)
        chunks = []
        try:
            for start in range(0, len(order), batch_size):
                idx = order[start : start + batch_size]
                batch = collate.build({collate.views[0].field: [tokens[i] for i in idx]})
                batch = {k: t.to(device, non_blocking=True) for k, t in batch.items()}
                with autocast:
                    chunks.append(self.embed(batch)[:, 0].float().cpu())
        finally:
            self.train(was_training)
        if not chunks:
            return torch.zeros(0, self.encoder.hidden_size)
        out = torch.cat(chunks)
        result = torch.empty_like(out)
        result[torch.tensor(order, dtype=torch.long)] = out
        return result

    def _tokenized(self, collate: ViewCollate, sentences: tuple[str, ...]) -> tuple[list, list[int]]:
        """(token ids per sentence, indices sorted by length) for ``encode``, from a small cache (4 lists)
        keyed by the collate and the exact sentence tuple."""
        cache = self.__dict__.setdefault("_token_cache", {})
        key = (id(collate), sentences)
        hit = cache.get(key)
        if hit is None or hit[0] is not collate:  # the collate itself is kept, so its id is never reused
            tokens = collate.tokenize(list(sentences))
            hit = cache[key] = (collate, tokens, sorted(range(len(tokens)), key=lambda i: len(tokens[i])))
            while len(cache) > 4:
                cache.pop(next(iter(cache)))
        return hit[1], hit[2]

    # ----------------------------------------------------------------- optimization
    def configure_optimizers(self):
        """AdamW (eps 1e-8, weight decay ``weight_decay``) + linear decay after ``warmup_ratio`` warm-up."""
        from transformers import get_linear_schedule_with_warmup

        params = [p for p in self.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(params, lr=self.hparams.lr, weight_decay=self.hparams.weight_decay, eps=1e-8)
        steps = self.trainer.estimated_stepping_batches
        if steps == float("inf"):
            raise ValueError("the number of training steps is unknown (a streamed corpus): set trainer.max_steps")
        total = max(1, int(steps))
        scheduler = get_linear_schedule_with_warmup(optimizer, int(self.hparams.warmup_ratio * total), total)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def num_trainable_parameters(self) -> int:
        """Number of parameters the optimizer updates."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad)


def _mlm_head(mlm) -> torch.nn.Module:
    """The prediction head of a Hugging Face masked-LM model (BERT ``cls``, RoBERTa ``lm_head``)."""
    for name in ("cls", "lm_head", "predictions"):
        head = getattr(mlm, name, None)
        if isinstance(head, torch.nn.Module):
            return head
    raise ValueError(f"cannot find the MLM head of {type(mlm).__name__}")
