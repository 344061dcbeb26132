"""``cselab transfer TARGET``: SentEval's seven transfer tasks on a trained run, a checkpoint, an exported model or
a backbone (:mod:`cselab.evaluation.transfer`).

    cselab transfer outputs/simcse_bert_base_unsup                  # a run directory: its best checkpoint
    cselab transfer checkpoints/best-step500.ckpt --mode fasttest
    cselab transfer exported/my-model                               # a folder written by cselab export
    cselab transfer minilm_l6 --pooler avg --tasks mr trec mrpc     # a backbone (config name, hub id or folder)

Prints the papers' table and each task's wall time; ``--out FILE`` writes the results as JSON (accuracies x 100,
the protocol with SentEval's commit, the timings).  The header names the encoder used (pooler, head, template): an
exported folder is encoded exactly as ``SentenceTransformer(folder)`` (its own pooling; ``--pooler`` is for a
backbone target only).  The target is resolved by ``cselab.load`` as every command resolves one
(:mod:`cselab.io.targets`).  Exit status 0, 1 on a missing / truncated data file, 2 on bad arguments (an unknown
task, a target that cannot be loaded).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from cselab.cli import fail


def build_parser() -> argparse.ArgumentParser:
    """The command's arguments."""
    from cselab.data.transfer import TRANSFER_TASKS

    p = argparse.ArgumentParser(prog="cselab transfer", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    from cselab.io.targets import TARGETS

    p.add_argument("target", help=TARGETS)
    p.add_argument("--tasks", nargs="+", default=list(TRANSFER_TASKS), help="default: all seven")
    p.add_argument("--mode", choices=["test", "fasttest"], default="test",
                   help="SentEval's configuration (SimCSE / PromptBERT evaluation.py --mode); default test")
    p.add_argument("--pooler", default=None,
                   help="for a backbone target: the pooler (default avg); a run, checkpoint or exported folder "
                        "uses its own (an exported folder given --pooler is read as a bare backbone)")
    p.add_argument("--data-dir", default=None, help="data directory (default $CSELAB_DATA_DIR or ./data)")
    p.add_argument("--batch-size", type=int, default=None, help="sentences per forward pass")
    p.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the transfer tasks; returns the exit status."""
    args = build_parser().parse_args(argv)
    from cselab.evaluation.transfer import TransferEvaluator, format_transfer_table, tqdm_progress
    from cselab.methods.exported import encoder_line

    try:
        evaluator = TransferEvaluator(args.data_dir, args.tasks, args.mode)
    except FileNotFoundError as err:  # a missing / truncated data file
        return fail(f"cselab transfer: {err}", 1)
    except ValueError as err:  # an unknown task: a bad argument
        return fail(f"cselab transfer: {err}", 2)
    start = time.perf_counter()
    try:
        import cselab

        model = cselab.load(args.target, pooler=args.pooler)  # any target (cselab.io.targets.resolve_target)
    except (FileNotFoundError, ValueError, OSError) as err:
        return fail(f"cselab transfer: {err}", 2)
    load_s = time.perf_counter() - start
    encoder = encoder_line(model.describe())
    print(f"cselab transfer: {args.target}: {encoder}", file=sys.stderr)
    results = evaluator.evaluate(lambda s: model.encode(s, batch_size=args.batch_size), progress=tqdm_progress())
    total = time.perf_counter() - start
    tasks = evaluator.tasks
    print(f"\n{args.target} | transfer ({args.mode}) | accuracy x 100\n{encoder}\n"
          f"{format_transfer_table(results, tasks)}")
    times = ", ".join(f"{k} {v['seconds']:.1f} s" for k, v in evaluator.timings.items())
    print(f"wall time: {total:.1f} s (model load {load_s:.1f} s; {times})")
    if args.out:
        from cselab.evaluation.results import write_results

        write_results(args.out, {"transfer": results, "transfer_protocol": evaluator.protocol.to_dict(),
                                 "transfer_timings_s": evaluator.timings, "target": args.target,
                                 "wall_time_s": round(total, 1)})
        print(f"results: {args.out}")
    return 0
