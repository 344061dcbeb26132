"""Mid-epoch resume of the training data: the position (epoch, batches done) and the samplers that honour it.

Why not ``torchdata``'s ``StatefulDataLoader`` or Lightning's loader-state hook alone:

* Lightning prefetches one batch of a loader without length (a streamed corpus), so the number of batches a
  loader has *yielded* is one ahead of the number the model has *trained on*; a loader that counts its own
  batches resumes one batch too late.  The exact count is the trainer's: batches processed in the current
  epoch (``fit_loop.epoch_loop.batch_progress.current.processed``), read when the checkpoint is written.
* Lightning (2.5, 2.6) does not load a loader's state when ``trainer.estimated_stepping_batches`` was read before
  the restore (Lightning-AI/pytorch-lightning#20550); every method reads it in ``configure_optimizers`` for the
  LR schedule.  A DataModule's ``state_dict`` is restored before any loader exists, so the position lives there.

So :class:`~cselab.data.datamodule.SentenceDataModule` saves a :class:`DataPosition` in every checkpoint and,
on restore, hands it to the epoch's order (:class:`ResumableSampler` for a memory-mapped corpus, or
:class:`cselab.data.unsup.StreamingSentences`), which skips exactly the samples already trained on in that epoch
and only in that epoch.  The order of an epoch depends only on (seed, epoch), never on the global RNG, so the
skipped prefix is the one the interrupted run saw.  The model's RNG (dropout) is restored by
:class:`cselab.callbacks.rng_state.RNGState` (a trainer callback).

Limits: with ``data.num_workers > 0`` the data ORDER is still exact, but the random draws made inside the
collate in worker processes (the MLM masks of ``method.mlm``) restart from the epoch's worker seed instead of
continuing; with ``num_workers=0`` (the default) the resumed run is bit-identical.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch.utils.data import DataLoader, DistributedSampler


@dataclass(frozen=True)
class DataPosition:
    """Where training stood in the data when a checkpoint was written.

    Attributes:
        epoch: the epoch being trained (0-based; the shuffle's epoch).
        batches: batches of that epoch already trained on, per rank (the trainer's ``processed`` count).
        batch_size: per-rank batch size then (a resume with another batch size is refused).
        world_size: number of ranks then (a resume on another number of ranks is refused).
    """

    epoch: int
    batches: int
    batch_size: int
    world_size: int

    @classmethod
    def from_dict(cls, state: dict, where: str = "checkpoint") -> DataPosition:
        """Parse a checkpoint's position.

        Raises:
            ValueError: a key is missing or not an integer (names ``where`` and the key).
        """
        try:
            return cls(**{k: int(state[k]) for k in ("epoch", "batches", "batch_size", "world_size")})
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"{where}: malformed data position {state!r} ({err})") from err

    def check(self, batch_size: int, world_size: int) -> None:
        """Refuse a resume whose batches would not line up with the checkpoint's.

        Raises:
            ValueError: ``data.batch_size`` or the number of ranks differs from the checkpoint's.
        """
        if batch_size != self.batch_size or world_size != self.world_size:
            raise ValueError(
                f"cannot resume mid-epoch: the checkpoint was written with data.batch_size={self.batch_size} on "
                f"{self.world_size} rank(s), this run has data.batch_size={batch_size} on {world_size} rank(s); "
                "resume with the same values (or start a new run)"
            )

    def samples_to_skip(self, worker: int = 0, num_workers: int = 0) -> int:
        """Samples of this epoch one rank (or one of its DataLoader workers) already delivered.

        A map-style loader draws ``batches * batch_size`` indices from the rank's sampler.  An iterable dataset
        read by ``num_workers`` workers gets its batches round-robin (batch ``i`` from worker
        ``i % num_workers``), so worker ``w`` delivered ``len(range(w, batches, num_workers))`` of them.
        """
        if num_workers <= 1:
            return self.batches * self.batch_size
        return len(range(worker, self.batches, num_workers)) * self.batch_size


class ResumableSampler(DistributedSampler):
    """A ``DistributedSampler`` (seeded shuffle per epoch, one shard per rank) that can resume mid-epoch.

    Being a ``DistributedSampler``, Lightning keeps it as is under DDP instead of swapping in its own.  The
    permutation of epoch ``e`` is ``torch.randperm`` with seed ``seed + e`` (PyTorch's semantics), independent
    of the global RNG.  It also reseeds ``generator`` (the DataLoader's, from which the worker base seed is
    drawn) at each epoch, so worker seeds too depend only on (seed, epoch).

    Args:
        dataset: a sized dataset.
        num_replicas, rank: DDP world size and this rank (1 and 0 without DDP).
        shuffle, seed, drop_last: as ``DistributedSampler``.
        generator: the DataLoader's generator to reseed each epoch (optional).
    """

    def __init__(self, dataset, num_replicas: int = 1, rank: int = 0, shuffle: bool = True, seed: int = 0,
                 drop_last: bool = False, generator: torch.Generator | None = None) -> None:
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=shuffle, seed=seed,
                         drop_last=drop_last)
        self.generator = generator
        self._resume: DataPosition | None = None
        if generator is not None:
            generator.manual_seed(seed)

    def set_epoch(self, epoch: int) -> None:
        """Select epoch ``epoch``'s permutation (Lightning calls this before each epoch)."""
        super().set_epoch(epoch)
        if self.generator is not None:
            self.generator.manual_seed(self.seed * 1_000_003 + int(epoch))

    def resume(self, position: DataPosition) -> None:
        """Skip, in ``position.epoch`` only, the samples that epoch already delivered."""
        self._resume = position

    def __iter__(self) -> Iterator[int]:
        indices = super().__iter__()
        position, self._resume = self._resume, None
        if position is not None and position.epoch == self.epoch:
            skip = position.samples_to_skip()
            indices = iter(list(indices)[skip:])
        return indices


class ResumableDataLoader(DataLoader):
    """A DataLoader that Lightning recognises as resumable (it has ``state_dict`` / ``load_state_dict``).

    The position itself is saved and restored by the DataModule (see the module docstring for why), so
    these two methods only describe where it lives; without them Lightning warns on every mid-epoch resume
    that the data order is lost, which is no longer true.
    """

    def state_dict(self) -> dict[str, str]:
        """A marker: the data position is in the checkpoint's DataModule state."""
        return {"data_position": "in the DataModule state (cselab.data.resume)"}

    def load_state_dict(self, state: dict) -> None:
        """Nothing to do: the DataModule restored the position before this loader was built."""

