"""The shared contrastive LightningModule: views -> embedding model -> gather -> loss.

A method is this module plus its views (which field, which template: :meth:`ContrastiveMethod.view_specs`);
the representation, template bias, prompt module and head are its
:class:`~cselab.model.embedding.EmbeddingModel` (``self.model``, the one inference path), the MLM auxiliary task
:class:`~cselab.methods.mlm.AuxiliaryMLM`, the NaN policy :class:`~cselab.methods.nonfinite.NonFinitePolicy`;
RNG state and FLOP counting are trainer callbacks (:mod:`cselab.callbacks`).  The optimizer is AdamW with linear
decay, no warm-up and weight decay 0, as all the official implementations.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, ClassVar

import lightning as L
import torch

from cselab.methods.cached_step import CachedStep, check_trainer
from cselab.methods.checks import (
    OPTIM_DEFAULTS,
    backbone_family_of,
    check_method,
    check_training,
    embedding_spec,
)
from cselab.methods.gather import gather_embeddings
from cselab.methods.losses import build_loss
from cselab.methods.mlm import AuxiliaryMLM, mlm_head_own_parameters
from cselab.methods.nonfinite import NonFiniteCheck, NonFinitePolicy
from cselab.methods.optim import clip_fused, configure_adamw
from cselab.methods.options import build_options
from cselab.model.factory import build_embedding_model
from cselab.model.spec import ConfigError, EmbeddingSpec, TuningSpec
from cselab.model.template_input import ViewSpec


class ContrastiveMethod(L.LightningModule):
    """Base of all methods: an embedding model (``self.model``, built from its spec) trained by a loss.  Its parts,
    template inputs, evaluation settings and ``encode`` / ``embed`` / ``represent`` / ``describe`` are read
    through the method (``method.encoder``, ``method.eval_collate`` ...): the trainer, the callbacks, the
    evaluation and the exports get the embedding model's (nothing is held twice: every such attribute reads, or
    for the evaluation settings :meth:`~cselab.model.embedding.EmbeddingModel.respec`-s, ``self.model``);
    the hooks that read the non-finite flags (``self.nonfinite``) are a callback it hands every Trainer
    (:meth:`configure_callbacks`, :class:`~cselab.methods.nonfinite.NonFiniteCheck`).

    Args:
        backbone: ``{"name_or_path": str, "family": "bert"|"roberta"|"decoder"}`` and the decoders' optional
            ``dtype``, ``load_in_4bit``, ``decode_cleanup`` (``conf/backbone``).
        model: the embedding settings, the ``module.model`` node of ``conf/config.yaml`` (the fields of
            :class:`cselab.model.spec.EmbeddingSpec` that a config sets, plus ``prompt``, from which the class
            derives its views: :meth:`view_specs`); or a whole :class:`EmbeddingSpec` (its views as given).
        loss: loss config (``name`` + its arguments, :func:`cselab.methods.losses.build_loss`); None:
            :attr:`default_loss` (InfoNCE).
        optim: ``{"lr", "weight_decay", "warmup_ratio", "warmup_steps", "fused", "adamw"}``: AdamW and the linear
            schedule (``warmup_steps`` > 0, e.g. PromptEOL's 100, wins over ``warmup_ratio``); ``fused``: ``auto``
            (the fused AdamW kernel on CUDA and CPU: one kernel for all parameters, and the non-finite check stays
            on the device, :mod:`cselab.methods.nonfinite`), ``true`` or ``false`` (``torch.optim.AdamW``'s default
            implementation); ``adamw``: ``transformers`` (the official code's update,
            :class:`cselab.methods.optim.TransformersAdamW`) or ``torch``; missing keys: :data:`OPTIM_DEFAULTS`.
        setting: ``unsup`` (one sentence, dropout views) or ``sup`` (NLI triplets sent0, sent1, hard_neg).
        train: False for methods evaluated without fine-tuning (a ``tuning=lora`` then adds no adapters: it
            becomes ``frozen``, so that a direct-inference model saves as the plain backbone).
        negatives: ``global`` (DDP: the loss sees every rank's embeddings, :func:`gather_embeddings`) or
            ``per_device``.
        mlm: DCPCSE's auxiliary MLM task (:class:`cselab.methods.mlm.AuxiliaryMLM`) or None.  The prefix is drawn
            once per step for the contrastive and the MLM pass (official ``get_prompt``).
        on_nonfinite: ``stop`` | ``skip`` (:class:`cselab.methods.nonfinite.NonFinitePolicy`).
        cached_step: ``{"chunk_size": N}`` (``trainer.cached_step``): the GradCache step
            (:class:`cselab.methods.cached_step.CachedStep`): all views embedded N sequences at a time, the same loss
            and gradients; None or ``chunk_size: null``: the uncached step.
        options: the method's own options (``method.<node>``, :attr:`options_type`): a mapping of its fields or
            an instance; built once (:func:`cselab.methods.options.build_options`) into ``self.options``.

    Class attributes (what a method declares, checked by :func:`cselab.methods.checks.check_method`):
        method_name: the ``method=`` name; tunings: what may train; settings: ``unsup`` / ``sup``; families: the backbone
        families it runs on (None: any); options_type: its options' frozen dataclass (None: it has none), read
        from ``method.<options_type.node>`` by :func:`cselab.run.spec.module_node`.

    Raises:
        ConfigError: (a ValueError) an argument out of range or a combination that cannot work, named by its
            config key (:func:`cselab.methods.checks.check_method`, :class:`cselab.model.spec.EmbeddingSpec`).
    """

    method_name = "contrastive"
    tunings: tuple[str, ...] = ("full", "frozen")
    settings: tuple[str, ...] = ("unsup", "sup")
    families: tuple[str, ...] | None = None
    options_type: ClassVar[type | None] = None
    #: the loss when ``loss`` is None
    default_loss: ClassVar[dict[str, Any]] = {"name": "infonce"}

    def __init__(self, backbone: dict, model: Mapping[str, Any] | EmbeddingSpec | None = None, loss: dict | None = None,
                 optim: Mapping[str, Any] | None = None, setting: str = "unsup", train: bool = True,
                 negatives: str = "global", mlm: dict | None = None, on_nonfinite: str = "stop",
                 cached_step: Mapping[str, Any] | None = None, options: Mapping[str, Any] | Any = None) -> None:
        super().__init__()
        self.save_hyperparameters(logger=False)  # in checkpoints; the loggers get the run's config (pipeline)
        #: the method's own options (an instance of :attr:`options_type`, built here once), or None
        self.options = self.method_options(options)
        spec = self.check_config(backbone=backbone, model=model or {}, setting=setting, train=train,
                                 negatives=negatives, mlm=mlm, on_nonfinite=on_nonfinite, cached_step=cached_step,
                                 loss=loss, options=self.options)
        self.setting, self.negatives = setting, negatives
        self.prompt = None if isinstance(model, EmbeddingSpec) else dict((model or {}).get("prompt") or {}) or None
        self.optim = {**OPTIM_DEFAULTS, **{k: v for k, v in dict(optim or {}).items() if v is not None}}
        self.nonfinite = NonFinitePolicy(on_nonfinite)
        self.loss_fn = build_loss(loss or self.default_loss)
        self.model = build_embedding_model(backbone, spec, mlm_head=mlm is not None)
        self.mlm = dict(mlm) if mlm else None
        self.aux_mlm = AuxiliaryMLM(self.mlm, self.encoder, spec.tuning.name) if self.mlm else None
        chunk = (cached_step or {}).get("chunk_size")
        self.cached_step = CachedStep(chunk) if chunk is not None else None
        #: ``torch.compile`` of :meth:`forward_loss` (:func:`cselab.methods.compiled.compile_training` with deep
        #: prefixes), or None
        self.compiled_forward_loss = None
        #: what :func:`cselab.methods.compiled.compile_training` compiled: ``layers``, ``forward`` or None (eager)
        self.compile_scope: str | None = None
        #: every DDP rank's batch has the same size (the DataModule's ``equal_rank_batches``, read at fit start)
        self.equal_rank_batches = False
        self._freeze_unused_layers()
        self.strict_loading = spec.tuning.name == "full"
        self.build_own_parts()

    def build_own_parts(self) -> None:
        """What a method adds to the shared parts, from its typed ``self.options`` (ESimCSE's momentum encoder,
        DiffCSE's RTD, RankCSE's teachers); called once at the end of the constructor, so that every method takes
        the base's arguments alone (old checkpoints' arguments: :func:`cselab.methods.checks.fold_options`)."""

    @classmethod
    def check_config(cls, *, backbone: Mapping[str, Any], model: Mapping[str, Any] | EmbeddingSpec,
                     setting: str = "unsup", train: bool = True, negatives: str = "global",
                     mlm: Mapping[str, Any] | None = None, on_nonfinite: str = "stop",
                     cached_step: Mapping[str, Any] | None = None, loss: Mapping[str, Any] | None = None,
                     optim: Mapping[str, Any] | None = None, options: Mapping[str, Any] | Any = None,
                     **_: Any) -> EmbeddingSpec:
        """The method's embedding spec, every rule checked, nothing loaded (the run's config-time check and the
        constructor's; ``loss`` / ``optim``: :func:`~cselab.methods.checks.check_training`, when the run gives them;
        ``options``: :meth:`method_options`, a built instance as it is).

        Raises:
            ConfigError: names the key and what was expected; ``loss.hard_negative_weight`` set where the training
                views hold no hard negative (fewer than three: the loss would ignore it); a prompt whose template
                only the test view would use, on a method that trains on the bare sentences (``train``).
        """
        cls.method_options(options)
        check_training(loss, optim, train)
        if (cached_step or {}).get("chunk_size") is not None:
            CachedStep(cached_step["chunk_size"])
        given, family = isinstance(model, EmbeddingSpec), backbone_family_of(backbone)
        tuning = model.tuning.name if given else (model.get("tuning") or {}).get("name", "full")
        check_method(cls, family=family, tuning=tuning, setting=setting, train=train, negatives=negatives,
                     on_nonfinite=on_nonfinite, mlm=mlm, backbone=backbone)
        if given and model.family != family:
            raise ConfigError(f"the spec's family={model.family} is not the backbone's ({family}): "
                              f"EmbeddingSpec(family={family!r}, ...)")
        spec = model if given else embedding_spec(cls, backbone, model, setting=setting, mlm=mlm)
        weight = (loss or {}).get("hard_negative_weight") or 0
        if train and weight and len(spec.train_views) < 3:  # InfoNCE reads it on a third view only
            raise ConfigError(f"loss.hard_negative_weight={weight} weights each anchor's own hard negative (a third "
                              f"view), but method={cls.method_name} setting={setting} trains "
                              f"{len(spec.train_views)} views: use setting=sup (NLI triplets with hard negatives) "
                              "or leave it at 0")
        if train and not given and spec.eval_view[1] is not None and all(t is None for _, t in spec.train_views):
            prompt = (model.get("prompt") or {}).get("name")
            raise ConfigError(f"method={cls.method_name} trains on the bare sentences, so prompt={prompt} would wrap "
                              "them in its template at test only (a model tested on inputs it never trained on): "
                              "train with the template (method=promptbert or another template method), train "
                              f"without one (prompt=none), or test method={cls.method_name}'s trained or pretrained "
                              "model with the template (method.train=false)")
        if not train and spec.tuning.name == "lora":  # direct inference: no adapters (zero-initialised = identity)
            spec = replace(spec, tuning=TuningSpec("frozen"))
        return spec

    @classmethod
    def method_options(cls, options: Mapping[str, Any] | Any = None) -> Any:
        """The method's options: :attr:`options_type` built from ``options`` (a mapping of its fields; an instance
        as it is; :func:`cselab.methods.options.build_options`), or None for a method without options.

        Raises:
            ConfigError: an unknown key or a bad value (names ``method.<node>.<key>``); options given to a method
                that has none.
        """
        if cls.options_type is not None:
            return build_options(cls.options_type, options)
        if options:
            raise ConfigError(f"method={cls.method_name} takes no options of its own, got {dict(options)}")
        return None

    @classmethod
    def view_specs(cls, prompt: Mapping[str, Any] | None, setting: str,
                   family: str) -> tuple[list[ViewSpec], ViewSpec]:
        """The views of one training example, in loss order, and the single view encoded at test.  Default:
        SimCSE (the same sentence twice / the NLI triplet), the prompt's ``eval_view`` template at test, if any.

        Raises:
            KeyError: a view the prompt does not define for ``family`` (names the config key).
        """
        train = [ViewSpec("sent0"), ViewSpec("sent1"), ViewSpec("hard_neg")] if setting == "sup" else \
            [ViewSpec("text"), ViewSpec("text")]
        if not prompt:
            return train, ViewSpec("text")
        return train, ViewSpec("text", template_of(prompt, family, prompt.get("eval_view", "view1")))

    def _freeze_unused_layers(self) -> None:
        """Freeze the layers no training step uses, so that every trainable parameter gets a gradient: the
        backbone's pooler layer (used only by ``method.pooler=cls`` without a head) and the MLM head's own layers without
        ``method.mlm``.  They keep their pretrained values, stay out of the optimizer, and plain ``ddp`` works."""
        pooler = getattr(self.encoder.model, "pooler", None)
        if pooler is not None and self.representation_pooler != "cls":
            pooler.requires_grad_(False)
        if self.encoder.mlm is not None and self.mlm is None:
            for p in mlm_head_own_parameters(self.encoder):
                p.requires_grad_(False)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Record the method class (for :func:`cselab.load`); with a frozen backbone keep only the trained
        tensors (prompts, heads), a fitted whitening transform and the backbone's identity."""
        checkpoint["cselab_method_class"] = f"{type(self).__module__}.{type(self).__qualname__}"
        if self.tuning.name == "full":
            return
        trained = {n for n, p in self.named_parameters() if p.requires_grad}
        checkpoint["state_dict"] = {k: v for k, v in checkpoint["state_dict"].items()
                                    if k in trained or k.startswith("model.whitening.")}  # + BERT-whitening's mu, W
        checkpoint["backbone"] = dict(self.hparams.backbone)

    # ----------------------------------------------------------------- the embedding model, read through the method
    encoder = property(lambda self: self.model.backbone, doc="The backbone module of :attr:`model`.")
    head = property(lambda self: self.model.head, doc="The projection head of :attr:`model` (or None).")
    tokenizer = property(lambda self: self.model.tokenizer, doc="The backbone's tokenizer.")
    spec = property(lambda self: self.model.spec, doc="What the embedding model is (:class:`EmbeddingSpec`).")
    tuning = property(lambda self: self.model.spec.tuning, doc="The prompt module and what trains.")
    max_seq_len = property(lambda self: self.model.spec.max_seq_len, doc="Training truncation (tokens).")
    representation_pooler = property(lambda self: self.model.representation_pooler,
                                     doc="The pooler applied to the backbone output.")
    eval_collate = property(lambda self: self.model.collate("test"), doc="The test encoder's collate.")
    dev_collate = property(lambda self: self.model.collate("dev"), doc="The dev encoder's collate.")

    def train_collate(self, seed: int = 0, pad_to_multiple_of: int | None = None):
        """The DataModule's collate: the model's training template input (:meth:`EmbeddingModel.collate`), its
        MLM masks seeded by ``seed`` (the run's), its widths padded to a multiple of ``pad_to_multiple_of``
        (``data.pad_to_multiple_of``; None: not padded)."""
        return self.model.collate("train", mlm_seed=seed, pad_to_multiple_of=pad_to_multiple_of)

    def prepare_train_set(self, dataset, seed: int):
        """The training corpus as this method reads it, from the DataModule's ``dataset`` (a Hugging Face
        ``Dataset`` or a streamed corpus) and the run's ``seed``; the DataModule applies it once, at fit
        (``SentenceDataModule(transform=...)``).  Default: unchanged (ESimCSE adds its repetitions)."""
        return dataset

    @property
    def eval_precision(self) -> str:
        """:meth:`encode`'s arithmetic: ``auto`` | ``32`` | ``bf16``; settable."""
        return self.model.spec.eval_precision

    @eval_precision.setter
    def eval_precision(self, value: str) -> None:
        self.model.respec(eval_precision=str(value))

    def represent(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Representations before the head (B, V, D), template bias subtracted."""
        return self.model.represent(batch)

    def embed(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Embeddings (B, V, D) of a collated batch (:meth:`cselab.model.embedding.EmbeddingModel.forward`)."""
        return self.model(batch)

    def encode(self, sentences: Sequence[str], batch_size: int | None = None, encoder: str = "test") -> torch.Tensor:
        """(N, D) float32 CPU embeddings in input order (:meth:`cselab.model.embedding.EmbeddingModel.encode`;
        ``encoder="dev"``: the checkpoint-selection encoder)."""
        return self.model.encode(sentences, batch_size=batch_size, encoder=encoder)

    def describe(self) -> dict[str, Any]:
        """What the model does at test (:meth:`cselab.model.embedding.EmbeddingModel.describe`)."""
        return self.model.describe()

    # ----------------------------------------------------------------- views (what subclasses decide)
    def template(self, view: str) -> str:
        """The template string of a named view (``view1``, ``anchor`` ...) in the backbone family's form.

        Raises:
            KeyError: the prompt config has no such view for this family (names the config keys).
        """
        return template_of(self.prompt, self.model.spec.family, view)

    # ----------------------------------------------------------------- training step
    def gather_embeddings(self, z: torch.Tensor) -> torch.Tensor:
        """The embeddings the loss sees (:func:`cselab.methods.gather.gather_embeddings`; the ranks' batch sizes
        are exchanged only when the DataModule does not guarantee them equal: ``equal_rank_batches``)."""
        return gather_embeddings(self, z, self.negatives, equal_sizes=self.equal_rank_batches)

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor | None:
        """loss(gather(embed(views))) [+ the MLM auxiliary loss]; None (no optimizer step) for a skipped
        non-finite loss.  DCPCSE: the contrastive and the MLM pass share one prefix draw.  With ``cached_step``
        the same loss and gradients from chunks of sequences (:class:`cselab.methods.cached_step.CachedStep`).
        The loss's extra inputs (:meth:`loss_inputs`) are taken once, before the forward, and handed to either."""
        extras = self.loss_inputs(batch)
        if self.cached_step is not None:
            result = self.cached_step(self, batch, extras)
            if result is None:
                return None
            if result.mlm is not None:
                self.log("train/mlm_loss", result.mlm, batch_size=result.batch_size)
            self.log("train/loss", result.loss.detach(), batch_size=result.batch_size)
            return result.loss
        with self.encoder.one_prompt_draw():
            loss, mlm_loss, size = self.training_forward()(batch, extras)
        size = int(size)  # the examples the loss saw (a shape, never a device value)
        if mlm_loss is not None:
            self.log("train/mlm_loss", mlm_loss, batch_size=size)
            loss = loss + self.aux_mlm.weight(self.global_step) * mlm_loss
        if self.nonfinite(self, loss, batch):
            return None
        self.log("train/loss", loss, batch_size=size)  # read on the host at logging steps only
        return loss

    def training_forward(self):
        """The compiled :meth:`forward_loss` when there is one (:mod:`cselab.methods.compiled`, deep prefixes), else
        the eager one (whose layers and loss may be compiled in place).  (The FLOP counter's step runs under
        ``torch.compiler.set_stance("force_eager")``, :class:`cselab.callbacks.flops.FlopCounter`: the compiled
        code runs its eager frames there.)"""
        return self.forward_loss if self.compiled_forward_loss is None else self.compiled_forward_loss

    def loss_inputs(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The loss's inputs besides the embeddings, for this step's ``batch``: keyword arguments of ``loss_fn``
        (ESimCSE's ``queue``, RankCSE's teacher targets), taken once per step before the forward and handed, the
        same, to the uncached, compiled and cached step (:meth:`contrastive_loss`).  Default: none."""
        return {}

    def forward_loss(self, batch: dict[str, torch.Tensor], extras: Mapping[str, torch.Tensor] | None = None,
                     ) -> tuple[torch.Tensor, torch.Tensor | None, int]:
        """The training forward, from token ids to the loss: ``(loss(gather(embed(views)), **extras), the MLM
        auxiliary loss or None, the number of examples the loss saw)``; ``extras``: :meth:`loss_inputs` (an input
        of a compiled forward, as the batch).  The MLM weight (a function of the step) is applied by the caller,
        so that a compiled forward (:mod:`cselab.methods.compiled`) does not depend on the step."""
        z = self.gather_embeddings(self.embed(batch))
        loss = self.contrastive_loss(z, extras)
        mlm = None
        if self.aux_mlm is not None and "mlm_input_ids" in batch:
            mlm = self.aux_mlm.loss(self.encoder, batch)
        return loss, mlm, z.shape[0]

    def contrastive_loss(self, z: torch.Tensor, extras: Mapping[str, torch.Tensor] | None = None) -> torch.Tensor:
        """The loss of the gathered embeddings ``z`` (N, V, D) and the step's extra inputs
        (:meth:`loss_inputs`): ``loss_fn(z, **extras)``.  The uncached, compiled and cached step all call it."""
        return self.loss_fn(z, **(extras or {}))

    skipped_nonfinite = property(lambda self: self.nonfinite.skipped, doc="Steps skipped for a NaN / inf loss.")

    def configure_callbacks(self) -> list[L.Callback]:
        """The non-finite policy's hooks (:class:`cselab.methods.nonfinite.NonFiniteCheck`), in every Trainer that
        fits this method: ``method.on_nonfinite`` cannot be left out by a callbacks list."""
        return [NonFiniteCheck(self.nonfinite)]

    def on_fit_start(self) -> None:
        """Refuse what the cached step cannot make exact (:func:`cselab.methods.cached_step.check_trainer`); learn
        from the DataModule whether every rank's batch has the same size (no size exchange in the gather)."""
        if self.cached_step is not None:
            check_trainer(self.trainer)
        datamodule = getattr(self.trainer, "datamodule", None)
        self.equal_rank_batches = bool(getattr(datamodule, "equal_rank_batches", False))

    # The STS callback does the evaluation; Lightning's loops only provide the schedule (val_check_interval).
    def validation_step(self, batch: Any, batch_idx: int) -> None:
        return None

    def test_step(self, batch: Any, batch_idx: int) -> None:
        return None

    def configure_optimizers(self):
        """AdamW + the linear schedule of ``optim`` (:func:`cselab.methods.optim.configure_adamw`)."""
        return configure_adamw(self)

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None) -> None:
        """``trainer.gradient_clip_val``, the fused AdamW's too (:func:`cselab.methods.optim.clip_fused`)."""
        if not clip_fused(self.trainer.precision_plugin, optimizer, gradient_clip_val, gradient_clip_algorithm):
            super().configure_gradient_clipping(optimizer, gradient_clip_val, gradient_clip_algorithm)

    def num_trainable_parameters(self) -> int:
        """Number of parameters the optimizer updates."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad)


def template_of(prompt: Mapping[str, Any] | None, family: str, view: str) -> str:
    """The template string of a named view (``view1``, ``anchor`` ...) of ``prompt`` in ``family``'s form.

    Raises:
        KeyError: the prompt config has no such view for this family (names the config keys).
    """
    if not prompt:
        raise KeyError(f"no prompt configured; view {view!r} needs one")
    templates = prompt.get("templates", {})
    if family not in templates or view not in templates[family]:
        raise KeyError(f"prompt.templates.{family}.{view} is not set (prompt {prompt.get('name')!r} "
                       f"has { {k: sorted(v) for k, v in templates.items()} })")
    return templates[family][view]
