"""What a method shows of its embedding model: the parts, template inputs, evaluation settings and inference path
of ``self.model`` (:class:`cselab.model.embedding.EmbeddingModel`), read through the method.

:class:`cselab.methods.base.ContrastiveMethod` mixes it in: the trainer, the callbacks, the evaluation and the
exports call ``method.encoder``, ``method.eval_collate``, ``method.encode`` ... and get the embedding model's.
Nothing here holds state: every attribute reads (or, for the evaluation settings, :meth:`respec`-s) ``self.model``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch


class EmbeddingModelAccess:
    """The embedding model's parts and inference path as attributes of the method that owns it (``self.model``).

    Needs ``self.model`` (an :class:`~cselab.model.embedding.EmbeddingModel`).
    """

    encoder = property(lambda self: self.model.backbone, doc="The backbone module of :attr:`model`.")
    head = property(lambda self: self.model.head, doc="The projection head of :attr:`model` (or None).")
    tokenizer = property(lambda self: self.model.tokenizer, doc="The backbone's tokenizer.")
    spec = property(lambda self: self.model.spec, doc="What the embedding model is (:class:`EmbeddingSpec`).")
    tuning = property(lambda self: self.model.spec.tuning, doc="The prompt module and what trains.")
    max_seq_len = property(lambda self: self.model.spec.max_seq_len, doc="Training truncation (tokens).")
    representation_pooler = property(lambda self: self.model.representation_pooler,
                                     doc="The pooler applied to the backbone output.")
    train_collate = property(lambda self: self.model.collate("train"), doc="The DataModule's collate.")
    eval_collate = property(lambda self: self.model.collate("test"), doc="The test encoder's collate.")
    dev_collate = property(lambda self: self.model.collate("dev"), doc="The dev encoder's collate.")

    @property
    def eval_batch_size(self) -> int | None:
        """Sentences per forward pass in :meth:`encode` (None: 256 on a GPU, 128 on CPU); settable."""
        return self.model.spec.eval_batch_size

    @eval_batch_size.setter
    def eval_batch_size(self, value: int | None) -> None:
        self.model.respec(eval_batch_size=value)

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
