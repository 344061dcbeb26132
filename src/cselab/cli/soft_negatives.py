"""``cselab data soft-negatives``: write SNCSE's soft-negative file for a corpus (:mod:`cselab.methods.sncse.negation`).

Offline by default (``--parser rules``: the rule-based substitute for spaCy's ``en_core_web_sm``);
``--parser spacy`` runs the official rules on the official parser when spaCy and its model are installed.
Output: one ``[sentence, negation]`` JSON list a line, the official format (``Files/soft_negative_samples.txt``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from cselab.cli import fail
from cselab.methods.sncse.data import default_soft_negatives
from cselab.methods.sncse.negation import build_parser, write_soft_negatives

DEFAULT_CORPUS = Path("data/wiki1m_sample/wiki1m_for_simcse.head11914.txt")


def main(argv: list[str] | None = None) -> int:
    """Write the file; exit status 0, or 1 (the corpus is missing, or spaCy is not installed)."""
    parser = argparse.ArgumentParser(prog="cselab data soft-negatives", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS,
                        help="one sentence a line (default: the embedded wiki1m sample)")
    parser.add_argument("--out", type=Path, default=None,
                        help="output file (default: soft_negatives/<corpus file name>.jsonl in the working "
                             "directory, where method=sncse looks when data.soft_negatives is null)")
    parser.add_argument("--parser", choices=("rules", "spacy"), default="rules",
                        help="rules: offline substitute (default); spacy: the official en_core_web_sm rules")
    args = parser.parse_args(argv)
    out = args.out or default_soft_negatives(args.corpus)
    if not args.corpus.is_file():
        return fail(f"no corpus at {args.corpus} (--corpus); `cselab data` links or fetches it", 1)
    try:
        negate = build_parser(args.parser)
    except ImportError as err:
        return fail(str(err), 1)
    counts = write_soft_negatives(args.corpus, out, negate)
    n = max(1, counts["sentences"])
    print(f"{out}: {counts['sentences']} sentences ({args.parser}): 'not' deleted {counts['not_deleted']} "
          f"({100 * counts['not_deleted'] / n:.1f}%), 'not' inserted {counts['not_inserted']} "
          f"({100 * counts['not_inserted'] / n:.1f}%), 'Not' prefixed {counts['not_prefixed']} "
          f"({100 * counts['not_prefixed'] / n:.1f}%)")
    return 0
