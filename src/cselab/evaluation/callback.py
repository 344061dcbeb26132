"""The STS validation / test callback: the evaluator driven by Lightning's schedule.

* Validation (every ``trainer.val_check_interval`` steps, SimCSE's 125): STS-B dev Spearman x 100, logged as
  ``val/stsb_spearman`` at ``trainer.global_step`` (the step of ``results.json``'s ``val_curve`` and of the
  checkpoint names); a ``ModelCheckpoint`` monitoring it keeps the best model (SimCSE's model selection).
  The dev split is encoded with the module's DEV encoder (``encode(..., encoder="dev")``: the official
  trainers' dev batcher under ``eval.dev_encoder=official``, see docs/fidelity.md).
* Test: the 7 test tasks (STS12-16 "all", STS-B test, SICK-R test) with the TEST encoder, and STS-B dev with the
  dev encoder (so ``results.json``'s dev score is the one the checkpoint was selected on), logged as
  ``test/<task>`` and kept in :attr:`STSCallback.test_scores` / :attr:`STSCallback.dev_scores`.

* Whitening (``eval.whitening``, BERT-whitening): at the start of the test -- ``on_test_start`` after Lightning
  loaded the best checkpoint, or :meth:`STSCallback.evaluate_encoder` for a run that trains nothing -- the
  transform is fitted on its corpus with the test encoder and installed on the embedding model
  (:class:`cselab.evaluation.whitening.WhiteningFit`), so every test embedding is whitened; it is then written
  into the tested checkpoint (a run that trains nothing: ``checkpoints/best-step0.ckpt``), so ``cselab.load`` /
  ``cselab export`` give the encoder that was tested.  Validation (checkpoint selection) is never whitened.

Only rank 0 evaluates; the score is broadcast so every rank's checkpoint decision agrees under DDP.
"""

from __future__ import annotations

import logging
import os
import time

import lightning as L

from cselab.evaluation.encoder import SentenceEncoder
from cselab.evaluation.results import papers_avg
from cselab.evaluation.sts import TEST_TASKS, STSEvaluator
from cselab.evaluation.whitening import (
    WhiteningFit,
    WhiteningOptions,
    add_to_checkpoint,
    save_untrained_checkpoint,
)
from cselab.io.progress import EvalProgress

log = logging.getLogger(__name__)

DEV_METRIC = "val/stsb_spearman"


class STSCallback(L.Callback):
    """Evaluate the module's ``encode`` on STS during validation and test.

    Args:
        data_dir: the data directory holding ``senteval/downstream``.
        test_tasks: tasks scored at test (default the 7 of the papers).
        dev_task: the model-selection task, scored on its ``dev`` split (``stsb``).
        aggregation: ``all`` | ``mean`` | ``wmean`` for STS12-16.
        batch_size: sentences per forward pass (None: the module's ``eval_batch_size``).
        progress_every_s: seconds between progress log lines when the output is not a terminal (a terminal gets a
            bar per task: :class:`cselab.io.progress.EvalProgress`).

        started: ``time.perf_counter()`` when this process began the run (default: now).
        whitening: the ``eval.whitening`` node (:class:`cselab.evaluation.whitening.WhiteningOptions`): fit and
            apply BERT-whitening at test; None or ``enabled: false``: off.
        run_dir: the run directory (where a run that trains nothing writes its whitened checkpoint); None: not
            written.

    Attributes:
        elapsed_before: seconds of the run spent before this process, up to the checkpoint it resumed from
            (0 for a fresh run); ``results.json``'s ``wall_time_s`` adds it.
        history: ``[{"step": int, "stsb_dev": float, "seconds": float}]``, one entry per validation (kept in
            checkpoints: a resumed run continues the curve).
        test_scores / dev_scores: filled by the test loop; ``test_scores`` has ``avg`` only when all 7 tasks
            are tested (:func:`cselab.evaluation.results.papers_avg`: the console's ``test/avg`` is
            ``results.json``'s).
        tested_dev: the STS-B dev score of the checkpoint the test loop loads, when the run already has it (the
            best checkpoint's validation, set by the run before ``trainer.test``): the test loop then reports it
            instead of encoding STS-B dev again; None: encoded at test.
    """

    def __init__(
        self,
        data_dir: str,
        test_tasks: tuple[str, ...] | list[str] = TEST_TASKS,
        dev_task: str = "stsb",
        aggregation: str = "all",
        batch_size: int | None = None,
        progress_every_s: float = 60.0,
        started: float | None = None,
        whitening: dict | None = None,
        run_dir: str | None = None,
    ) -> None:
        self.evaluator = STSEvaluator(data_dir)
        options = WhiteningOptions.from_config(whitening)
        self.whitening = None if options is None else WhiteningFit(options, data_dir, test_tasks)
        self.run_dir = run_dir
        self.progress_every_s = progress_every_s
        self.started = time.perf_counter() if started is None else started  # this process's run clock
        self.elapsed_before = 0.0  # seconds the run had spent in earlier processes (a resumed run)
        self._loaded: tuple[list[dict], float] | None = None  # (history, elapsed_before) of a loaded checkpoint
        self.test_tasks = tuple(test_tasks)
        self.dev_task = dev_task
        self.aggregation = aggregation
        self.batch_size = batch_size
        self.history: list[dict] = []
        self.test_scores: dict[str, float] = {}
        self.dev_scores: dict[str, float] = {}
        self.tested_dev: float | None = None
        self.test_pairs: dict[str, tuple[list[float], list[float]]] = {}  # task -> (cosines, gold)
        self.test_subsets: dict[str, dict[str, int]] = {}  # task -> {subset: pairs}, the order of test_pairs

    def state_dict(self) -> dict:
        """The STS-B dev curve so far and the run's wall time up to now: saved in every checkpoint, so a resumed
        run reports the whole curve and the whole time."""
        elapsed = self.elapsed_before + time.perf_counter() - self.started
        return {"history": list(self.history), "elapsed_s": round(elapsed, 3)}

    def load_state_dict(self, state_dict: dict) -> None:
        """Keep the dev curve and wall time of a checkpoint; a resumed ``fit`` continues them
        (:meth:`on_fit_start`).  Loading the best checkpoint to test restores them too, but must not cut the
        curve back to that step."""
        self._loaded = (list(state_dict.get("history", [])), float(state_dict.get("elapsed_s", 0.0)))

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.whitening is not None:  # a whitening the model cannot take: refused now, not after training
            self.whitening.check(pl_module)
        if self._loaded is not None:
            (self.history, self.elapsed_before), self._loaded = self._loaded, None

    def evaluate_encoder(self, model: SentenceEncoder, dev_encoder: str = "test") -> None:
        """Without a Trainer: the test tasks and the dev task on ``model.encode`` (a method or any object with
        ``encode(sentences, batch_size, encoder=)``), kept in :attr:`test_scores`, :attr:`dev_scores` and
        :attr:`test_pairs` as at the end of ``trainer.test``.

        Args:
            dev_encoder: the encoder of the dev split: ``test`` (a run that trains nothing: the official
                evaluation.py ``--mode dev`` scores STS-B dev with the test encoder) or ``dev`` (the in-training
                dev encoder that selected the checkpoint).
        """
        if self.whitening is not None:
            self.whitening(model, batch_size=self.batch_size)
            # a run that trains nothing (method.train=false): the whitened model is its checkpoint (cselab.load,
            # export); eval.test_backbone's reloaded model of a trained run has the run's best checkpoint
            hparams = getattr(model, "hparams", None)
            if self.run_dir is not None and hparams is not None and not hparams.get("train", True):
                path = save_untrained_checkpoint(os.path.join(self.run_dir, "checkpoints", "best-step0.ckpt"), model)
                log.info("the whitened model: %s", path)
        self.test_scores = papers_avg(self._score(None, model, self.test_tasks, "test", keep_pairs=True))
        self.dev_scores = {self.dev_task: self._score(None, model, (self.dev_task,), "dev",
                                                      encoder=dev_encoder)[self.dev_task]}

    def _score(self, trainer, pl_module: SentenceEncoder, tasks, split, keep_pairs: bool = False,
               encoder: str | None = None) -> dict[str, float]:
        """``tasks`` on ``split`` with the module's dev encoder on ``dev``, its test encoder otherwise (or
        ``encoder``); rank 0 evaluates, the scores are broadcast."""
        encoder = encoder or ("dev" if split == "dev" else "test")
        scores = None
        if trainer is None or trainer.is_global_zero:
            progress = EvalProgress(trainer, split, every_s=self.progress_every_s)
            try:
                report = self.evaluator.evaluate_detailed(
                    lambda sentences: pl_module.encode(sentences, batch_size=self.batch_size, encoder=encoder),
                    tasks=tasks, split=split, aggregation=self.aggregation, progress=progress)
            finally:
                progress.close()
            scores = dict(report.scores)
            if keep_pairs:
                self.test_pairs = {t: (r.system, r.gold) for t, r in report.tasks.items()}
                self.test_subsets = {t: {name: s.n for name, s in r.subsets.items()} for t, r in report.tasks.items()}
        return scores if trainer is None else trainer.strategy.broadcast(scores, src=0)

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        score = self.validate(trainer, pl_module)
        # for ModelCheckpoint's monitor and the bar only: Lightning would log it at the step counter before this
        # step's increment (global_step - 1); the loggers get it at the step results.json and checkpoints use
        pl_module.log(DEV_METRIC, score, prog_bar=True, logger=False, sync_dist=False)

    def validate(self, trainer: L.Trainer, pl_module: L.LightningModule) -> float:
        """Score the dev task with the module's dev encoder now (a validation: Lightning's, or the one the
        pipeline adds after a fit that never reached ``trainer.val_check_interval``), log it to the trainer's
        loggers at ``trainer.global_step`` and append it to :attr:`history`; returns the Spearman x 100."""
        start = time.perf_counter()
        score = float(self._score(trainer, pl_module, (self.dev_task,), "dev")[self.dev_task])
        seconds = time.perf_counter() - start
        if trainer.is_global_zero:
            for logger in trainer.loggers:
                logger.log_metrics({DEV_METRIC: score}, step=int(trainer.global_step))
                logger.save()  # on disk before this validation's checkpoints: a resumed run keeps these rows
        self.history.append({"step": int(trainer.global_step), "stsb_dev": score, "seconds": round(seconds, 2)})
        log.info("step %d: STS-B dev Spearman %.2f (%.1f s)", trainer.global_step, score, seconds)
        return score

    def on_test_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """With ``eval.whitening``: fit it (rank 0, the rank that evaluates) on the checkpoint Lightning loaded,
        and write it into that checkpoint."""
        if self.whitening is None or not trainer.is_global_zero:
            return
        self.whitening(pl_module, batch_size=self.batch_size)
        if trainer.ckpt_path and os.path.isfile(trainer.ckpt_path):
            add_to_checkpoint(trainer.ckpt_path, pl_module)
            log.info("whitening written into %s", trainer.ckpt_path)

    def on_test_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.test_scores = papers_avg(self._score(trainer, pl_module, self.test_tasks, "test", keep_pairs=True))
        dev = self.tested_dev  # the tested checkpoint's own validation: not encoded a second time
        if dev is None:
            dev = self._score(trainer, pl_module, (self.dev_task,), "dev")[self.dev_task]
        self.dev_scores = {self.dev_task: float(dev)}
        for task, value in self.test_scores.items():
            pl_module.log(f"test/{task}", float(value), sync_dist=False)
        pl_module.log(f"test/{self.dev_task}_dev", float(self.dev_scores[self.dev_task]), sync_dist=False)
