"""ESimCSE (Wu et al., COLING 2022): SimCSE whose positive is the sentence with repeated tokens
(:mod:`cselab.methods.esimcse.repetition`), plus a queue of negatives from a momentum encoder
(:mod:`cselab.methods.esimcse.momentum`), in the loss :class:`cselab.methods.esimcse.loss.QueueInfoNCE`.

Official code: caskcsg/sentemb ``ESimCSE`` (``train.py``, ``esimcse/models.py``, ``esimcse/trainers.py``,
``run.sh``); each rule with its file:line in docs/fidelity.md ("ESimCSE").  One training step, as the official
``CLTrainer.compute_loss`` (``trainers.py:619-636``):

1. the online encoder (train mode, dropout) embeds both views, [CLS] + MLP; the loss is InfoNCE over the batch
   (anchors: the untouched sentences, positives: the repeated ones) with the queue's logits appended;
2. the momentum encoder moves towards the online one (``models.py:161-163``, the step's weights);
3. the momentum encoder (eval mode, no graph) embeds the untouched sentences, through the online MLP; the rows are
   appended to the queue, the oldest dropped beyond ``queue_size`` (the next step's extra negatives).

Test: the online encoder without the MLP (``cls_before_pooler``, ``run.sh --mlp_only_train``), as SimCSE unsup; the
momentum encoder is training state only (checkpoints, not exports).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from cselab.methods.base import ContrastiveMethod
from cselab.methods.esimcse.loss import QueueInfoNCE
from cselab.methods.esimcse.momentum import MOMENTUM_INITS, MomentumQueue
from cselab.methods.esimcse.repetition import (
    DUP_TYPES,
    REPEATED_FIELD,
    RepetitionCollate,
    add_repetition_column,
)
from cselab.methods.options import option
from cselab.model.pooling import needs_hidden_states, pool
from cselab.model.spec import ConfigError, EmbeddingSpec
from cselab.model.template_input import ViewSpec

#: the checkpoint key of the queue (:meth:`ESimCSE.on_save_checkpoint`)
CHECKPOINT_KEY = "esimcse_queue"


@dataclass(frozen=True)
class ESimCSEOptions:
    """``method.esimcse``; the defaults are the official ``run.sh`` for BERT-base (``--momentum``, ``--neg_size``,
    ``--dup_type``, ``--dup_rate``)."""

    node: ClassVar[str] = "esimcse"
    momentum: float = option(0.995, "a number in [0, 1) (official 0.995)", lambda v: 0.0 <= v < 1.0)
    queue_size: int = option(160, "an integer >= 1 (official neg_size 160)", lambda v: v >= 1)
    momentum_init: str = option("official", f"one of {MOMENTUM_INITS}", lambda v: v in MOMENTUM_INITS)
    dup_rate: float = option(0.32, "a number in [0, 1)", lambda v: 0.0 <= v < 1.0)
    dup_type: str = option("bpe", f"one of {DUP_TYPES}", lambda v: v in DUP_TYPES)


class ESimCSE(ContrastiveMethod):
    """ESimCSE unsup: word-repetition positives, momentum-encoder queue of negatives.

    Args:
        options: :class:`ESimCSEOptions` (``method.esimcse``), or a mapping of its fields.
        the others: :class:`ContrastiveMethod`'s.  The loss must be :class:`QueueInfoNCE` (``loss=infonce_queue``).

    Raises:
        ConfigError: a prompt (ESimCSE has no template), a backbone that is not BERT / RoBERTa-like, a bad
            ``method.esimcse.*`` value, or another loss (names the key).
    """

    method_name = "esimcse"
    tunings = ("full",)
    settings = ("unsup",)
    families = ("bert", "roberta")
    options_type = ESimCSEOptions

    def build_own_parts(self) -> None:
        """The momentum encoder and its queue (``method.esimcse``); refuses a loss other than :class:`QueueInfoNCE`."""
        if not isinstance(self.loss_fn, QueueInfoNCE):
            raise ConfigError(f"method=esimcse needs its queue loss (loss=infonce_queue), got "
                              f"{type(self.loss_fn).__name__}")
        o = self.options
        self.momentum = MomentumQueue(self.encoder, o.momentum, o.queue_size, o.momentum_init)
        self._queue_epoch: int | None = None  # the epoch whose steps filled the queue

    @classmethod
    def check_config(cls, *, backbone: Mapping[str, Any], model: Mapping[str, Any] | EmbeddingSpec,
                     **kwargs: Any) -> EmbeddingSpec:
        """:meth:`ContrastiveMethod.check_config` plus ESimCSE's rule: no prompt (its BERT / RoBERTa families:
        :attr:`families`, by :func:`cselab.methods.checks.check_method`).

        Raises:
            ConfigError: names the key.
        """
        if not isinstance(model, EmbeddingSpec) and model.get("prompt"):
            raise ConfigError("method=esimcse has no template: set prompt=none")
        return super().check_config(backbone=backbone, model=model, **kwargs)

    @classmethod
    def view_specs(cls, prompt, setting: str, family: str) -> tuple[list[ViewSpec], ViewSpec]:
        """The untouched sentence and its repetition (``train.py:480,538``); the sentence at test."""
        return [ViewSpec("text"), ViewSpec(REPEATED_FIELD)], ViewSpec("text")

    def train_collate(self, seed: int = 0, pad_to_multiple_of: int | None = None) -> RepetitionCollate:
        """The DataModule's collate: :class:`cselab.methods.esimcse.repetition.RepetitionCollate` (no MLM masks:
        ``seed`` is not read), widths padded to a multiple of ``pad_to_multiple_of``."""
        o = self.options
        return RepetitionCollate(self.tokenizer, o.dup_rate, o.dup_type, max_seq_len=self.max_seq_len,
                                 max_positions=self.encoder.max_positions, pad_to_multiple_of=pad_to_multiple_of)

    # ----------------------------------------------------------------------------------------- training
    def prepare_train_set(self, dataset, seed: int):
        """The corpus with its repetitions, drawn over it in file order with the run's ``seed`` before training
        (``train.py:331,543``; :func:`cselab.methods.esimcse.repetition.add_repetition_column`); the DataModule
        applies it at fit, before the training loader is first built.

        Raises:
            ConfigError: a streamed corpus (``data.streaming=true``).
        """
        return add_repetition_column(dataset, self.train_collate(), seed)

    def on_train_epoch_start(self) -> None:
        """An empty queue at the start of every epoch (``trainers.py:452``); a run resumed within an epoch keeps
        the queue its checkpoint restored."""
        if self._queue_epoch != self.current_epoch:
            self.momentum.reset()
            self._queue_epoch = self.current_epoch

    def loss_inputs(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The current queue (Q, D) of :class:`QueueInfoNCE` (none before the first enqueue of an epoch)."""
        queue = self.momentum.queue
        return {} if queue is None else {"queue": queue}

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor | None:
        """The loss with the current queue (the base's step: cached or not, compiled or not, the queue its extra
        loss input), then the momentum update and the enqueue of the untouched sentences' momentum embeddings
        (done for a skipped non-finite step too, as the official step has no skip)."""
        loss = super().training_step(batch, batch_idx)
        self.momentum.update(self.encoder)
        self.momentum.enqueue(self.momentum.encode(batch, self._pool, self.head))
        self._queue_epoch = self.current_epoch
        self.log("train/queue_size", float(self.momentum.queue.shape[0]), batch_size=int(batch["input_ids"].shape[0]))
        return loss

    def _pool(self, encoder, ids: torch.Tensor, mask: torch.Tensor, rep: torch.Tensor) -> torch.Tensor:
        """The online path's pooling on ``encoder``'s output (N, D) (``models.py:183``)."""
        pooler, layer = self.model.representation_pooler, self.spec.pool_layer
        out = encoder(ids, mask, output_hidden_states=needs_hidden_states(pooler, layer))
        return pool(pooler, out, mask, rep, layer=layer)

    # ----------------------------------------------------------------------------------------- checkpoint
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """The base's record, plus the queue (``queue``: (n, D) CPU tensor or None) and the epoch that filled it (the
        momentum encoder is in the state dict)."""
        super().on_save_checkpoint(checkpoint)
        queue = self.momentum.queue
        checkpoint[CHECKPOINT_KEY] = {"queue": None if queue is None else queue.detach().cpu().clone(),
                                      "epoch": self._queue_epoch}

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Restore the queue onto the device (a resumed run continues with the queue of the interrupted one)."""
        state = checkpoint.get(CHECKPOINT_KEY)
        if state is not None:
            self.momentum.queue = None if state.get("queue") is None else state["queue"].to(self.device)
            self._queue_epoch = state.get("epoch")
