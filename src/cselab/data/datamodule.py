"""The DataModule base: training batches from a Hugging Face dataset, collated by the method.

Validation and test do not iterate over data here: STS evaluation is done by
:class:`cselab.evaluation.callback.STSCallback` through the method's ``encode``; Lightning's loops only give the
schedule (``val_check_interval``), so their loaders hold one placeholder item.
"""

from __future__ import annotations

from collections.abc import Callable

import lightning as L
from torch.utils.data import DataLoader


class SentenceDataModule(L.LightningDataModule):
    """Base for the unsup corpus and the NLI triplets.

    Args:
        collate: the method's training collate (``method.train_collate``): list of raw rows -> tensors.
        batch_size: sentences (unsup) or triplets (sup) per device and step.
        num_workers: DataLoader worker processes.
        seed: shuffling seed.
        drop_last: drop the last incomplete batch (CoT-BERT's recipe; SimCSE keeps it).
        pin_memory: pin host memory (useful on GPU).
    """

    def __init__(
        self,
        collate: Callable,
        batch_size: int = 64,
        num_workers: int = 0,
        seed: int = 42,
        drop_last: bool = False,
        pin_memory: bool = False,
    ) -> None:
        super().__init__()
        if batch_size < 2:
            raise ValueError(f"data.batch_size must be >= 2 for in-batch negatives, got {batch_size}")
        self.collate = collate
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.seed = seed
        self.drop_last = drop_last
        self.pin_memory = pin_memory
        self.train_set = None

    def _loader(self, dataset, shuffle: bool) -> DataLoader:
        return DataLoader(
            dataset,
            batch_size=self.batch_size,
            shuffle=shuffle,
            collate_fn=self.collate,
            num_workers=self.num_workers,
            drop_last=self.drop_last,
            pin_memory=self.pin_memory,
            persistent_workers=self.num_workers > 0,
        )

    def val_dataloader(self) -> DataLoader:
        return DataLoader([0], batch_size=1, collate_fn=lambda rows: rows)

    def test_dataloader(self) -> DataLoader:
        return DataLoader([0], batch_size=1, collate_fn=lambda rows: rows)
