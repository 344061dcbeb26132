"""The DataModule base: training batches from a Hugging Face dataset, collated by the method.

Validation and test do not iterate over data here: STS evaluation is done by
:class:`cselab.evaluation.callback.STSCallback` through the method's ``encode``; Lightning's loops only give the
schedule (``val_check_interval``), so their loaders hold one placeholder item.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import lightning as L
import torch
from torch.utils.data import DataLoader, IterableDataset

from cselab.data.resume import DataPosition, ResumableDataLoader, ResumableSampler

log = logging.getLogger(__name__)

def batch_size(batch: dict[str, torch.Tensor] | list) -> int:
    """Examples in a collated batch (sentences or triplets: the rows of ``input_ids`` (B, V, T)), for Lightning's
    ``ThroughputMonitor`` (``conf/callbacks/default.yaml``)."""
    return int(batch["input_ids"].shape[0]) if isinstance(batch, dict) else len(batch)


class SentenceDataModule(L.LightningDataModule):
    """Base for the unsup corpus and the NLI triplets.

    Args:
        collate: the method's training collate, built with the run's seed and ``data.pad_to_multiple_of``
            (``method.train_collate(seed, pad_to_multiple_of)``): list of raw rows -> tensors.
        batch_size: sentences (unsup) or triplets (sup) per device and step.
        num_workers: DataLoader worker processes.
        seed: shuffling seed (and the ``transform``'s).
        drop_last: drop the last incomplete batch (CoT-BERT's recipe; SimCSE keeps it).
        pin_memory: pin host memory (useful on GPU).
        transform: ``(dataset, seed) -> dataset``, the method's view of the training corpus
            (``method.prepare_train_set``: ESimCSE's repetitions), applied once when :meth:`setup` has read it;
            None: the corpus as read.

    Mid-epoch resume: :meth:`state_dict` and :meth:`load_state_dict`, see :mod:`cselab.data.resume`.
    """

    def __init__(
        self,
        collate: Callable,
        batch_size: int = 64,
        num_workers: int = 0,
        seed: int = 42,
        drop_last: bool = False,
        pin_memory: bool = False,
        transform: Callable[[Any, int], Any] | None = None,
    ) -> None:
        super().__init__()
        if batch_size < 2:
            raise ValueError(f"data.batch_size must be >= 2 for in-batch negatives, got {batch_size}")
        self.collate = collate
        self.transform = transform
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.seed = seed
        self.drop_last = drop_last
        self.pin_memory = pin_memory
        self.train_set = None
        self._resume: DataPosition | None = None

    def _prepared(self, dataset):
        """``dataset`` (the corpus as read) through the method's ``transform``, if any."""
        return dataset if self.transform is None else self.transform(dataset, self.seed)

    def _skip(self, dataset, keep: Callable[[dict], bool], what: str):
        """``(dataset filtered by keep, rows dropped)``; a drop is logged as ``<path>: skipped <n> <what>``
        (``path``: the subclass's training file)."""
        kept = dataset.filter(keep)
        if len(kept) < len(dataset):
            log.warning("%s: skipped %d %s", self.path, len(dataset) - len(kept), what)
        return kept, len(dataset) - len(kept)

    def _rank_world(self) -> tuple[int, int]:
        trainer = self.trainer
        return (trainer.global_rank, trainer.world_size) if trainer is not None else (0, 1)

    def _loader(self, dataset, shuffle: bool) -> DataLoader:
        """The training loader: a seeded, rank-sharded order that resumes mid-epoch.

        Map-style datasets get a :class:`ResumableSampler`; an iterable dataset (the streamed corpus) shards
        and resumes itself (``dataset.resume(position, num_workers)``).
        """
        rank, world = self._rank_world()
        generator = torch.Generator()
        sampler = None if isinstance(dataset, IterableDataset) else ResumableSampler(
            dataset, num_replicas=world, rank=rank, shuffle=shuffle, seed=self.seed, drop_last=False,
            generator=generator)
        if self._resume is not None:
            self._resume.check(self.batch_size, world)
            if sampler is not None:
                sampler.resume(self._resume)
            else:
                dataset.resume(self._resume, num_workers=self.num_workers)
            self._resume = None
        return ResumableDataLoader(
            dataset,
            batch_size=self.batch_size,
            sampler=sampler,
            collate_fn=self.collate,
            num_workers=self.num_workers,
            drop_last=self.drop_last,
            pin_memory=self.pin_memory,
            persistent_workers=self.num_workers > 0,
            generator=generator,
        )

    @property
    def equal_rank_batches(self) -> bool:
        """True when every DDP rank gets a batch of the same size at every step (the contrastive gather then needs
        no size exchange, :func:`cselab.methods.gather.gather_embeddings`): a map-style dataset's
        :class:`ResumableSampler` pads the epoch to a multiple of the world size, as ``DistributedSampler``."""
        return True

    def state_dict(self) -> dict[str, Any]:
        """The data position for the checkpoint being written (the trainer's count of batches processed)."""
        trainer = self.trainer
        if trainer is None or trainer.state.fn != "fit":
            return {}
        processed = trainer.fit_loop.epoch_loop.batch_progress.current.processed
        position = DataPosition(epoch=trainer.current_epoch, batches=processed, batch_size=self.batch_size,
                                world_size=trainer.world_size)
        return {"data_position": asdict(position)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Remember a checkpoint's data position; the next training loader resumes from it.

        Raises:
            ValueError: the saved position is malformed.
        """
        if state_dict.get("data_position"):
            self._resume = DataPosition.from_dict(state_dict["data_position"], "checkpoint DataModule state")

    def val_dataloader(self) -> DataLoader:
        """One placeholder item: Lightning's loop gives the schedule, the STS callback evaluates (module docstring)."""
        return DataLoader([0], batch_size=1, collate_fn=lambda rows: rows)

    test_dataloader = val_dataloader
