"""The ``cselab`` console command: one entry point for the package's command-line tools (``cselab.cli.*``).

    cselab report multirun/2026-11-21/12-00-00 --format markdown     # = python -m cselab report ...
    cselab compare RUN_A RUN_B                                       # paired comparison, same test pairs
    cselab export CHECKPOINT OUT_DIR [--push-to-hub ID]              # = python -m cselab export ...
    cselab mteb TARGET --tasks STSBenchmark
    cselab --help                                                    # the list of commands

Each command is one module of this package with a ``main(argv) -> int`` (its argparse front end; the
``python -m cselab report`` ... spellings are one-line shims calling it: same arguments and exit status); they
share :func:`fail` (an error line on stderr, then the exit status) and :func:`write_output` (``--out FILE``).
Training stays ``python run.py ...`` in a clone (Hydra composes ``conf/`` beside it).  This package is the top
layer: library modules never import it (``tests/test_layers.py``); it imports a command's module only when that
command is called.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from pathlib import Path

#: command -> (module with ``main(argv) -> int``, one-line description)
COMMANDS: dict[str, tuple[str, str]] = {
    "report": ("cselab.cli.report", "results.json files pooled over seeds beside the papers' numbers"),
    "compare": ("cselab.cli.compare", "two runs on the same test pairs: differences, paired intervals, p-values"),
    "export": ("cselab.cli.export", "a run, checkpoint or backbone as a sentence-transformers folder (+ the Hub)"),
    "mteb": ("cselab.cli.mteb", "score a run, a checkpoint, an export or a backbone on MTEB tasks"),
    "data": ("cselab.cli.data", "link ../shared/data or fetch SimCSE's data files; data soft-negatives: SNCSE's"),
    "analysis": ("cselab.cli.analysis", "static / top-k token analyses (PromptBERT Tables 5, 7, 9)"),
    "cxc": ("cselab.cli.cxc", "PromCSE's CxC evaluation"),
    "transfer": ("cselab.cli.transfer", "SentEval's transfer tasks (MR ... MRPC) on a run, a checkpoint or a model"),
    "nli-convert": ("cselab.cli.nli_convert", "SNLI / MultiNLI / SICK -> sent0,sent1,hard_neg triplets"),
    "tiny-decoders": ("cselab.cli.tiny_decoders", "2-layer random OPT / LLaMA / Qwen2 decoders for offline runs"),
}

#: optional module -> the extra that installs it (a command that needs one says which to install)
EXTRAS: dict[str, str] = {"sentence_transformers": "export", "mteb": "mteb", "wandb": "wandb",
                          "matplotlib": "notebooks"}


def fail(message: str, status: int = 1) -> int:
    """Print ``message`` (one line naming what is wrong and what to do) to stderr; returns ``status``, the exit
    status a command's ``main`` returns with it (``return fail(...)``)."""
    print(message, file=sys.stderr)
    return status


def write_output(text: str, out: Path | None, what: str = "") -> None:
    """``text`` to the file ``out`` (its folder made; ``wrote OUT what`` on stderr), or to stdout when ``out`` is
    None (a command's ``--out FILE``)."""
    if out is None:
        sys.stdout.write(text)
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    print(f"wrote {out}{what}", file=sys.stderr)


def usage() -> str:
    """The ``cselab --help`` text: the commands and one line each."""
    width = max(len(c) for c in COMMANDS)
    lines = [f"  {name.ljust(width)}  {desc}" for name, (_, desc) in COMMANDS.items()]
    return ("usage: cselab COMMAND [ARGS...]   (cselab COMMAND --help for a command's arguments)\n\n"
            "commands:\n" + "\n".join(lines) + "\n\nTraining: python run.py [OVERRIDES...] (python run.py --help)\n")


def main(argv: Sequence[str] | None = None) -> int:
    """Dispatch ``cselab COMMAND ARGS...`` to the command's ``main(ARGS)``; returns its exit status.

    Exit status 2 (with the usage on stderr) for a missing or unknown command, or (with the ``pip install``
    line to type) when the command needs an extra that is not installed.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        (sys.stdout if args else sys.stderr).write(usage())
        return 0 if args else 2
    command, rest = args[0], args[1:]
    if command not in COMMANDS:
        sys.stderr.write(f"cselab: unknown command {command!r}\n\n{usage()}")
        return 2
    from cselab.io.logs import quiet_third_party

    quiet_third_party()  # no progress bars of the libraries in a log file; transformers' LOAD REPORT on one line
    try:
        module = importlib.import_module(COMMANDS[command][0])
    except ModuleNotFoundError as err:
        extra = EXTRAS.get(err.name.split(".")[0]) if err.name else None
        if extra is None:
            raise
        sys.stderr.write(f"cselab {command}: needs {err.name}, an optional dependency: "
                         f"pip install 'cselab[{extra}]'\n")
        return 2
    return int(module.main(rest) or 0)
