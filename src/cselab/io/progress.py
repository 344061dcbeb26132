"""Progress a person can follow, in a terminal and in a log file.

* In a terminal: Lightning's Rich progress bar (``rich`` is a dependency) whose training total is bounded by
  ``trainer.max_steps`` (Lightning bounds it only when ``max_epochs=-1``), and, at every validation and test, one
  bar per STS task counting the sentences encoded (:class:`EvalProgress`, a task of the same Rich display).
* Not a terminal (a log file, a batch job, a pipe): no bars; a log line every ``every_s`` seconds of training
  (:class:`ProgressLog`: step / total, s/step, time left, loss) and, during an evaluation, a line when a task
  starts, every ``every_s`` seconds and when it ends (:class:`EvalProgress`).  The lines go through ``logging``,
  so they reach Hydra's ``<run dir>/<job>.log`` as well as the console.
"""

from __future__ import annotations

import logging
import math
import sys
import time
from datetime import timedelta

import lightning as L
from lightning.pytorch.callbacks import RichProgressBar
from lightning.pytorch.callbacks.progress.rich_progress import CustomTimeColumn, ProcessingSpeedColumn
from rich.text import Text

from cselab.io.logs import interactive

log = logging.getLogger(__name__)


def _duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    seconds = int(round(seconds))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def average_speed(task) -> float | None:
    """A Rich task's speed (units / s): Rich's own estimate over its last 30 s, else the average since the task
    began (an STS task's first chunk of sentences can take longer than that window on a busy CPU, where Rich
    shows no speed and no time left), else None before anything is done."""
    if task.speed:
        return task.speed
    elapsed = task.finished_time if task.finished else task.elapsed
    return task.completed / elapsed if task.completed and elapsed else None


def time_left(task) -> float | None:
    """Seconds left of a Rich task at :func:`average_speed`, or None (no total, or no speed yet)."""
    speed = average_speed(task)
    if task.finished:
        return 0.0
    if not speed or task.total is None or not math.isfinite(task.total):
        return None
    return max(task.total - task.completed, 0) / speed


class TimeLeftColumn(CustomTimeColumn):
    """``elapsed • left`` as Lightning's column, the time left from :func:`time_left`."""

    def render(self, task):
        elapsed = task.finished_time if task.finished else task.elapsed
        left = time_left(task)
        shown = ["-:--:--" if t is None else str(timedelta(seconds=int(t))) for t in (elapsed, left)]
        return Text(f"{shown[0]} • {shown[1]}", style=self.style)


class SpeedColumn(ProcessingSpeedColumn):
    """``12.34it/s`` (or the task's ``unit``, ``sent/s``) at :func:`average_speed`; ``-`` before any."""

    def render(self, task):
        speed = average_speed(task)
        unit = task.fields.get("unit", "it")
        return Text(f"{speed:.2f}{unit}/s" if speed else f"-{unit}/s", style=self.style)


def is_logging_step(trainer: L.Trainer | None) -> bool:
    """True on the training steps whose logged values Lightning writes (every ``trainer.log_every_n_steps``):
    the only steps on which cselab reads a value of the device on the host (the loss for the progress display,
    the non-finite flags, the throughput clock).  From ``on_train_batch_end``; False without a Trainer."""
    return trainer is not None and bool(trainer._logger_connector.should_update_logs or trainer.fast_dev_run)


class _LossOnLoggingSteps:
    """The training loss shown by a progress display, read on the host on logging steps only
    (:func:`is_logging_step`): between them it shows the last value read, so a step never waits for the device
    to show its loss."""

    shown_loss: float | None = None

    def _read_loss(self, trainer: L.Trainer) -> None:
        if is_logging_step(trainer):
            loss = trainer.callback_metrics.get("train/loss")
            self.shown_loss = None if loss is None else float(loss)


class StepRichProgressBar(_LossOnLoggingSteps, RichProgressBar):
    """Lightning's Rich progress bar, training total bounded by ``trainer.max_steps``; its time and speed
    columns fall back to the average since a task began (:func:`average_speed`), so an evaluation shows its
    time left; its postfix ``loss`` is the last logging step's (``train/loss`` is logged without ``prog_bar``,
    which Lightning would read on the host after every batch)."""

    @property
    def total_train_batches(self) -> int | float:
        """This epoch's batches, but no more than ``trainer.max_steps`` allows."""
        trainer = self.trainer
        total = trainer.num_training_batches
        if trainer.max_steps is not None and trainer.max_steps > 0:
            loop = trainer.fit_loop.epoch_loop
            done = loop.batch_progress.current.ready if loop.restarting else 0  # a resumed epoch's batches
            left = (trainer.max_steps - trainer.global_step) * trainer.accumulate_grad_batches
            total = min(total, done + max(left, 0))
        return total

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        self._read_loss(trainer)
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)

    def get_metrics(self, trainer, pl_module) -> dict:
        metrics = super().get_metrics(trainer, pl_module)
        return metrics if self.shown_loss is None else {**metrics, "loss": f"{self.shown_loss:.4f}"}

    def configure_columns(self, trainer: L.Trainer) -> list:
        columns = super().configure_columns(trainer)
        swap = {CustomTimeColumn: lambda c: TimeLeftColumn(style=c.style),
                ProcessingSpeedColumn: lambda c: SpeedColumn(style=c.style)}
        return [swap[type(c)](c) if type(c) in swap else c for c in columns]


def progress_callback(bars: bool = True, every_s: float = 60.0) -> L.Callback:
    """The training progress of a run (``conf/callbacks/default.yaml``): when ``bars`` and stderr is a
    terminal (:func:`interactive`), the Rich bar bounded by ``trainer.max_steps``
    (:class:`StepRichProgressBar`); else a :class:`ProgressLog` line every ``every_s`` seconds."""
    return StepRichProgressBar() if bars and interactive() else ProgressLog(float(every_s))


class ProgressLog(_LossOnLoggingSteps, L.Callback):
    """A log line every ``every_s`` seconds of training: ``step 40/187 (21%), 2.10 s/step, 0:05:13 left, loss 0.53``
    (the loss of the last logging step).

    For output that is not a terminal (where the bars are off).  The rate counts only this process's steps
    (a resumed run starts its clock at the resumed step) and only training: the time spent in validations is left
    out of ``s/step`` (a 10 s STS-B dev every 60 steps would add 0.17 s to each); the time left is the remaining
    steps at the wall-clock rate, validations included, since they will recur.

    Args:
        every_s: seconds between lines (the first line comes ``every_s`` after training starts).
    """

    def __init__(self, every_s: float = 60.0) -> None:
        self.every_s = float(every_s)
        self._start = self._last = 0.0
        self._first_step = 0
        self._eval_s = 0.0          # seconds spent in validations since training started
        self._eval_start: float | None = None

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._start = self._last = time.monotonic()
        self._first_step = trainer.global_step
        self._eval_s, self._eval_start = 0.0, None
        total = trainer.estimated_stepping_batches
        log.info("training: step %d of %s", trainer.global_step, f"{int(total):,}" if math.isfinite(total) else "?")

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._eval_start = time.monotonic()

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._eval_start is not None:  # the sanity check's ends before on_train_start resets the sum
            self._eval_s += time.monotonic() - self._eval_start
        self._eval_start = None

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        self._read_loss(trainer)
        now = time.monotonic()
        if now - self._last < self.every_s or not trainer.is_global_zero:
            return
        self._last = now
        step = trainer.global_step
        total = trainer.estimated_stepping_batches
        steps = max(step - self._first_step, 1)
        rate = (now - self._start - self._eval_s) / steps  # training only
        parts = [f"training: step {step:,}", f"{rate:.2f} s/step"]
        if math.isfinite(total):
            parts[0] += f"/{int(total):,} ({100 * step / total:.0f}%)"
            parts.append(f"{_duration((now - self._start) / steps * (total - step))} left")
        if self.shown_loss is not None:
            parts.append(f"loss {self.shown_loss:.4f}")
        log.info(", ".join(parts))


class EvalProgress:
    """``progress(task, done, total)`` for :meth:`cselab.evaluation.sts.STSEvaluator.evaluate_detailed`:
    sentences encoded per task.

    In a terminal with Lightning's Rich bar running: one line of that display per task (``sts12 test 2048/6216
    0:00:21 • 0:00:42 97.50sent/s``); with the tqdm bar, or no trainer (an evaluation without ``trainer.test``):
    a tqdm bar per task (time left, sentences / s); otherwise (not a terminal, bars off): log lines when a task
    starts, every ``every_s`` seconds, and when it ends.

    Args:
        trainer: the trainer whose progress bar to draw on (None: a tqdm bar in a terminal, else log lines).
        split: shown with each task name (``dev``, ``test``).
        every_s: seconds between log lines.
    """

    def __init__(self, trainer: L.Trainer | None, split: str, every_s: float = 60.0) -> None:
        self.split = split
        self.every_s = float(every_s)
        bar = getattr(trainer, "progress_bar_callback", None)
        self._bar = bar if bar is not None and bar.is_enabled and interactive() else None
        self._tqdm = trainer is None and interactive()  # no trainer: a tqdm bar of our own
        self._task = None  # (task name, Rich task id (an int) | tqdm bar | None)
        self._start = self._last = 0.0

    def __call__(self, task: str, done: int, total: int) -> None:
        if self._task is None or self._task[0] != task:
            self.close()
            self._task = (task, self._open(task, total))
            self._start = self._last = time.monotonic()
            if self._task[1] is None:
                log.info("evaluating %s %s: %s sentences to encode", task, self.split, f"{total:,}")
        handle = self._task[1]
        if isinstance(handle, int):  # a Rich task id (else a tqdm bar of our own, or None: log lines)
            self._bar.progress.update(handle, completed=done)
            self._bar.refresh()
        elif handle is not None:
            handle.update(done - handle.n)
        else:
            now = time.monotonic()
            if done >= total:
                log.info("evaluated %s %s: %s sentences in %.1f s", task, self.split, f"{total:,}", now - self._start)
            elif done and now - self._last >= self.every_s:
                self._last = now
                rate = (now - self._start) / done
                log.info("evaluating %s %s: %s/%s sentences (%.0f%%), %s left", task, self.split, f"{done:,}",
                         f"{total:,}", 100 * done / total, _duration(rate * (total - done)))

    def _open(self, task: str, total: int):
        if isinstance(self._bar, RichProgressBar) and self._bar.progress is not None:
            description = f"{task} {self.split}"
            if self._bar.theme.description:
                description = f"[{self._bar.theme.description}]{description}"
            return self._bar.progress.add_task(description, total=total, unit="sent")
        if self._tqdm or self._bar is not None:  # (a Rich bar between its loops, e.g. after fit: no live display)
            from tqdm.auto import tqdm

            return tqdm(total=total, desc=f"{task} {self.split}", unit="sent", leave=False, file=sys.stderr)
        return None

    def close(self) -> None:
        """Remove the current task's bar (called between tasks and at the end)."""
        if self._task is None:
            return
        handle = self._task[1]
        if isinstance(handle, int) and self._bar.progress is not None:
            self._bar.progress.remove_task(handle)
            self._bar.refresh()
        elif handle is not None and hasattr(handle, "close"):
            handle.close()
        self._task = None
