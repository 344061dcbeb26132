"""Command line for the PromptBERT analyses: ``cselab analysis`` / ``python -m cselab analysis COMMAND ...``.

Commands:

* ``anisotropy`` -- PromptBERT Table 1's sentence anisotropy of a representation over ``--sentences`` or a
  corpus, as the official ``--calc_anisotropy`` computes it (PB ``evaluation.py:25-35, 342-357``): the first
  ``--sample N`` lines of ``--corpus`` (100,000 of wiki1m; ``--random`` draws them uniformly with ``--seed``, the
  paper's words), lower-cased (``--no-lower`` keeps case), cut to their first 32 whitespace words
  (``--max-words``), and the mean cosine over all pairs, self-pairs included (``--distinct-pairs``: Eq. 1 as
  printed, :func:`cselab.analysis.geometry.anisotropy`).
* ``topk-tokens`` -- Table 7: the top-k MLM tokens at the template's [MASK] (default: the Table 7 sentences,
  the manual template, k = 5); with ``--denoise`` both columns, before and after template denoising.
* ``align-uniform`` -- alignment (gold > 4.0 pairs) and uniformity (all sentences) on STS-B test.

Representations (``--pooler``): SimCSE's poolers on ``[CLS] s [SEP]`` (``cls``, ``cls_before_pooler``, ``avg``,
``avg_first_last``, ``avg_first_last_legacy``, ``avg_top2``; :func:`cselab.model.pooling.pool`), ``mask``
(last-layer [MASK] state of ``--template``, PromptBERT Eq. 2; ``--denoise`` subtracts the template bias),
``static_avg`` (Table 5; ``--remove-biased`` / ``--lowercase``) and ``topk`` (Eq. 3, ``--k``, ``--denoise``).

Examples::

    python -m cselab analysis anisotropy --backbone bert-base-uncased --pooler static_avg \\
        --corpus data/wiki1m_for_simcse.txt --sample 100000
    python -m cselab analysis topk-tokens --backbone bert-base-uncased --k 5 --denoise
    python -m cselab analysis align-uniform --backbone bert-base-uncased --pooler mask --data-dir data

``--json`` prints one JSON object instead of the text lines.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence

import torch

from cselab.analysis.corpus import read_corpus
from cselab.analysis.geometry import anisotropy
from cselab.analysis.representations import REPRESENTATIONS, make_encode_fn
from cselab.cli import fail
from cselab.evaluation.align_uniform import align_uniform_stsb
from cselab.io.targets import TARGETS
from cselab.representations.topk import TABLE7_SENTENCES, manual_template, topk_mask_tokens


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m cselab analysis", description=__doc__.split("\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p: argparse.ArgumentParser, pooler_default: str | None) -> None:
        p.add_argument("--backbone", required=True, metavar="TARGET",
                       help=f"{TARGETS}; a trained model is analysed through its backbone's weights")
        p.add_argument("--family", choices=("bert", "roberta"), default=None,
                       help="template form and token rules (default: from the config)")
        p.add_argument("--template", default=None,
                       help='template with [X] and [MASK] (default: the manual This sentence : "[X]" means [MASK] .)')
        p.add_argument("--k", type=int, default=None, help="top-k tokens")
        p.add_argument("--denoise", action="store_true", help="subtract the position-denoising template bias")
        p.add_argument("--batch-size", type=int, default=64)
        p.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")
        p.add_argument("--json", action="store_true", help="print one JSON object")
        if pooler_default is not None:
            p.add_argument("--pooler", choices=REPRESENTATIONS, default=pooler_default)
            p.add_argument("--remove-biased", action="store_true",
                           help="static_avg: remove Table 11 tokens, subwords and punctuation")
            p.add_argument("--lowercase", action="store_true", help="static_avg: lowercase sentences first")

    p = sub.add_parser("anisotropy", help="PromptBERT Table 1's sentence anisotropy (mean cosine of the pairs)")
    common(p, "avg")
    p.add_argument("--sentences", nargs="+", default=None)
    p.add_argument("--corpus", default=None, help="one sentence a line (e.g. wiki1m_for_simcse.txt)")
    p.add_argument("--sample", type=int, default=None,
                   help="the first N lines of --corpus, as the official code (default: all)")
    p.add_argument("--random", action="store_true",
                   help="draw the --sample lines uniformly with --seed (the paper: 'we randomly sample')")
    p.add_argument("--seed", type=int, default=None, help="the --random draw's seed (default 42)")
    p.add_argument("--no-lower", action="store_true", help="do not lower-case corpus lines")
    p.add_argument("--max-words", type=int, default=32, help="cut corpus lines to N words (0: no cut)")
    p.add_argument("--distinct-pairs", action="store_true",
                   help="Eq. 1 as printed: pairs of distinct sentences only (default: all pairs, self-pairs "
                        "included, as the official cal_avg_cosine)")
    p.add_argument("--include-self", action="store_true", help=argparse.SUPPRESS)  # refused in _run, by name

    p = sub.add_parser("topk-tokens", help="Table 7: top-k MLM tokens at [MASK]")
    common(p, None)
    p.add_argument("--sentences", nargs="+", default=None, help="default: the Table 7 sentences")

    p = sub.add_parser("align-uniform", help="alignment / uniformity on STS-B test")
    common(p, "avg")
    p.add_argument("--data-dir", default=None, help="data folder (default: $CSELAB_DATA_DIR or ./data)")
    p.add_argument("--threshold", type=float, default=4.0, help="positive pairs: gold score > threshold")
    return parser


def _load(args: argparse.Namespace, mlm_head: bool):
    """``(Encoder, tokenizer)`` of ``--backbone``, any model target (:func:`cselab.io.targets.resolve_target`): a
    backbone (a conf/backbone name, hub id, folder, package) or a plain sentence-transformers folder (its top-level
    model) loaded by :func:`cselab.model.loading.load_backbone`; a run directory, checkpoint or cselab export: the
    trained model's own backbone.

    Raises:
        FileNotFoundError: the target names no model (:class:`cselab.io.targets.TargetError`).
        ValueError: ``mlm_head`` for a trained model whose backbone has no MLM head.
    """
    from pathlib import Path

    from cselab.io.targets import resolve_target
    from cselab.model.loading import load_backbone

    target = resolve_target(args.backbone)
    if target.kind == "backbone" or (target.kind == "exported" and (Path(target.path) / "config.json").is_file()):
        encoder, tokenizer = load_backbone(target.path, args.family or target.family, mlm_head=mlm_head)
    else:
        if target.kind == "exported":
            from cselab.model.embedding import EmbeddingModel

            model = EmbeddingModel.load(target.path)
        else:
            import cselab

            model = cselab.load(target.path).model
        encoder, tokenizer = model.backbone, model.tokenizer
        if mlm_head and encoder.mlm is None:
            raise ValueError(f"--backbone {args.backbone}: the trained model's backbone has no MLM head, which "
                             "topk needs: pass its pre-trained backbone (e.g. bert_base)")
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    encoder.to(device).eval()
    return encoder, tokenizer


def _encode_fn(args: argparse.Namespace):
    """``--backbone`` loaded (:func:`_load`) and its ``--pooler`` representation as ``encode(sentences)``."""
    encoder, tokenizer = _load(args, mlm_head=args.pooler == "topk")
    return make_encode_fn(encoder, tokenizer, args.pooler, args.template, k=args.k or 200, denoise=args.denoise,
                          remove_biased=args.remove_biased, lowercase=args.lowercase, batch_size=args.batch_size)


def _fmt_tokens(tokens: Sequence[tuple[str, float]]) -> str:
    return ", ".join(f"{t} ({p:.4f})" for t, p in tokens)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status: 0, or 1 after printing ``error: ...`` to stderr when the backbone,
    the data or an option cannot be used (argparse exits with 2 on bad arguments)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return _run(parser, args)
    except (OSError, ValueError) as err:  # BackboneUnavailableError is an OSError
        return fail(f"error: {err}", 1)


def _run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    if args.command == "anisotropy":
        if args.sentences is None and args.corpus is None:
            parser.error("anisotropy needs --sentences or --corpus")
        if args.include_self:
            parser.error("--include-self is the default now (all pairs, self-pairs included, as the official "
                         "cal_avg_cosine); --distinct-pairs gives Eq. 1 as printed")
        if args.seed is not None and not args.random:
            parser.error("--seed seeds the --random draw only: --sample N takes the first N lines of --corpus (the "
                         "official --calc_anisotropy); add --random to draw them uniformly")
        sentences = list(args.sentences or [])
        if args.corpus is not None:
            sentences += read_corpus(args.corpus, args.sample, 42 if args.seed is None else args.seed,
                                     lower=not args.no_lower,
                                     max_words=args.max_words or None, draw="random" if args.random else "first")
        if len(sentences) < 2:
            parser.error(f"anisotropy needs at least 2 sentences, got {len(sentences)}")
        emb = _encode_fn(args)(sentences)
        value = anisotropy(emb, include_self=not args.distinct_pairs)
        result = {"command": "anisotropy", "backbone": args.backbone, "pooler": args.pooler,
                  "n_sentences": len(sentences), "pairs": "distinct" if args.distinct_pairs else "all",
                  "anisotropy": value}
        if args.json:
            print(json.dumps(result))
        else:
            print(f"backbone {args.backbone}  pooler {args.pooler}  sentences {len(sentences)}")
            pairs = "Eq. 1, distinct pairs" if args.distinct_pairs else "the official cal_avg_cosine, all pairs"
            print(f"anisotropy ({pairs}): {value:.4f}")
        return 0
    if args.command == "topk-tokens":
        encoder, tokenizer = _load(args, mlm_head=True)
        sentences = list(args.sentences or TABLE7_SENTENCES)
        k = args.k or 5
        plain = topk_mask_tokens(encoder, tokenizer, args.template, sentences, k=k, denoise=False,
                                 batch_size=args.batch_size)
        den = (topk_mask_tokens(encoder, tokenizer, args.template, sentences, k=k, denoise=True,
                                batch_size=args.batch_size) if args.denoise else None)
        if args.json:
            rows = [{"sentence": s, "topk": plain[i], **({"topk_denoised": den[i]} if den is not None else {})}
                    for i, s in enumerate(sentences)]
            print(json.dumps({"command": "topk-tokens", "backbone": args.backbone, "k": k, "rows": rows}))
        else:
            print(f"template: {args.template or manual_template(encoder.family)}")
            for i, s in enumerate(sentences):
                print(s)
                print(f"  top-{k}: {_fmt_tokens(plain[i])}")
                if den is not None:
                    print(f"  top-{k} after template denoising: {_fmt_tokens(den[i])}")
        return 0
    # align-uniform
    from cselab.data.paths import data_root

    res = align_uniform_stsb(_encode_fn(args), data_root(args.data_dir), threshold=args.threshold)
    if args.json:
        print(json.dumps({"command": "align-uniform", "backbone": args.backbone, "pooler": args.pooler, **res}))
    else:
        print(f"backbone {args.backbone}  pooler {args.pooler}  STS-B test: {int(res['n_pairs'])} pairs with gold > "
              f"{args.threshold}, {int(res['n_sentences'])} sentences")
        print(f"alignment: {res['alignment']:.4f}  uniformity: {res['uniformity']:.4f}")
    return 0
