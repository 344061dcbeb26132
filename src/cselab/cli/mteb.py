"""``cselab mteb`` / ``python -m cselab mteb SOURCE --tasks STSBenchmark SICK-R ... [--local DATA_DIR] [--compare]``

Scores a cselab model on MTEB tasks with :class:`cselab.evaluation.mteb.CselabMTEBEncoder` (the method's own ``encode``:
template, prompt, pooling and template bias as at test).  ``SOURCE`` is any model target (:data:`cselab.io.targets.
TARGETS`), loaded by :func:`cselab.load` as every command loads one (what each kind encodes: its docstring; a
backbone: ``method=baseline`` with ``--pooler``, ``avg`` by default).

Tasks are MTEB's (``mteb.get_tasks``: their data comes from the Hugging Face Hub or its cache), or with
``--local DATA_DIR`` the same-named tasks built from the local SentEval files (:func:`cselab.evaluation.mteb.local_sts_task`:
STSBenchmark, SICK-R, STS12-STS16; no network).  ``--compare`` (with ``--local``) also scores the same tasks
with cselab's own evaluator and prints both.  Scores are MTEB's main score (``cosine_spearman``) x 100.

Exit status: 0, 1 when a task could not be loaded or run (the message says why; offline: use ``--local``),
2 on bad arguments.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from cselab.cli import fail

#: MTEB task name -> cselab task (the tasks ``--local`` can build from SentEval's files)
LOCAL_TASKS: dict[str, str] = {
    "STS12": "sts12", "STS13": "sts13", "STS14": "sts14", "STS15": "sts15", "STS16": "sts16",
    "STSBenchmark": "stsb", "SICK-R": "sickr",
}


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser (see the module docstring)."""
    from cselab.io.targets import TARGETS

    p = argparse.ArgumentParser(prog="python -m cselab mteb",
                                description="Score a cselab model (a run, checkpoint, export or backbone) on MTEB "
                                            "tasks.")
    p.add_argument("source", help=TARGETS)
    p.add_argument("--tasks", nargs="+", default=["STSBenchmark"], metavar="TASK",
                   help="MTEB task names (default: STSBenchmark)")
    p.add_argument("--local", default=None, metavar="DATA_DIR",
                   help=f"build the tasks from the local SentEval files under DATA_DIR ({', '.join(LOCAL_TASKS)})")
    p.add_argument("--compare", action="store_true", help="with --local: also print cselab's own evaluator")
    p.add_argument("--pooler", default=None,
                   help="pooler of a raw backbone (default: avg); a checkpoint or exported folder uses its own "
                        "unless --pooler is given (then the folder is read as a bare backbone)")
    p.add_argument("--family", default=None, choices=["bert", "roberta", "decoder"],
                   help="template family of a raw backbone (default: its config's)")
    p.add_argument("--batch-size", type=int, default=None, help="sentences per forward (default: the method's)")
    p.add_argument("--name", default=None, help="model name recorded in MTEB's results (org/name)")
    p.add_argument("--output", type=Path, default=None, metavar="DIR",
                   help="keep MTEB's result files in DIR (its ResultCache layout); default: none written")
    return p


def resolve_tasks(names: Sequence[str], local: str | None) -> list:
    """MTEB task objects: MTEB's own (``mteb.get_tasks``) or, with ``local``, built from SentEval's files.

    Raises:
        ValueError: a task ``--local`` cannot build, or a name MTEB does not know.
    """
    if local is None:
        import mteb

        return list(mteb.get_tasks(tasks=list(names)))
    from cselab.evaluation.mteb import local_sts_task

    unknown = [n for n in names if n not in LOCAL_TASKS]
    if unknown:
        raise ValueError(f"--local builds only {', '.join(LOCAL_TASKS)}; not {', '.join(unknown)}")
    return [local_sts_task(LOCAL_TASKS[n], local) for n in names]


def evaluate(method, tasks: list, name: str | None = None, batch_size: int | None = None,
             output: Path | None = None) -> dict[str, float]:
    """Run MTEB on ``tasks``; returns ``{task name: main score x 100}``.

    Raises:
        RuntimeError: MTEB could not run a task (e.g. its data is not reachable offline).
    """
    import mteb

    from cselab.evaluation.mteb import CselabMTEBEncoder

    encoder = CselabMTEBEncoder(method, name=name, batch_size=batch_size)
    cache = mteb.ResultCache(cache_path=str(output)) if output is not None else None
    result = mteb.evaluate(encoder, tasks, encode_kwargs={"batch_size": batch_size or 32}, cache=cache,
                           show_progress_bar=False, overwrite_strategy="always")
    if getattr(result, "exceptions", None):
        raise RuntimeError("; ".join(str(e) for e in result.exceptions))
    return {r.task_name: 100.0 * float(r.get_score()) for r in result.task_results}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status (0 ok, 1 a task failed, 2 bad arguments)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.compare and not args.local:
        parser.error("--compare needs --local DATA_DIR (cselab's evaluator reads the local SentEval files)")
    try:
        tasks = resolve_tasks(args.tasks, args.local)
    except (ValueError, KeyError, FileNotFoundError) as err:
        return fail(f"cselab mteb: {err}", 2)
    except Exception as err:  # MTEB could not fetch the task definitions / data
        return fail(f"cselab mteb: could not load the tasks {args.tasks} ({type(err).__name__}: {err}); "
                    "offline, use --local DATA_DIR (the SentEval files)", 1)
    try:
        import cselab

        method = cselab.load(args.source, pooler=args.pooler, family=args.family)
    except (FileNotFoundError, ValueError, OSError) as err:
        return fail(f"cselab mteb: {err}", 2)
    if callable(getattr(method, "describe", None)):
        from cselab.methods.exported import encoder_line

        print(f"cselab mteb: {args.source}: {encoder_line(method.describe())}", file=sys.stderr)
    try:
        scores = evaluate(method, tasks, name=args.name, batch_size=args.batch_size, output=args.output)
    except Exception as err:
        return fail(f"cselab mteb: MTEB failed ({type(err).__name__}: {err})"
                    + ("" if args.local else "; offline, use --local DATA_DIR"), 1)
    rows = [{"task": task, "mteb": round(score, 4)} for task, score in scores.items()]
    if args.compare:
        from cselab.evaluation.mteb import LOCAL_TASK_NAMES
        from cselab.evaluation.sts import STSEvaluator

        task_of = {v: k for k, v in LOCAL_TASK_NAMES.items()}
        ours = STSEvaluator(args.local).evaluate(method.encode, tasks=[LOCAL_TASKS[n] for n in args.tasks])
        for row in rows:
            row["cselab"] = round(ours[task_of[row["task"]]], 4)
            row["difference"] = round(row["mteb"] - row["cselab"], 4)
    print(json.dumps({"source": args.source, "local": args.local, "scores": rows}, indent=2))
    return 0
