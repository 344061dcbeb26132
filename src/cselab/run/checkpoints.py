"""Checkpoints for resuming: written atomically (temporary file, then ``os.replace``), a ``last.ckpt`` that a
resume never reads past an unfinished validation, and an unreadable checkpoint set aside (renamed) rather than
blocking every later resume."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.utilities.exceptions import SIGTERMException

from cselab.evaluation.sts import check_best_rule
from cselab.io.files import remove_stale_temporaries, staged


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's ``TorchCheckpointIO`` writing to a temporary file beside the target and renaming it over.

    The checkpoint is staged in its own folder (``checkpoints/.<name>.<pid>.<random>.tmp``: the same filesystem,
    never ``/tmp``, where Lightning's writer stages through fsspec) and streamed to disk by ``torch.save`` (no
    in-memory copy).  Any failure -- a full disk (ENOSPC), a kill signal turned into an exception -- removes the
    temporary file; a process killed outright leaves the previous checkpoint intact and a stray temporary file
    that the next save of that name removes.  Files get the process umask (:mod:`cselab.io.files`).  Remote paths
    (``s3://`` ...) fall back to Lightning's writer.
    """

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        if "://" in str(path) or storage_options is not None:
            return super().save_checkpoint(checkpoint, path, storage_options)
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temporaries(target)
        with staged(target, "wb") as f:
            torch.save(checkpoint, f)
        return None


def remove_last(dirpath: str | Path) -> int:
    """Remove ``last.ckpt`` from the run's ``checkpoints`` folder once the run has written ``results.json``
    (``checkpointing.keep_last=false``: it holds the optimizer state, the largest file of a run, and a finished run
    is never resumed); returns the bytes freed."""
    last = Path(dirpath) / "last.ckpt"
    if not last.is_file():
        return 0
    size = last.stat().st_size
    last.unlink()
    return size


def remove_set_aside(dirpath: str | Path) -> list[Path]:
    """Remove the checkpoints :func:`set_aside` renamed in the run's ``checkpoints`` folder (``*.unreadable-*``)
    once the run has written ``results.json``: the run finished without them, so they only mislead a reader of the
    folder; returns the removed paths."""
    removed = sorted(Path(dirpath).glob("*.ckpt.unreadable-*"))
    for path in removed:
        path.unlink(missing_ok=True)
    return removed


def read_error(path: str | Path) -> BaseException | None:
    """Why the checkpoint file ``path`` cannot be read (torch's exception: a file cut short by a crash during
    its write on another filesystem, a full quota ... -- ``failed finding central directory``), or ``None`` when
    it loads.  Memory-mapped: the weights are not read; a legacy (non-zip) file is read in full."""
    try:
        torch.load(path, map_location="cpu", mmap=True, weights_only=False)
        return None
    except Exception:  # noqa: BLE001 -- a non-zip (legacy) file cannot be mmapped: try once in full
        try:
            torch.load(path, map_location="cpu", weights_only=False)
            return None
        except Exception as err:  # noqa: BLE001 -- any failure to read is "unreadable"
            return err


def set_aside(path: str | Path) -> Path:
    """Rename the unreadable checkpoint ``path`` to ``<name>.unreadable-<UTC time>`` beside it (kept while the run
    is unfinished: it may be inspected or recovered; :func:`remove_set_aside` once the run has finished) and return
    the new path."""
    path = Path(path)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    target = path.with_name(f"{path.name}.unreadable-{stamp}")
    n = 1
    while target.exists():
        target, n = path.with_name(f"{path.name}.unreadable-{stamp}-{n}"), n + 1
    path.rename(target)
    return target


class BestCheckpoint(ModelCheckpoint):
    """Lightning's ``ModelCheckpoint`` keeping the best STS-B dev checkpoint (``save_top_k=1``), with the official
    code's rule for equal scores (``eval.best_on_tie``, ``eval.best_decimals``):

    * ``first``, unrounded (every encoder method's official code): the HF Trainer's ``_save_checkpoint`` replaces
      the best only with a strictly better score (SimCSE ``simcse/trainers.py:163-170``, ``np.greater``), as
      Lightning's own ``ModelCheckpoint`` does;
    * ``last``, 2 decimals (PromptEOL, ``kongds/scaling_sentemb``): ``evaluation.py:292`` prints the Spearman x 100
      with ``"%.2f"`` and ``:299-311`` copies the checkpoint to ``best_model`` when that printed score is ``>=`` the
      largest printed so far, so a tie at two decimals goes to the later checkpoint.

    Its state is saved under Lightning's ``ModelCheckpoint`` key, so that a checkpoint written before this class
    resumes with its best checkpoint.

    Args:
        on_tie: ``first`` or ``last`` (:data:`cselab.evaluation.sts.BEST_ON_TIE`).
        decimals: compare the monitored scores rounded to this many decimals (None: as they are).
        **kwargs: ``ModelCheckpoint``'s (``monitor``, ``mode``, ``save_top_k`` ...).

    Raises:
        ValueError: an unknown ``on_tie``, a negative ``decimals``, or a rule other than the default with
            ``save_top_k`` other than 1.
    """

    def __init__(self, *args: Any, on_tie: str = "first", decimals: int | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        check_best_rule(on_tie, decimals)
        if (on_tie, decimals) != ("first", None) and self.save_top_k != 1:
            raise ValueError(f"eval.best_on_tie / eval.best_decimals decide between two checkpoints: save_top_k=1, "
                             f"not {self.save_top_k}")
        self.on_tie, self.decimals = on_tie, decimals

    @property
    def state_key(self) -> str:
        return super().state_key.replace(type(self).__qualname__, ModelCheckpoint.__qualname__, 1)

    def check_monitor_top_k(self, trainer, current: torch.Tensor | None = None) -> bool:
        """Whether ``current`` replaces the best checkpoint: Lightning's rule, or the official code's (above)."""
        if (self.on_tie, self.decimals) == ("first", None) or current is None or not self.best_k_models:
            return super().check_monitor_top_k(trainer, current)
        now, best = float(current), float(self.best_k_models[self.kth_best_model_path])  # (at a validation only)
        if self.decimals is not None:
            now, best = round(now, self.decimals), round(best, self.decimals)
        better = now > best if self.mode == "max" else now < best
        replaces = better or (self.on_tie == "last" and now == best)
        return trainer.strategy.reduce_boolean_decision(bool(replaces))


class LastCheckpoint(ModelCheckpoint):
    """``checkpoints/last.ckpt`` for resuming: written at the end of every validation and every
    ``every_n_train_steps`` optimizer steps, whatever the best-checkpoint callback decided.

    Lightning's own ``save_last`` (2.6) writes ``last`` at a validation only when a top-k checkpoint was saved
    at that step, so with ``save_top_k=0`` a validation never wrote it; this callback writes it at every one.
    Placed after the best-checkpoint ``ModelCheckpoint`` (Lightning runs checkpoint callbacks last, in their
    order), so ``last.ckpt`` holds that validation's dev score, dev curve and best checkpoint.

    Unlike a plain ``ModelCheckpoint(save_last=True, every_n_train_steps=N)``, it does not write at the end of
    a training step that a validation follows: Lightning resumes such a checkpoint *past* that validation
    (``TrainingEpochLoop.advance`` fast-forwards the validation progress of a checkpoint saved
    ``on_train_batch_end``), so a kill between the two writes would lose one point of the dev curve and, if
    it was the best, the best checkpoint.  The validation's own write, moments later, covers that step.

    Args:
        dirpath: the run's ``checkpoints`` folder.
        every_n_train_steps: also write every N optimizer steps (None or 0: at validations only).
        every_minutes: without ``every_n_train_steps``, also write after a training step once this many minutes
            passed since the last write (Lightning's ``train_time_interval``; None or 0: at validations only).
    """

    def __init__(self, dirpath: str | Path, every_n_train_steps: int | None = None,
                 every_minutes: float | None = None) -> None:
        interval = timedelta(minutes=float(every_minutes)) if every_minutes and not every_n_train_steps else None
        super().__init__(dirpath=dirpath, save_top_k=0, save_last=True, every_n_train_steps=every_n_train_steps or 0,
                         train_time_interval=interval, save_on_train_epoch_end=False)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        loop = trainer.fit_loop.epoch_loop
        fetcher = getattr(trainer.fit_loop, "_data_fetcher", None)
        if fetcher is not None and loop._should_check_val_fx(fetcher):
            return  # a validation follows this step and writes last.ckpt after it
        if trainer.received_sigterm:  # SIGTERM / SIGINT (cselab.run.signals.stop_at_step_end): fit stops after this step
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))
            return
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)

    def on_validation_end(self, trainer, pl_module) -> None:
        if self._should_skip_saving_checkpoint(trainer):  # not fitting, sanity check, or already saved this step
            return
        self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        """SIGTERM / SIGINT during fit (Lightning's ``SIGTERMException``, raised at the end of a step:
        :func:`cselab.run.signals.stop_at_step_end`): ``last.ckpt`` of that step.  It is written where the periodic
        write is, at the end of the step's batch (:meth:`on_train_batch_end`) or of its validation, so that the
        same command resumes there bit for bit; here only when the signal came after those (a write at this
        point resumes an epoch's last step one rounding apart).  Any other exception writes nothing (the last
        periodic write stays)."""
        if (isinstance(exception, SIGTERMException) and trainer.state.fn == "fit" and not trainer.sanity_checking
                and self._last_global_step_saved != trainer.global_step):
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))
