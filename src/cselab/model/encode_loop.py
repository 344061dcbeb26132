"""The pieces of cselab's one encode loop (:meth:`.embedding.EmbeddingModel.encode`): the sentences' tokenization
cached across calls, the sort-batch-unsort loop by token length, and every submodule's train/eval mode restored
after."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence

import torch
from torch import nn


def in_length_order(tokens: Sequence[Sequence[int]], batch_size: int,
                    run: Callable[[list[int]], torch.Tensor]) -> torch.Tensor | None:
    """cselab's one sort-batch-unsort loop: the sentences' indices sorted by token length (less padding), cut into
    batches of ``batch_size``, ``run(indices)`` -> (b, ...) rows for each batch, the rows put back in input order:
    (N, ...) on ``run``'s device, or None for no sentence.  Used by :meth:`.embedding.EmbeddingModel.encode`."""
    order = sorted(range(len(tokens)), key=lambda i: len(tokens[i]))
    chunks = [run(order[start : start + batch_size]) for start in range(0, len(order), batch_size)]
    if not chunks:
        return None
    out = torch.cat(chunks)
    result = torch.empty_like(out)
    result[torch.tensor(order, dtype=torch.long, device=out.device)] = out
    return result


class TokenCache:
    """Token ids of the last ``size`` sentence lists per collate (STS-B dev is encoded at every validation).

    Keyed by the collate's id and the sentences; the collate itself is kept with its entry, so its id is never
    reused while the entry lives.
    """

    def __init__(self, size: int = 4) -> None:
        self.size = size
        self._entries: dict = {}

    def tokens(self, collate, sentences: tuple[str, ...]) -> list[list[int]]:
        """``collate.tokenize(sentences)``, from the cache when this collate tokenized these sentences lately."""
        key = (id(collate), sentences)
        hit = self._entries.get(key)
        if hit is None or hit[0] is not collate:
            hit = self._entries[key] = (collate, collate.tokenize(list(sentences)))
            while len(self._entries) > self.size:
                self._entries.pop(next(iter(self._entries)))
        return hit[1]

    def clear(self) -> None:
        """Forget every entry (the collates were rebuilt)."""
        self._entries.clear()


@contextlib.contextmanager
def eval_mode(*modules: nn.Module | None) -> Iterator[None]:
    """``modules`` (None: skipped) in eval mode within the block; every submodule's train/eval mode restored after,
    module by module (a backbone shared with a module in another mode keeps its own)."""
    modules = tuple(m for m in modules if m is not None)
    modes = [(m, m.training) for module in modules for m in module.modules()]
    for module in modules:
        module.eval()
    try:
        yield
    finally:
        for m, mode in modes:
            m.training = mode
