"""What a finished run leaves: ``results.json`` (:func:`cselab.evaluation.results.build_results`), the test pairs,
the SentEval transfer scores, the intervals, and the papers' table on the console."""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from cselab.data.paths import data_root
from cselab.data.transfer import PAPER_NAMES as TRANSFER_NAMES
from cselab.evaluation.callback import STSCallback
from cselab.evaluation.encoder import SentenceEncoder
from cselab.evaluation.gold_bins import cosine_by_gold_bin
from cselab.evaluation.pair_scores import PAIRS_FILE, write_pair_scores
from cselab.evaluation.results import build_results, score_intervals, write_results
from cselab.evaluation.sts import PAPER_NAMES, format_table
from cselab.evaluation.transfer import TransferEvaluator, format_transfer_table, tqdm_progress
from cselab.io.progress import interactive
from cselab.methods.base import ContrastiveMethod
from cselab.model.loading import resolve_dtype
from cselab.run.checkpoints import remove_last, remove_set_aside
from cselab.run.loggers import close_loggers, log_test_charts, log_transfer_table
from cselab.run.pieces import EvalSpec, RunNames
from cselab.run.resume import RunState
from cselab.run.spec import RunSpec
from cselab.run.sweep import FAILED_FILE

log = logging.getLogger(__name__)

#: ``results.json``'s ``dev_encoder`` -> the words the console prints beside the STS-B dev score
DEV_ENCODER_WORDS = {
    "test": "the test encoder",
    "in_training": "the in-training dev encoder that selected the checkpoint, not the test encoder: eval.dev_encoder",
}


@dataclass
class Outcome:
    """What training left: the best checkpoint and its STS-B dev score (None: nothing trained, or a
    ``fast_dev_run``), the last global step, and whether this process is rank 0 (it writes and prints)."""

    best: str | None = None
    best_dev: float | None = None
    global_step: int = 0
    rank_zero: bool = True


def _clear_earlier_attempts(output_dir: Path) -> None:
    """Once ``results.json`` is written: an earlier attempt's ``failed.json`` and the checkpoints it set aside as
    unreadable (``checkpoints/*.unreadable-*``) go, each named in the log, so that the finished run's directory
    says only that it finished (``cselab report`` reads ``results.json`` first anyway)."""
    failed = output_dir / FAILED_FILE
    if failed.is_file():
        failed.unlink()
        log.info("removed %s: an earlier attempt's failure; this one finished", FAILED_FILE)
    for gone in remove_set_aside(output_dir / "checkpoints"):
        log.info("removed checkpoints/%s: set aside as unreadable by an earlier attempt; this one finished", gone.name)


def finish(spec: RunSpec, state: RunState, method, sts: STSCallback, loggers: list,
           outcome: Outcome) -> dict[str, Any]:
    """``results.json`` (rank 0 writes it, with ``test_pairs.npz``), the papers' table printed, the loggers
    closed; returns the results."""
    results, transfer, by_bin = collect_results(spec, state, method, sts, outcome)
    if not outcome.rank_zero:  # under DDP only rank 0 writes and prints
        close_loggers(loggers)
        return results
    if sts.test_pairs:
        write_pair_scores(state.output_dir / PAIRS_FILE, sts.test_pairs, sts.test_subsets,
                          spec.evaluation.aggregation)
    path = write_results(state.output_dir / "results.json", results)
    _clear_earlier_attempts(state.output_dir)
    if spec.training is not None and not spec.training.keep_last:
        if freed := remove_last(state.output_dir / "checkpoints"):
            log.info("removed checkpoints/last.ckpt (%.0f MB; the run finished: checkpointing.keep_last=false)",
                     freed / 2**20)
    print_results(spec.names, spec.train, results, path)
    if transfer:
        print(f"transfer ({transfer['transfer_protocol']['mode']}, accuracy x 100)\n"
              f"{format_transfer_table(transfer['transfer'], list(spec.evaluation.transfer_tasks))}")
        log_transfer_table(loggers, transfer["transfer"], TRANSFER_NAMES)
    log_test_charts(loggers, results["test"], by_bin, PAPER_NAMES, results.get("test_ci"))
    close_loggers(loggers)
    return results


def collect_results(spec: RunSpec, state: RunState, method, sts: STSCallback, outcome: Outcome):
    """``(results, transfer, by_bin)``: the results dict (:func:`cselab.evaluation.results.build_results`), the
    SentEval transfer scores (rank 0, ``eval.transfer_tasks``) and STS-B test's cosines by gold-score bin."""
    bins, by_bin = None, None
    if sts.test_pairs.get("stsb"):
        by_bin = cosine_by_gold_bin(*sts.test_pairs["stsb"])
        bins = {b: {"n": int(len(c)), "mean": float(c.mean()) if len(c) else None,
                    "std": float(c.std()) if len(c) else None} for b, c in by_bin.items()}
    evaluation = spec.evaluation
    transfer = run_transfer(evaluation, spec.inputs.data_dir, method) if outcome.rank_zero else {}
    intervals = test_intervals(evaluation, sts) if outcome.rank_zero and sts.test_pairs else None
    results = build_results(
        sts.test_scores,
        sts.dev_scores,
        spec.config,
        val_curve=sts.history,
        best_checkpoint=outcome.best,
        best_dev=outcome.best_dev,
        dev_encoder=dev_encoder_used(spec.train, method),
        test_backbone=tested_weights(evaluation.test_backbone),
        trainable_parameters=method.num_trainable_parameters(),
        global_step=outcome.global_step,
        wall_time_s=round(time.perf_counter() - state.start + sts.elapsed_before, 1),  # + earlier processes (resume)
        stsb_test_cosine_by_gold_bin=bins,
        changed_on_resume=list(state.changed_on_resume),
        **({"teachers": list(state.teachers)} if state.teachers else {}),
        **(intervals or {}),
        **transfer,
    )
    return results, transfer, by_bin


def run_transfer(evaluation: EvalSpec, data_dir: str, method: SentenceEncoder) -> dict[str, Any]:
    """SentEval's transfer tasks on the method's test encoder (after the STS test, so on the tested weights):
    ``{"transfer": {task: {...}, "avg"}, "transfer_protocol": {...}, "transfer_timings_s": {...}}``, or ``{}``."""
    if evaluation.transfer is None:
        return {}
    evaluator = TransferEvaluator(data_root(data_dir), list(evaluation.transfer_tasks), evaluation.transfer)
    progress = tqdm_progress() if interactive() else None
    scores = evaluator.evaluate(lambda s: method.encode(s, batch_size=evaluation.batch_size, encoder="test"),
                                progress)
    return {"transfer": scores, "transfer_protocol": evaluation.transfer.to_dict(),
            "transfer_timings_s": evaluator.timings}


def test_intervals(evaluation: EvalSpec, sts: STSCallback) -> dict | None:
    """``results.json``'s ``test_ci`` / ``test_ci_info`` from the test pairs (``eval.bootstrap``), timed."""
    started = time.perf_counter()
    out = score_intervals(sts.test_pairs, sts.test_subsets, evaluation.aggregation, **asdict(evaluation.bootstrap))
    if out is not None:
        out["test_ci_info"]["seconds"] = round(time.perf_counter() - started, 2)
        log.info("test intervals: %d bootstrap resamples in %.2f s", out["test_ci_info"]["n_resamples"],
                 out["test_ci_info"]["seconds"])
    return out


def print_results(names: RunNames, train: bool, results: dict[str, Any], path: Path) -> None:
    """The papers' STS table of ``results``, its interval line, and the STS-B dev score with its encoder."""
    table = format_table(results["test"], results.get("test_ci"))
    print(f"\n{names.method} | {names.name_or_path} | {names.setting} | STS (Spearman x 100)\n{table}")
    trained = f"   trainable parameters: {results['trainable_parameters']:,}" if train else ""
    if results.get("test_ci_info"):
        info = results["test_ci_info"]
        print(f"interval: {100 * info['level']:g} % {info['method']}, {info['n_resamples']} resamples "
              f"of the {info['resampled']} (seed {info['seed']}); not the variance over training seeds")
    encoder = DEV_ENCODER_WORDS[results["dev_encoder"]]
    print(f"STS-B dev: {results['dev'].get('stsb', float('nan')):.2f} ({encoder}){trained}   results: {path}")


def dev_encoder_used(train: bool, method) -> str:
    """Which encoder gave the reported STS-B dev score: ``test`` (a run that trains nothing, as the official
    evaluation.py ``--mode dev``; or a method whose dev and test encoders are the same) or ``in_training`` (the
    official trainers' dev batcher that selected the checkpoint, ``eval.dev_encoder=official``: PromptBERT without
    the period rule and with the template bias subtracted, CoT-BERT and OptiPrompt without the period rule)."""
    differs = isinstance(method, ContrastiveMethod) and method.spec.dev_encoder is not None
    return "in_training" if train and differs else "test"


def tested_weights(backbone: dict) -> dict:
    """``results.json``'s ``test_backbone``: the tested weights' dtype as loaded on this machine (``auto``
    resolved: ``bfloat16`` on a GPU, ``float32`` on CPU) and whether they were 4-bit."""
    dtype = resolve_dtype(backbone.get("dtype")) or torch.float32
    return {"dtype": str(dtype).removeprefix("torch."), "load_in_4bit": bool(backbone.get("load_in_4bit"))}
