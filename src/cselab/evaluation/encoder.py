"""What evaluation needs of a model: :class:`SentenceEncoder`, one ``typing.Protocol`` that every evaluated
object implements -- a method (:class:`cselab.methods.base.ContrastiveMethod`, trained or not), an exported
or loaded :class:`cselab.model.embedding.EmbeddingModel`, and the token representations of ``method=baseline``
(:class:`cselab.representations.token.TokenRepresentation`).  The evaluators know only this."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import torch


@runtime_checkable
class SentenceEncoder(Protocol):
    """A model the evaluators score.

    ``encode(sentences, batch_size=None, encoder="test")``: (N, D) float32 embeddings on CPU, rows in input
    order; ``encoder="dev"`` is the in-training dev encoder that selects checkpoints (the test one where the
    model has no other).  ``describe()``: what it does at test (``pooler``, ``head``, ``template`` ...: model
    cards, exports).  ``num_trainable_parameters()``: what the optimiser updates (0 for a representation).
    """

    def encode(self, sentences: Sequence[str], batch_size: int | None = None,
               encoder: str = "test") -> torch.Tensor: ...

    def describe(self) -> dict[str, Any]: ...

    def num_trainable_parameters(self) -> int: ...
