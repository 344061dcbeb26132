"""``cselab data`` / ``cselab-data`` / ``python -m cselab data``: link ``../shared/data`` when it
exists, else fetch SimCSE's public data files (:mod:`cselab.data.download`); ``cselab data soft-negatives``
writes SNCSE's soft negatives (:mod:`cselab.cli.soft_negatives`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cselab.cli import fail
from cselab.data import download
from cselab.data.download import FILES, REPO, fetch, link_shared

#: the sub-commands ``cselab data --help`` lists after its own options
SUBCOMMANDS = ("sub-commands:\n"
               "  cselab data soft-negatives [--corpus FILE] [--out FILE] [--parser rules|spacy]\n"
               "                        SNCSE's soft negatives for a corpus (cselab data soft-negatives --help)")


def main(argv: list[str] | None = None) -> int:
    """Link or fetch the data directory; returns the exit status (0 ok, 1 the download failed).
    ``cselab data soft-negatives ...``: SNCSE's soft negatives (:mod:`cselab.cli.soft_negatives`)."""
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "soft-negatives":
        from cselab.cli.soft_negatives import main as soft_negatives

        return soft_negatives(argv[1:])
    parser = argparse.ArgumentParser(prog="cselab data", description=download.__doc__, epilog=SUBCOMMANDS,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", default="data", type=Path, help="the data directory to make (default data)")
    parser.add_argument("--shared", default=Path("../shared/data"), type=Path,
                        help="linked instead of fetching when it exists (default ../shared/data)")
    parser.add_argument("--what", nargs="+", choices=sorted(FILES), default=["senteval", "wiki1m", "nli"],
                        help="what to fetch (default senteval wiki1m nli)")
    args = parser.parse_args(argv)
    if link_shared(args.data_dir, args.shared):
        print(f"{args.data_dir} -> {args.shared.resolve()} (evaluation data, wiki1m sample, NLI head)")
        return 0
    try:
        fetch(args.data_dir, args.what)
    except Exception as err:  # network errors: say what to do instead
        return fail(f"could not download {args.what} from {REPO}: {err}\n"
                    f"Put the files in {args.data_dir}/ by hand (see src/cselab/data/paths.py for the layout).", 1)
    return 0
