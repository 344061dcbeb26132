"""``cselab nli-convert`` / ``python -m cselab nli-convert``: SimCSE-style ``sent0,sent1,hard_neg`` triplets
from labelled NLI pairs (SNLI / MultiNLI / SICK; the pairing rule: :mod:`cselab.cli.nli_triplets`)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from cselab.cli import fail
from cselab.cli.nli_triplets import DEFAULT_OUT, SOURCES, convert


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point (``python -m cselab nli-convert``); returns the exit status (0 ok, 1 error)."""
    parser = argparse.ArgumentParser(prog="python -m cselab nli-convert",
                                     description="Build SimCSE's sent0,sent1,hard_neg csv (premise, entailment, "
                                     "contradiction) from labelled NLI pairs: one triplet per (premise, entailment) "
                                     "pair, the i-th entailment of a premise paired with its (i mod m)-th "
                                     "contradiction.")
    parser.add_argument("--from", dest="source", required=True, choices=SOURCES, help="input format")
    parser.add_argument("inputs", nargs="+", help="input files (jsonl for snli/mnli, SICK .txt for sick)")
    parser.add_argument("--out", default=DEFAULT_OUT,
                        help=f"output csv (relative to the current directory; default {DEFAULT_OUT})")
    parser.add_argument("--reverse-contradictions", action="store_true",
                        help="also use each contradiction (A, B) as (B, A) (symmetric relation; useful for SICK)")
    args = parser.parse_args(argv)
    try:
        stats = convert(args.source, args.inputs, args.out, args.reverse_contradictions)
    except (OSError, ValueError) as err:
        return fail(f"error: {err}", 1)
    print(f"{stats.triplets} triplets from {stats.premises_used} of {stats.premises} premises ({stats.pairs} pairs; "
          f"labels {stats.label_counts}; skipped: {stats.skipped_no_label} without gold label, {stats.skipped_empty} "
          f"empty, {stats.duplicates} duplicates, {stats.skipped_na_like} NA-like) -> {args.out}")
    return 0
