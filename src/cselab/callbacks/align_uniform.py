"""The alignment-uniformity trajectory during training (SimCSE Fig. 2): ℓ_align and ℓ_uniform every N steps.

SimCSE Fig. 2 plots, for checkpoints taken every 10 training steps, ℓ_align (x: positive pairs, STS-B pairs with
gold > 4) against ℓ_uniform, at Wang & Isola's definitions (``align_loss`` alpha = 2, ``uniform_loss`` t = 2:
SsnL/align_uniform@e256d47 ``align_uniform/__init__.py:4-9``; :mod:`cselab.evaluation.align_uniform`, the one
definition, shared with ``cselab analysis align-uniform``).  This callback measures them on the STS-B dev split
(``split``) with the module's dev encoder (the checkpoint-selection encoder) at step 0 (before the first update:
the trajectory's start) and after every ``every_n_steps``-th optimizer step, and logs them to the run's loggers
(``csv/metrics.csv`` and W&B when on) as ``align_uniform/alignment``, ``align_uniform/uniformity`` and
``align_uniform/seconds`` (the measurement's own time) at ``trainer.global_step``.  ``cselab report --figures``
draws the trajectory from ``csv/metrics.csv``.

Cost: one encode of the split's distinct sentences (STS-B dev: 2,880) per measurement plus an O(N^2) uniformity;
each measurement is logged with its seconds, and the end of the fit logs the total and its share of the fit.
Off by default (``callbacks.align_uniform.enabled: false`` in ``conf/callbacks/default.yaml``); on in
``experiment=simcse/unsup_fig2_bert_base``, or with ``callbacks.align_uniform.enabled=true``.  Only rank 0
measures (as :class:`cselab.evaluation.callback.STSCallback`); the steps that measure wait for the device.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import lightning as L

from cselab.data.sts import load_task
from cselab.evaluation.align_uniform import AlignUniformInputs

log = logging.getLogger(__name__)

#: the metric names of the loggers (``csv/metrics.csv`` columns), read back by the report's figures
ALIGNMENT_METRIC = "align_uniform/alignment"
UNIFORMITY_METRIC = "align_uniform/uniformity"
SECONDS_METRIC = "align_uniform/seconds"
SPLITS = ("dev", "test")


class AlignUniform(L.Callback):
    """Log ℓ_align and ℓ_uniform on STS-B every ``every_n_steps`` optimizer steps (module docstring).

    Args:
        data_dir: the data folder holding ``senteval/downstream`` (``${data_dir}``).
        every_n_steps: steps between measurements (SimCSE Fig. 2: 10); step 0 is always measured.
        split: the STS-B split: ``dev`` (SimCSE Fig. 2) or ``test`` (``cselab analysis align-uniform``'s).
        threshold: positive pairs have gold score STRICTLY above it (4.0).
        alpha, t: the exponents of ℓ_align and ℓ_uniform (2 and 2).
        batch_size: sentences per encode batch (None: the module's ``eval_batch_size``).
        encoder: the module's encoder measured: ``dev`` (the checkpoint-selection encoder) or ``test``.

    Attributes:
        history: ``[{"step", "alignment", "uniformity", "seconds"}]``, one entry per measurement (kept in
            checkpoints, so a resumed run continues it).
        seconds_total: the measurements' time over the whole run (resumed processes included).

    Raises:
        ValueError: ``every_n_steps`` < 1, an unknown ``split`` / ``encoder`` (names the key).
    """

    def __init__(self, data_dir: str, every_n_steps: int = 10, split: str = "dev", threshold: float = 4.0,
                 alpha: float = 2.0, t: float = 2.0, batch_size: int | None = None, encoder: str = "dev") -> None:
        if isinstance(every_n_steps, bool) or not isinstance(every_n_steps, int) or every_n_steps < 1:
            raise ValueError(f"callbacks.align_uniform.every_n_steps={every_n_steps!r}: expected an integer >= 1 "
                             "(SimCSE Fig. 2 measures every 10 steps)")
        if split not in SPLITS:
            raise ValueError(f"callbacks.align_uniform.split={split!r}: expected one of {', '.join(SPLITS)}")
        if encoder not in ("dev", "test"):
            raise ValueError(f"callbacks.align_uniform.encoder={encoder!r}: expected dev or test")
        self.data_dir = data_dir
        self.every_n_steps = every_n_steps
        self.split, self.threshold, self.alpha, self.t = split, float(threshold), float(alpha), float(t)
        self.batch_size, self.encoder = batch_size, encoder
        self.history: list[dict[str, float]] = []
        self.seconds_total = 0.0
        self._inputs: AlignUniformInputs | None = None
        self._fit_started = 0.0
        self._seconds_this_fit = 0.0

    def state_dict(self) -> dict[str, Any]:
        """The trajectory so far and its cost (a resumed run continues both)."""
        return {"history": list(self.history), "seconds_total": self.seconds_total}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Continue the trajectory of a checkpoint."""
        self.history = list(state_dict.get("history", []))
        self.seconds_total = float(state_dict.get("seconds_total", 0.0))

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._fit_started, self._seconds_this_fit = time.perf_counter(), 0.0
        if trainer.is_global_zero and self._inputs is None:
            pairs = load_task(self.data_dir, "stsb", self.split)[self.split]
            self._inputs = AlignUniformInputs.from_pairs(pairs, self.threshold)
            log.info("align_uniform: STS-B %s, %d positive pairs (gold > %g), %d sentences, every %d steps",
                     self.split, len(self._inputs.left), self.threshold, len(self._inputs.sentences),
                     self.every_n_steps)
        if not any(h["step"] == trainer.global_step for h in self.history) and trainer.global_step == 0:
            self.measure(trainer, pl_module)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *_: Any) -> None:
        step = int(trainer.global_step)
        if step % self.every_n_steps or (self.history and self.history[-1]["step"] >= step):
            return  # not a measuring step, or already measured (gradient accumulation: several batches a step)
        self.measure(trainer, pl_module)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.is_global_zero:
            return
        fit = time.perf_counter() - self._fit_started
        share = 100.0 * self._seconds_this_fit / fit if fit > 0 else 0.0
        log.info("align_uniform: %d measurements, %.1f s in this fit (%.1f %% of its %.1f s), %.1f s in the run",
                 len(self.history), self._seconds_this_fit, share, fit, self.seconds_total)

    def measure(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Measure now (rank 0), log to the trainer's loggers at ``trainer.global_step``, append to
        :attr:`history`."""
        if not trainer.is_global_zero or self._inputs is None:
            return
        step = int(trainer.global_step)
        start = time.perf_counter()
        measured = self._inputs.measure(
            lambda s: pl_module.encode(s, batch_size=self.batch_size, encoder=self.encoder), self.alpha, self.t)
        seconds = time.perf_counter() - start
        self.seconds_total += seconds
        self._seconds_this_fit += seconds
        entry = {"step": step, "alignment": measured["alignment"], "uniformity": measured["uniformity"],
                 "seconds": round(seconds, 3)}
        self.history.append(entry)
        metrics = {ALIGNMENT_METRIC: entry["alignment"], UNIFORMITY_METRIC: entry["uniformity"],
                   SECONDS_METRIC: entry["seconds"]}
        for logger in trainer.loggers:
            logger.log_metrics(metrics, step=step)
            logger.save()
        log.info("step %d: align %.4f uniform %.4f (%.1f s; align_uniform %.1f s in all)", step,
                 entry["alignment"], entry["uniformity"], seconds, self.seconds_total)
