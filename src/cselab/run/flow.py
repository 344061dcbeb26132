"""One run, end to end: the config read once into a :class:`~cselab.run.spec.RunSpec`, then its steps.

1. :meth:`RunSpec.from_config` (called by ``run.py``; the one place that reads the config): the run directory (a
   finished run refused), every config rule (names the offending keys); then :class:`Run` (:func:`run`):
   :meth:`Run.prepare`: every input file, the checkpoint to resume from and the new command against that
   checkpoint's config (``resume.allow_changed``, :mod:`cselab.callbacks.run_config`), all before the
   backbone loads;
2. build the method (loads the backbone) and, when training, its DataModule with the method's collate;
3. fit with the STS callback validating STS-B dev every ``trainer.val_check_interval`` steps and a
   ``ModelCheckpoint`` keeping the best ``val/stsb_spearman``;
4. reload the best checkpoint and score the 7 test tasks;
5. write ``results.json`` (atomically) in the run's output directory and print the papers' table.
"""

from __future__ import annotations

import logging
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cselab.methods.compiled import log_compile_report
from cselab.run.inputs import check_inputs
from cselab.run.resume import RunState, checkpoint_step
from cselab.run.spec import RunSpec
from cselab.run.teachers import teacher_record

if TYPE_CHECKING:
    import lightning as L

    from cselab.evaluation.callback import STSCallback
    from cselab.run.results import Outcome

# Lightning, the method and the evaluation are imported where the run builds them (:meth:`Run.execute`): a command
# refused by :meth:`RunSpec.from_config` or :meth:`Run.prepare` answers before they load (Lightning alone: about 3 s
# of imports on an idle 2-core machine, docs/benchmarks.md "A refused command").

log = logging.getLogger(__name__)


def run(spec: RunSpec, output_dir: str | Path, start: float | None = None) -> dict[str, Any]:
    """Train (if ``spec.train``) and evaluate the run that ``spec`` describes: ``Run(spec, output_dir,
    start).execute()``; returns the results dict also written to disk.

    Raises:
        ConfigError: a ``resume`` directory without a checkpoint; a changed key on resume (:meth:`Run.prepare`).
    """
    return Run(spec, output_dir, start).execute()


class Run:
    """One run as a recipe (as torchtune's recipes: an object built from its spec whose steps share what they
    built): :meth:`prepare` (checks before the backbone loads), :meth:`execute` (method, callbacks, loggers; fit
    and test or evaluate as it is; the results), :meth:`fit_and_test`.

    Args:
        spec: the run, read from the config once (:meth:`RunSpec.from_config`, ``run.py``).
        output_dir: the run's directory (Hydra's ``runtime.output_dir``).
        start: ``time.perf_counter()`` when the command began, for the results' wall time (default: now).
    """

    def __init__(self, spec: RunSpec, output_dir: str | Path, start: float | None = None) -> None:
        self.spec = spec
        self.output_dir = Path(output_dir)
        self.start = time.perf_counter() if start is None else start

    def prepare(self) -> RunState:
        """What is checked after the config and before the backbone loads: every input file, the checkpoint to
        resume from, and the new command against that checkpoint's config (``resume.allow_changed``); RankCSE's
        teachers resolved and logged.

        Raises:
            RunFinished: the directory holds ``results.json`` (:meth:`ResumeSpec.check_directory`).
            ConfigError: a changed key that ``resume.allow_changed`` does not list; an unreadable ``ckpt_path``.
            FileNotFoundError, ValueError: a missing or bad input file (:func:`cselab.run.inputs.check_inputs`).
        """
        spec = self.spec
        # a finished run, again: run.py read the spec before taking the directory's lock (a refusal of a finished
        # run then creates no lock file in it); another process may have finished it in between
        spec.resume.check_directory(self.output_dir, spec.train, spec.config, spec.copies)
        check_inputs(spec.inputs)  # every input file, before the backbone loads and long before fit ends
        from cselab.callbacks.run_config import check_resume  # (Lightning: after the input files' refusals)

        ckpt_path = spec.resume.checkpoint(self.output_dir, spec.train)
        resume_step = checkpoint_step(ckpt_path)
        changed = check_resume(spec.config, spec.copies, spec.resume.allow_changed, ckpt_path, resume_step)
        teachers = (spec.module.get("options") or {}).get("teachers") if spec.train else None  # RankCSE's
        return RunState(self.output_dir, self.start, ckpt_path, resume_step, tuple(changed),
                        tuple(teacher_record(teachers)) if isinstance(teachers, list) else ())

    def execute(self, state: RunState | None = None) -> dict[str, Any]:
        """The run: :meth:`prepare` (unless ``state``, its result, is given: ``run.py`` prepares first, so that a
        refusal is decided before the run's record is written), then seed, method, callbacks, loggers; fit and
        test (or evaluate as it is); the results (:func:`cselab.run.results.finish`)."""
        import lightning as L

        from cselab.run import assemble
        from cselab.run.results import Outcome, finish

        spec, state = self.spec, state if state is not None else self.prepare()
        L.seed_everything(spec.seed, workers=True)
        method = assemble.build_run_method(spec)
        runtime = assemble.runtime_arguments(spec, state)
        callbacks = assemble.build_callbacks(spec.callbacks, runtime, names=None if spec.train else ("sts",))
        loggers = assemble.start_loggers(spec, state, method)
        if spec.train:
            outcome = self.fit_and_test(state, method, callbacks, loggers)
        else:  # nothing to train: the evaluator scores the model's encode directly, no Trainer
            _evaluate(callbacks["sts"], method, "test", loggers, step=0)  # STS-B dev as evaluation.py --mode dev
            outcome = Outcome()
        return finish(spec, state, method, callbacks["sts"], loggers, outcome)

    def fit_and_test(self, state: RunState, method, callbacks: dict[str, L.Callback], loggers: list) -> Outcome:
        """Fit with the callbacks (STS-B dev every ``val_check_interval``, the best checkpoint kept), then test
        the best checkpoint; with ``eval.test_backbone`` its trained tensors on the backbone reloaded with those
        keys (PromptEOL's rows: trained in 4-bit, tested in fp32)."""
        from lightning.pytorch.utilities.exceptions import SIGTERMException

        from cselab.methods.loading import load
        from cselab.run import assemble
        from cselab.run.results import Outcome
        from cselab.run.signals import StoppedBySignal, sigterm_stops, stop_at_step_end

        sts = callbacks["sts"]
        trainer = assemble.build_trainer(self.spec.training, list(callbacks.values()), loggers, state.output_dir)
        datamodule = assemble.build_datamodule(self.spec.training, method)
        with stop_at_step_end(trainer) as received:  # SIGTERM / SIGINT: last.ckpt of the step, then exit 128 + sig
            try:
                trainer.fit(method, datamodule=datamodule, ckpt_path=state.ckpt_path, weights_only=False)
            except SIGTERMException:
                last = state.output_dir / "checkpoints" / "last.ckpt"
                step = int(trainer.global_step)
                saved = last.is_file() and checkpoint_step(str(last)) == step
                raise StoppedBySignal(received.get("signum", signal.SIGTERM), step,
                                      str(last) if saved else None) from None
        if getattr(method, "compile_scope", None) and trainer.is_global_zero:
            log_compile_report(method.compile_scope, self.spec.training.compile)  # once per run
        best, best_dev = validate_at_end(trainer, method, sts, callbacks.get("checkpoint"), state.output_dir)
        with sigterm_stops("test"):  # the test phase is one callback call: Lightning alone would ignore SIGTERM
            if self.spec.evaluation.reloads_backbone and best:  # its trained tensors on the reloaded backbone
                log.info("testing %s on the backbone reloaded with eval.test_backbone=%s", best,
                         self.spec.evaluation.test_backbone_keys)
                if trainer.is_global_zero:
                    tested = load(best, backbone=self.spec.evaluation.test_backbone).to(method.device)
                    _evaluate(sts, tested, "dev", loggers, step=int(trainer.global_step))
                    del tested
            else:
                sts.tested_dev = best_dev if best else dev_at_this_step(sts, trainer)  # not encoded again
                trainer.test(method, datamodule=datamodule, ckpt_path=best, weights_only=False)
        return Outcome(best, best_dev, int(trainer.global_step), trainer.is_global_zero)


def validate_at_end(trainer: L.Trainer, method, sts: STSCallback, checkpoint, output_dir: Path):
    """The best checkpoint and its STS-B dev score after ``fit``.  A fit that never reached
    ``trainer.val_check_interval`` (a run under 125 steps) is validated now, at its last step, and saved as
    ``checkpoints/best-step<N>.ckpt``, so that every trained run records a best checkpoint.

    Returns:
        (path or None, score or None): None when nothing was trained (no ``checkpoint`` callback) or in a
        ``trainer.fast_dev_run`` (no checkpoints: the weights in memory are tested, as before).
    """
    if checkpoint is None:
        return None, None
    if checkpoint.best_model_path:
        score = checkpoint.best_model_score
        return checkpoint.best_model_path, (float(score) if score is not None else None)
    if trainer.fast_dev_run:  # a plumbing check: Lightning writes no checkpoint; the weights in memory are tested
        return None, None
    if sts.history and sts.history[-1]["step"] == trainer.global_step:  # validated at this step, not saved
        score = float(sts.history[-1]["stsb_dev"])
    else:
        log.info("training ended at step %d before any validation (trainer.val_check_interval=%s): validating now",
                 trainer.global_step, trainer.val_check_interval)
        score = sts.validate(trainer, method)
    path = Path(output_dir) / "checkpoints" / f"best-step{int(trainer.global_step)}.ckpt"
    trainer.save_checkpoint(path, weights_only=bool(getattr(checkpoint, "save_weights_only", False)))
    return str(path), score


def dev_at_this_step(sts: STSCallback, trainer: L.Trainer) -> float | None:
    """The STS-B dev score of the weights in memory, when a validation scored them at the last step
    (``trainer.fast_dev_run``, or no checkpoint callback: the test loop then tests these weights); None otherwise."""
    last = sts.history[-1] if sts.history else None
    return float(last["stsb_dev"]) if last is not None and last["step"] == trainer.global_step else None


def _evaluate(sts: STSCallback, encoder, dev_encoder: str, loggers: list, step: int) -> None:
    """``encoder`` scored by the evaluator without ``trainer.test`` (:meth:`STSCallback.evaluate_encoder`, the dev
    split with ``dev_encoder``), its test scores and dev score to the loggers."""
    sts.evaluate_encoder(encoder, dev_encoder=dev_encoder)
    for logger in loggers:
        logger.log_metrics({**{f"test/{t}": float(v) for t, v in sts.test_scores.items()},
                            **{f"test/{t}_dev": float(v) for t, v in sts.dev_scores.items()}}, step=step)
        logger.save()
