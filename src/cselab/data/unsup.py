"""The unsupervised corpus (wiki1m format: one sentence a line) as a LightningDataModule.

Two ways to read it:

* default: Hugging Face ``datasets`` builds a memory-mapped Arrow table once (cached), shuffled by the
  sampler (:class:`cselab.data.resume.ResumableSampler`, a ``DistributedSampler`` that resumes mid-epoch);
* ``streaming=true`` (corpora larger than memory): :class:`StreamingSentences` reads the file lazily, line by
  line, with a seeded buffered shuffle, and shards it across DDP ranks AND DataLoader workers.

Why not ``datasets``' own streaming: a ``load_dataset("text", streaming=True)`` of one file has ONE shard,
and ``datasets`` shards an ``IterableDataset`` across DataLoader workers by shard, so with one file every
worker beyond the first gets nothing (``datasets`` warns "Too many dataloader workers") and
``split_dataset_by_node`` followed by workers still leaves worker 1.. idle.  :class:`StreamingSentences`
instead partitions EXAMPLES (K = world_size x num_workers shards of one seeded order: its docstring).
Rows are the same as the memory-mapped path's (``datasets``' text reader: universal newlines, split on
``"\\n"``, line break removed); empty and whitespace-only lines are skipped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from itertools import islice
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from cselab.data.datamodule import SentenceDataModule
from cselab.data.paths import UNDECODABLE, data_root, require
from cselab.data.resume import DataPosition

log = logging.getLogger(__name__)


class StreamingSentences(IterableDataset):
    """Sentences of a one-sentence-a-line file, streamed, shuffled with a buffer, sharded by rank and worker.

    Order: the non-empty lines in file order go through a buffered shuffle (the algorithm of ``datasets``'
    ``IterableDataset.shuffle``: a buffer of ``shuffle_buffer`` sentences, each new line replaces a random
    buffer slot whose sentence is emitted) driven by ``numpy.random.default_rng([seed, epoch])``.  The order
    depends only on (file, seed, epoch, shuffle_buffer), so it is the same in every process.

    Sharding: position ``p`` of that order goes to shard ``p % K`` with ``K = world_size * num_workers``,
    shard ``k`` being worker ``k // world_size`` of rank ``k % world_size``.  Each shard reads the whole file
    (K reads of the file per epoch: cheap next to training, it is a sequential text read) and keeps its own
    positions, so the shards partition the epoch exactly.

    ``even_ranks`` (DDP): ranks that get different numbers of batches deadlock at the epoch's end (a rank
    waits in the gradient all-reduce of a step the others never take).  With ``even_ranks=true`` the last
    incomplete group of ``world_size`` consecutive positions is dropped (fewer than ``world_size`` sentences
    per epoch, never any with one process), so every rank's worker ``w`` yields exactly as many sentences as
    the other ranks' worker ``w``: same number of batches, same sizes.  ``false``: every sentence exactly once.

    Epochs: :meth:`set_epoch` (Lightning calls it each epoch through the DataLoader's sampler, see
    :class:`UnsupDataModule`) changes the order; the epoch lives in shared memory so persistent workers see it.

    Args:
        path: the text file (local path; UTF-8).
        seed: shuffle seed.
        shuffle_buffer: buffer size in sentences; ``<= 1`` keeps file order.
        rank, world_size: this process's DDP rank and the number of ranks.
        even_ranks: drop the < ``world_size`` trailing sentences that would unbalance the ranks (above).

    Yields:
        ``{"text": str}`` rows (the line without its line break).

    Raises:
        ValueError: ``world_size < 1`` or ``rank`` not in ``[0, world_size)``.
    """

    def __init__(
        self,
        path: str | Path,
        seed: int = 42,
        shuffle_buffer: int = 10_000,
        rank: int = 0,
        world_size: int = 1,
        even_ranks: bool = True,
    ) -> None:
        super().__init__()
        if world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(f"StreamingSentences: need 0 <= rank < world_size, got rank={rank}, world_size={world_size}")
        self.path = str(path)
        self.seed = int(seed)
        self.shuffle_buffer = int(shuffle_buffer)
        self.rank = int(rank)
        self.world_size = int(world_size)
        self.even_ranks = bool(even_ranks)
        self._epoch = torch.zeros((), dtype=torch.long).share_memory_()
        self._resume: tuple[DataPosition, int] | None = None

    def set_epoch(self, epoch: int) -> None:
        """Select the shuffle of epoch ``epoch`` (visible to already started, persistent workers)."""
        self._epoch.fill_(int(epoch))

    @property
    def epoch(self) -> int:
        """The current epoch (the shuffle's second seed)."""
        return int(self._epoch.item())

    def resume(self, position: DataPosition, num_workers: int = 0) -> None:
        """Skip, in ``position.epoch`` only, the sentences this rank's workers already delivered (each worker
        its own share, see :meth:`DataPosition.samples_to_skip`).  Set before the loader's workers start."""
        self._resume = (position, num_workers)

    def lines(self) -> Iterator[str]:
        """The usable lines in file order, as ``datasets``' text reader splits them.

        Empty and whitespace-only lines are skipped, and so are lines with bytes that are not UTF-8 (decoded
        with ``errors="replace"``, a line holding U+FFFD is dropped, never half-trained on); the streamed
        corpus is read once per shard, so they are logged at debug level only.
        """
        with open(self.path, encoding="utf-8", errors="replace") as f:  # universal newlines, as datasets
            for line in f:
                line = line.rstrip("\n")
                if UNDECODABLE in line:
                    log.debug("%s: skipped a line with non-UTF-8 bytes", self.path)
                    continue
                if line.strip():
                    yield line

    def ordered(self) -> Iterator[str]:
        """The global (unsharded) order of the current epoch."""
        items = self.lines()
        if self.shuffle_buffer <= 1:
            yield from items
            return
        rng = np.random.default_rng([self.seed, self.epoch])
        size = self.shuffle_buffer
        buffer: list[str] = []
        draws: list[int] = []
        for item in items:
            if len(buffer) < size:
                buffer.append(item)
                continue
            if not draws:
                draws = rng.integers(0, size, 1024).tolist()[::-1]
            i = draws.pop()
            yield buffer[i]
            buffer[i] = item
        rng.shuffle(buffer)
        yield from buffer

    def __iter__(self) -> Iterator[dict[str, str]]:
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        skip = 0
        if self._resume is not None and self._resume[0].epoch == self.epoch:
            position = self._resume[0]
            # A new DataLoader iterator asks its workers round-robin from worker 0, but the next batch of the
            # interrupted epoch (number `batches`) belongs to worker `batches % workers`: in this epoch only,
            # worker w plays that role's shard, so the batches come back in the interrupted order.
            worker = (worker + position.batches) % workers
            skip = position.samples_to_skip(worker, self._resume[1])
        self._resume = None  # this epoch only (in a worker: its copy; the parent's copy is not iterated)
        shard = worker * self.world_size + self.rank  # of workers * world_size shards (class docstring)
        yield from islice(self._shard_rows(shard, workers * self.world_size), skip, None)

    def _shard_rows(self, k: int, n_shards: int) -> Iterator[dict[str, str]]:
        group_end = k - self.rank + self.world_size - 1  # last position (mod K) of this shard's rank group
        pending: str | None = None
        for p, text in enumerate(self.ordered()):
            j = p % n_shards
            if j == k:
                pending = text
            if j == group_end and pending is not None:  # the whole group of world_size exists: keep it
                yield {"text": pending}
                pending = None
        if pending is not None and not self.even_ranks:
            yield {"text": pending}


class UnsupDataModule(SentenceDataModule):
    """Sentences for unsupervised contrastive learning; rows are ``{"text": str}``.

    Args:
        path: the corpus file, relative to ``data_dir`` unless absolute (config ``data.path``).
        data_dir: the data directory (see :mod:`cselab.data.paths`).
        streaming: iterate lazily (:class:`StreamingSentences`) instead of building a memory-mapped Arrow table.
        shuffle_buffer: buffer size (sentences) of the streaming shuffle.
        even_ranks: streaming under DDP: drop the < world_size trailing sentences of an epoch that would give
            the ranks different numbers of batches (see :class:`StreamingSentences`).
        **kwargs: :class:`SentenceDataModule` arguments (collate, batch_size, num_workers, seed ...).

    Streaming has no length: set ``trainer.max_steps`` (the LR schedule needs a number of steps).

    Raises:
        FileNotFoundError: the corpus is missing (names the path, ``data.path`` and the command to get it).
    """

    def __init__(
        self,
        collate: Callable,
        path: str = "wiki1m_for_simcse.txt",
        data_dir: str | None = None,
        streaming: bool = False,
        shuffle_buffer: int = 10_000,
        even_ranks: bool = True,
        **kwargs,
    ) -> None:
        super().__init__(collate, **kwargs)
        self.path = path if path.startswith("/") else str(data_root(data_dir) / path)
        self.streaming = streaming
        self.shuffle_buffer = shuffle_buffer
        self.even_ranks = even_ranks
        self.skipped_lines = 0
        self.skipped_undecodable = 0

    @property
    def equal_rank_batches(self) -> bool:
        """The streamed corpus gives every rank batches of the same sizes only with ``even_ranks``."""
        return not self.streaming or bool(self.even_ranks)

    def setup(self, stage: str | None = None) -> None:
        if stage not in (None, "fit") or self.train_set is not None:
            return
        require(self.path, "unsup corpus", "data.path")
        if self.streaming:
            rank, world = self._rank_world()
            self.train_set = self._prepared(StreamingSentences(
                self.path, seed=self.seed, shuffle_buffer=self.shuffle_buffer, rank=rank, world_size=world,
                even_ranks=self.even_ranks,
            ))
            return
        import datasets

        ds = datasets.load_dataset("text", data_files={"train": self.path}, split="train",
                                   encoding_errors="replace")
        ds, self.skipped_lines = self._skip(ds, lambda row: bool(row["text"].strip()), "empty or whitespace-only lines")
        ds, self.skipped_undecodable = self._skip(ds, lambda row: UNDECODABLE not in row["text"],
                                                  "lines with bytes that are not UTF-8")
        if len(ds) == 0:
            raise ValueError(f"{self.path} (data.path): no usable sentence (every line empty or not UTF-8)")
        if len(ds) < self.batch_size and self.drop_last:
            raise ValueError(f"{self.path} has {len(ds)} sentences, fewer than data.batch_size={self.batch_size}")
        self.train_set = self._prepared(ds)

    def train_dataloader(self) -> DataLoader:
        loader = self._loader(self.train_set, shuffle=not self.streaming)
        if isinstance(self.train_set, StreamingSentences):
            # Lightning calls set_epoch on the DataLoader's sampler each epoch (before iterating); an iterable
            # dataset's loader has a constant sampler without one, so route it to the dataset.
            loader.sampler.set_epoch = self.train_set.set_epoch
        return loader
