"""The shared contrastive LightningModule: views -> embedding model -> gather -> loss.

A method is this module plus its views (which field, which template: :meth:`ContrastiveMethod.train_views`,
:meth:`ContrastiveMethod.eval_view`); the representation, template bias, prompt module and head are its
:class:`~cselab.model.embedding.EmbeddingModel` (``self.model``, the one inference path), the MLM auxiliary task
:class:`~cselab.methods.mlm.AuxiliaryMLM`, the NaN policy :class:`~cselab.methods.nonfinite.NonFinitePolicy`;
RNG state and FLOP counting are trainer callbacks (:mod:`cselab.callbacks`).  The optimizer is AdamW with linear
decay, no warm-up and weight decay 0, as all the official implementations.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import lightning as L
import torch

from cselab.losses import build_loss
from cselab.methods.checks import check_method_args
from cselab.methods.gather import gather_embeddings
from cselab.methods.mlm import AuxiliaryMLM, mlm_head_own_parameters
from cselab.methods.nonfinite import NonFinitePolicy
from cselab.model.factory import build_embedding_model
from cselab.model.loading import backbone_family
from cselab.model.template_input import ViewSpec


class ContrastiveMethod(L.LightningModule):
    """Base of all methods.

    Args:
        backbone: ``{"name_or_path": str, "family": "bert"|"roberta"|"decoder"}`` and the decoders' optional
            ``dtype``, ``load_in_4bit``, ``decode_cleanup`` (``conf/backbone``).
        setting: ``unsup`` (one sentence, dropout views) or ``sup`` (NLI triplets sent0, sent1, hard_neg).
        pooler, head, head_init, mlp_only_train, head_on, prompt, denoise, denoise_at_eval, denoise_positions,
            dev_encoder, max_seq_len, eval_max_seq_len, eval_batch_size, eval_precision, tuning: the embedding
            model's (:func:`cselab.model.factory.build_embedding_model`; ``cls`` with a head is SimCSE's [CLS]
            + MLP).
        loss: loss config (``name`` + its arguments, :func:`cselab.losses.build_loss`).
        lr, weight_decay, warmup_ratio, warmup_steps: AdamW and the linear schedule (``warmup_steps`` > 0, e.g.
            PromptEOL's 100, wins over ``warmup_ratio``).
        train: False for methods evaluated without fine-tuning.
        mlm: DCPCSE's auxiliary MLM task (:class:`cselab.methods.mlm.AuxiliaryMLM`) or None.  The prefix is drawn
            once per step for the contrastive and the MLM pass (official ``get_prompt``).
        on_nonfinite: ``stop`` | ``skip`` (:class:`cselab.methods.nonfinite.NonFinitePolicy`).
        negatives: ``global`` (DDP: the loss sees every rank's embeddings, :func:`gather_embeddings`) or
            ``per_device``.

    Raises:
        ConfigError: (a ValueError) an argument out of range or a combination that cannot work, named by its
            config key (:func:`cselab.methods.checks.check_method_args`).
    """

    def __init__(self, backbone: dict, setting: str = "unsup", pooler: str = "cls", head: str = "mlp",
                 mlp_only_train: bool = True, head_on: str = "difference", denoise_at_eval: bool = False,
                 head_init: str = "bert", dev_encoder: dict | None = None, denoise_positions: str = "official",
                 loss: dict | None = None, prompt: dict | None = None, denoise: str = "none", max_seq_len: int = 32,
                 eval_max_seq_len: int | None = None, eval_batch_size: int | None = None,
                 eval_precision: str = "auto", lr: float = 3e-5, weight_decay: float = 0.0,
                 warmup_ratio: float = 0.0, warmup_steps: int = 0, train: bool = True, on_nonfinite: str = "stop",
                 negatives: str = "global", tuning: dict | None = None, mlm: dict | None = None,
                 **extra: Any) -> None:
        super().__init__()
        self.save_hyperparameters(logger=False)  # in checkpoints; the loggers get the run's config (pipeline)
        self._family = backbone.get("family") or backbone_family(backbone["name_or_path"])
        check_method_args(pooler=pooler, setting=setting, prompt=prompt, denoise=denoise, head_on=head_on,
                          denoise_at_eval=denoise_at_eval, denoise_positions=denoise_positions,
                          dev_encoder=dev_encoder, eval_precision=eval_precision, negatives=negatives,
                          on_nonfinite=on_nonfinite, tuning=tuning, backbone={**backbone, "family": self._family},
                          head=head, mlm=mlm)
        self.setting, self.pooler, self.mlp_only_train, self.head_on = setting, pooler, mlp_only_train, head_on
        self.denoise, self.denoise_at_eval, self.denoise_positions = denoise, denoise_at_eval, denoise_positions
        self.dev_encoder = dict(dev_encoder) if dev_encoder else None
        self.prompt = dict(prompt) if prompt else None
        self.tuning = dict(tuning) if tuning else {"name": "full"}
        self.do_train, self.negatives = train, negatives
        self.nonfinite = NonFinitePolicy(on_nonfinite)
        self.loss_fn = build_loss(loss or {"name": "infonce"})
        self.model = build_embedding_model(
            backbone, self.train_views(), self.eval_view(), pooler=pooler, head=head, head_init=head_init,
            mlp_only_train=mlp_only_train, head_on=head_on, prompt=prompt, denoise=denoise,
            denoise_at_eval=denoise_at_eval, denoise_positions=denoise_positions, dev_encoder=dev_encoder,
            max_seq_len=max_seq_len, eval_max_seq_len=eval_max_seq_len, eval_batch_size=eval_batch_size,
            eval_precision=eval_precision, tuning=self.tuning, mlm=mlm)
        self.mlm = dict(mlm) if mlm else None
        self.aux_mlm = AuxiliaryMLM(self.mlm, self.encoder, self.tuning.get("name", "full")) if self.mlm else None
        self._freeze_unused_layers()
        self.strict_loading = self.tuning.get("name", "full") == "full"

    # ----------------------------------------------------------------- the embedding model's parts
    encoder = property(lambda self: self.model.backbone, doc="The backbone module of :attr:`model`.")
    head = property(lambda self: self.model.head, doc="The projection head of :attr:`model` (or None).")
    tokenizer = property(lambda self: self.model.tokenizer, doc="The backbone's tokenizer.")
    max_seq_len = property(lambda self: self.model.config["max_seq_len"], doc="Training truncation (tokens).")
    representation_pooler = property(lambda self: self.model.representation_pooler,
                                     doc="The pooler applied to the backbone output.")
    train_collate = property(lambda self: self.model.collate("train"), doc="The DataModule's collate.")
    eval_collate = property(lambda self: self.model.collate("test"), doc="The test encoder's collate.")
    dev_collate = property(lambda self: self.model.collate("dev"), doc="The dev encoder's collate.")
    skipped_nonfinite = property(lambda self: self.nonfinite.skipped, doc="Steps skipped for a NaN / inf loss.")

    @property
    def eval_batch_size(self) -> int | None:
        """Sentences per forward pass in :meth:`encode` (None: 256 on a GPU, 128 on CPU); settable."""
        return self.model.config.get("eval_batch_size")

    @eval_batch_size.setter
    def eval_batch_size(self, value: int | None) -> None:
        self.model.config["eval_batch_size"] = value

    @property
    def eval_precision(self) -> str:
        """:meth:`encode`'s arithmetic: ``auto`` | ``32`` | ``bf16``; settable."""
        return self.model.config.get("eval_precision", "auto")

    @eval_precision.setter
    def eval_precision(self, value: str) -> None:
        check_method_args(eval_precision=value)
        self.model.config["eval_precision"] = str(value)

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
        tensors (prompts, heads) and the backbone's identity."""
        checkpoint["cselab_method_class"] = f"{type(self).__module__}.{type(self).__qualname__}"
        if self.tuning.get("name", "full") == "full":
            return
        trained = {n for n, p in self.named_parameters() if p.requires_grad}
        checkpoint["state_dict"] = {k: v for k, v in checkpoint["state_dict"].items() if k in trained}
        checkpoint["backbone"] = dict(self.hparams.backbone)

    # ----------------------------------------------------------------- views (what subclasses decide)
    def template(self, view: str) -> str:
        """The template string of a named view (``view1``, ``anchor`` ...) in the backbone family's form.

        Raises:
            KeyError: the prompt config has no such view for this family (names the config keys).
        """
        if not self.prompt:
            raise KeyError(f"no prompt configured; view {view!r} needs one")
        templates = self.prompt.get("templates", {})
        if self._family not in templates or view not in templates[self._family]:
            raise KeyError(f"prompt.templates.{self._family}.{view} is not set (prompt {self.prompt.get('name')!r} "
                           f"has { {k: sorted(v) for k, v in templates.items()} })")
        return templates[self._family][view]

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

    # ----------------------------------------------------------------- training step
    def represent(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Representations before the head (B, V, D), template bias subtracted."""
        return self.model.represent(batch)

    def embed(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Embeddings (B, V, D) of a collated batch (:meth:`cselab.model.embedding.EmbeddingModel.forward`)."""
        return self.model(batch)

    def gather_embeddings(self, z: torch.Tensor) -> torch.Tensor:
        """The embeddings the loss sees (:func:`cselab.methods.gather.gather_embeddings`)."""
        return gather_embeddings(self, z, self.negatives)

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor | None:
        """loss(gather(embed(views))) [+ the MLM auxiliary loss]; None (no optimizer step) for a skipped
        non-finite loss.  DCPCSE: the contrastive and the MLM pass share one prefix draw."""
        with self.encoder.one_prompt_draw():
            z = self.gather_embeddings(self.embed(batch))
            loss = self.loss_fn(z)
            if self.aux_mlm is not None and "mlm_input_ids" in batch:
                mlm_loss = self.aux_mlm.loss(self.encoder, batch)
                self.log("train/mlm_loss", mlm_loss, batch_size=z.shape[0])
                loss = loss + self.aux_mlm.weight(self.global_step) * mlm_loss
        if self.nonfinite(self, loss, batch):
            return None
        self.log("train/loss", loss, prog_bar=True, batch_size=z.shape[0])
        return loss

    # The STS callback does the evaluation; Lightning's loops only provide the schedule (val_check_interval).
    def validation_step(self, batch: Any, batch_idx: int) -> None:
        return None

    def test_step(self, batch: Any, batch_idx: int) -> None:
        return None

    def encode(self, sentences: Sequence[str], batch_size: int | None = None, encoder: str = "test") -> torch.Tensor:
        """(N, D) float32 CPU embeddings in input order (:meth:`cselab.model.embedding.EmbeddingModel.encode`;
        ``encoder="dev"``: the checkpoint-selection encoder)."""
        return self.model.encode(sentences, batch_size=batch_size, encoder=encoder)

    def configure_optimizers(self):
        """AdamW (eps 1e-8, weight decay ``weight_decay``) + linear decay after ``warmup_steps`` (if > 0) or
        ``warmup_ratio`` x the total steps of warm-up."""
        from transformers import get_linear_schedule_with_warmup

        params = [p for p in self.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(params, lr=self.hparams.lr, weight_decay=self.hparams.weight_decay, eps=1e-8)
        steps = self.trainer.estimated_stepping_batches
        if steps == float("inf"):
            raise ValueError("the number of training steps is unknown (a streamed corpus): set trainer.max_steps")
        total = max(1, int(steps))
        warmup = int(self.hparams.get("warmup_steps", 0) or 0) or int(self.hparams.warmup_ratio * total)
        scheduler = get_linear_schedule_with_warmup(optimizer, warmup, total)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def num_trainable_parameters(self) -> int:
        """Number of parameters the optimizer updates."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad)
