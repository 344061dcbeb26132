"""``cselab tiny-decoders`` / ``python -m cselab tiny-decoders``: 2-layer random OPT / LLaMA / Qwen2 decoders with a
byte-level BPE trained on the wiki sample (:mod:`cselab.tiny_decoders`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cselab.tiny_decoders import DEFAULT_CORPUS, KINDS, build_tiny_decoder, read_corpus


def main(argv: list[str] | None = None) -> int:
    """Build the tiny decoders: ``[--kinds opt llama qwen2] [--out models] [--corpus PATH] [--seed 0]``; exit 1 without
    a corpus."""
    parser = argparse.ArgumentParser(prog="cselab tiny-decoders", description=" ".join(__doc__.split()))
    parser.add_argument("--kinds", nargs="+", default=list(KINDS), choices=KINDS)
    parser.add_argument("--out", default="models", help="parent folder (default: models -> models/tiny_<kind>)")
    parser.add_argument("--corpus", default=DEFAULT_CORPUS, help=f"BPE training text (default {DEFAULT_CORPUS})")
    parser.add_argument("--seed", type=int, default=0, help="the decoders' weight initialisation (default 0)")
    args = parser.parse_args(argv)
    try:
        lines = read_corpus(args.corpus)
    except FileNotFoundError as err:
        print(f"cselab: {err}", file=sys.stderr)
        return 1
    for kind in args.kinds:
        path = build_tiny_decoder(kind, Path(args.out) / f"tiny_{kind}", lines, seed=args.seed)
        print(f"{path}: tiny random {kind} decoder ({len(lines)} corpus lines for the BPE)")
    return 0
