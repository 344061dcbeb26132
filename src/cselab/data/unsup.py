"""The unsupervised corpus (wiki1m format: one sentence a line) as a LightningDataModule.

Read with Hugging Face ``datasets``: memory-mapped Arrow by default, or ``streaming=true`` for corpora larger
than memory (buffered shuffle, sharded across DDP ranks with ``split_dataset_by_node`` and across dataloader
workers by ``datasets`` itself).  Empty and whitespace-only lines are skipped and counted.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from torch.utils.data import DataLoader

from cselab.data.datamodule import SentenceDataModule
from cselab.data.paths import data_root, require

log = logging.getLogger(__name__)


class UnsupDataModule(SentenceDataModule):
    """Sentences for unsupervised contrastive learning; rows are ``{"text": str}``.

    Args:
        path: the corpus file, relative to ``data_dir`` unless absolute (config ``data.path``).
        data_dir: the data directory (see :mod:`cselab.data.paths`).
        streaming: iterate lazily instead of building a memory-mapped Arrow table.
        shuffle_buffer: buffer size of the streaming shuffle.
        **kwargs: :class:`SentenceDataModule` arguments (collate, batch_size, num_workers, seed ...).

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
        **kwargs,
    ) -> None:
        super().__init__(collate, **kwargs)
        root = data_root(data_dir)
        self.path = path if path.startswith("/") else str(root / path)
        self.streaming = streaming
        self.shuffle_buffer = shuffle_buffer
        self.skipped_lines = 0

    def setup(self, stage: str | None = None) -> None:
        if stage not in (None, "fit") or self.train_set is not None:
            return
        import datasets

        require(self.path, "unsup corpus", "data.path")
        if self.streaming:
            ds = datasets.load_dataset("text", data_files={"train": self.path}, split="train", streaming=True)
            ds = ds.filter(lambda row: bool(row["text"].strip()))
            ds = ds.shuffle(seed=self.seed, buffer_size=self.shuffle_buffer)
            if self.trainer is not None and self.trainer.world_size > 1:
                from datasets.distributed import split_dataset_by_node

                ds = split_dataset_by_node(ds, rank=self.trainer.global_rank, world_size=self.trainer.world_size)
            self.train_set = ds
            return
        ds = datasets.load_dataset("text", data_files={"train": self.path}, split="train")
        n = len(ds)
        ds = ds.filter(lambda row: bool(row["text"].strip()))
        self.skipped_lines = n - len(ds)
        if self.skipped_lines:
            log.warning("%s: skipped %d empty or whitespace-only lines", self.path, self.skipped_lines)
        if len(ds) < self.batch_size and self.drop_last:
            raise ValueError(f"{self.path} has {len(ds)} sentences, fewer than data.batch_size={self.batch_size}")
        self.train_set = ds

    def train_dataloader(self) -> DataLoader:
        return self._loader(self.train_set, shuffle=not self.streaming)
