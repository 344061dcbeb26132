"""Command line for the PromptBERT analyses: ``python -m cselab.analysis COMMAND ...``.

Commands:

* ``anisotropy`` -- PromptBERT Eq. 1 (Table 1) of a representation over ``--sentences`` or a sample of a
  corpus (``--corpus FILE --sample N --seed S``; the paper: 100,000 random wiki1m sentences).  Corpus lines are
  preprocessed as the official ``--calc_anisotropy``: lower-cased (``--no-lower`` keeps case) and cut to the
  first 32 whitespace words (``--max-words``).
* ``topk-tokens`` -- Table 7: the top-k MLM tokens at the template's [MASK] (default: the Table 7 sentences,
  the manual template, k = 5); with ``--denoise`` both columns, before and after template denoising.
* ``align-uniform`` -- alignment (gold > 4.0 pairs) and uniformity (all sentences) on STS-B test.

Representations (``--pooler``): SimCSE's poolers on ``[CLS] s [SEP]`` (``cls``, ``cls_before_pooler``, ``avg``,
``avg_first_last``, ``avg_first_last_legacy``, ``avg_top2``; :func:`cselab.model.pooling.pool`), ``mask``
(last-layer [MASK] state of ``--template``, PromptBERT Eq. 2; ``--denoise`` subtracts the template bias),
``static_avg`` (Table 5; ``--remove-biased`` / ``--lowercase``) and ``topk`` (Eq. 3, ``--k``, ``--denoise``).

Examples::

    python -m cselab.analysis anisotropy --backbone bert-base-uncased --pooler static_avg \\
        --corpus data/wiki1m_for_simcse.txt --sample 100000 --seed 42
    python -m cselab.analysis topk-tokens --backbone bert-base-uncased --k 5 --denoise
    python -m cselab.analysis align-uniform --backbone bert-base-uncased --pooler mask --data-dir data

``--json`` prints one JSON object instead of the text lines.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from cselab.analysis.geometry import align_uniform_stsb, anisotropy
from cselab.analysis.static import static_avg_encoder
from cselab.analysis.topk import (
    TABLE7_SENTENCES,
    manual_template,
    mask_states,
    topk_mask_tokens,
    topk_token_encoder,
)
from cselab.model.pooling import POOLERS, needs_hidden_states, pool
from cselab.model.template_input import ViewCollate, ViewSpec

#: every ``--pooler`` value
REPRESENTATIONS: tuple[str, ...] = (*POOLERS, "static_avg", "topk")


def make_encode_fn(
    encoder,
    tokenizer,
    pooler: str,
    template: str | None = None,
    k: int = 200,
    denoise: bool = False,
    remove_biased: bool = False,
    lowercase: bool = False,
    batch_size: int = 64,
) -> Callable[[list[str]], torch.Tensor]:
    """``encode(sentences) -> Tensor[N, D]`` (float32, CPU) for a representation of :data:`REPRESENTATIONS`.

    ``mask`` / ``topk`` use ``template`` (default: the manual template of the encoder's family) with
    PromptBERT's evaluation period rule; the layer poolers encode ``[CLS] s [SEP]`` without truncation.

    Raises:
        ValueError: unknown pooler; ``denoise`` with a representation that has no template; ``topk`` on a
            backbone without MLM head.
    """
    if pooler not in REPRESENTATIONS:
        raise ValueError(f"pooler={pooler!r}: expected one of {REPRESENTATIONS}")
    if denoise and pooler not in ("mask", "topk"):
        raise ValueError(f"--denoise needs a template representation (mask or topk), not pooler={pooler!r}")
    if pooler == "static_avg":
        return static_avg_encoder(encoder, tokenizer, remove_biased=remove_biased, lowercase=lowercase)
    if pooler == "topk":
        return topk_token_encoder(encoder, tokenizer, template, k=k, denoise=denoise, batch_size=batch_size)
    if pooler == "mask":
        tpl = template or manual_template(encoder.family)

        def encode_mask(sentences: list[str]) -> torch.Tensor:
            return mask_states(encoder, tokenizer, tpl, sentences, denoise=denoise, batch_size=batch_size).cpu()

        return encode_mask

    collate = ViewCollate(tokenizer, [ViewSpec("text")], max_seq_len=None, add_period=False,
                          position_offset=encoder.position_offset, max_positions=encoder.max_positions)

    @torch.no_grad()
    def encode_layers(sentences: list[str]) -> torch.Tensor:
        device = next(encoder.model.parameters()).device
        tokens = collate.tokenize(list(sentences))
        order = sorted(range(len(tokens)), key=lambda i: len(tokens[i]))
        was_training = encoder.model.training
        encoder.model.eval()
        chunks = []
        try:
            for start in range(0, len(order), batch_size):
                idx = order[start : start + batch_size]
                batch = collate.build({"text": [tokens[i] for i in idx]})
                ids = batch["input_ids"][:, 0].to(device)
                att = batch["attention_mask"][:, 0].to(device)
                out = encoder(ids, att, output_hidden_states=needs_hidden_states(pooler))
                chunks.append(pool(pooler, out, att, batch["rep_index"][:, 0].to(device)).float().cpu())
        finally:
            encoder.model.train(was_training)
        if not chunks:
            return torch.zeros(0, encoder.hidden_size)
        out = torch.cat(chunks)
        result = torch.empty_like(out)
        result[torch.tensor(order, dtype=torch.long)] = out
        return result

    return encode_layers


def read_corpus(path: str | Path, sample: int | None, seed: int, lower: bool = True,
                max_words: int | None = 32) -> list[str]:
    """Non-empty lines of ``path``; ``sample`` of them drawn uniformly without replacement with
    ``random.Random(seed)`` (file order kept; all lines when ``sample`` is None or >= their number); each
    lower-cased (``lower``) and cut to its first ``max_words`` whitespace words (None / 0: no cut).

    Raises:
        FileNotFoundError: no such file.  ValueError: the file has no non-empty line.
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"corpus file not found: {p.resolve()}")
    lines = [ln.strip() for ln in p.read_text(encoding="utf-8").splitlines()]
    lines = [ln for ln in lines if ln]
    if not lines:
        raise ValueError(f"corpus {p} has no non-empty line")
    if sample is not None and sample < len(lines):
        keep = sorted(random.Random(seed).sample(range(len(lines)), sample))
        lines = [lines[i] for i in keep]
    out = []
    for ln in lines:
        words = (ln.lower() if lower else ln).split()
        out.append(" ".join(words[:max_words] if max_words else words))
    return out


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m cselab.analysis", description=__doc__.split("\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p: argparse.ArgumentParser, pooler_default: str | None) -> None:
        p.add_argument("--backbone", required=True, help="hub id, folder or package:<module>")
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

    p = sub.add_parser("anisotropy", help="PromptBERT Eq. 1 (mean cosine of distinct sentence pairs)")
    common(p, "avg")
    p.add_argument("--sentences", nargs="+", default=None)
    p.add_argument("--corpus", default=None, help="one sentence a line (e.g. wiki1m_for_simcse.txt)")
    p.add_argument("--sample", type=int, default=None, help="sentences drawn from --corpus (default: all)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--no-lower", action="store_true", help="do not lower-case corpus lines")
    p.add_argument("--max-words", type=int, default=32, help="cut corpus lines to N words (0: no cut)")
    p.add_argument("--include-self", action="store_true",
                   help="average self-pairs too, as the official cal_avg_cosine")

    p = sub.add_parser("topk-tokens", help="Table 7: top-k MLM tokens at [MASK]")
    common(p, None)
    p.add_argument("--sentences", nargs="+", default=None, help="default: the Table 7 sentences")

    p = sub.add_parser("align-uniform", help="alignment / uniformity on STS-B test")
    common(p, "avg")
    p.add_argument("--data-dir", default=None, help="data folder (default: $CSELAB_DATA_DIR or ./data)")
    p.add_argument("--threshold", type=float, default=4.0, help="positive pairs: gold score > threshold")
    return parser


def _load(args: argparse.Namespace, mlm_head: bool):
    from cselab.model.loading import load_backbone

    encoder, tokenizer = load_backbone(args.backbone, args.family, mlm_head=mlm_head)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    encoder.to(device).eval()
    return encoder, tokenizer


def _encode_fn(args: argparse.Namespace, encoder, tokenizer):
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
        print(f"error: {err}", file=sys.stderr)
        return 1


def _run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    if args.command == "anisotropy":
        if args.sentences is None and args.corpus is None:
            parser.error("anisotropy needs --sentences or --corpus")
        sentences = list(args.sentences or [])
        if args.corpus is not None:
            sentences += read_corpus(args.corpus, args.sample, args.seed, lower=not args.no_lower,
                                     max_words=args.max_words or None)
        if len(sentences) < 2:
            parser.error(f"anisotropy needs at least 2 sentences, got {len(sentences)}")
        encoder, tokenizer = _load(args, mlm_head=args.pooler == "topk")
        emb = _encode_fn(args, encoder, tokenizer)(sentences)
        value = anisotropy(emb, include_self=args.include_self)
        result = {"command": "anisotropy", "backbone": args.backbone, "pooler": args.pooler,
                  "n_sentences": len(sentences), "anisotropy": value}
        if args.json:
            print(json.dumps(result))
        else:
            print(f"backbone {args.backbone}  pooler {args.pooler}  sentences {len(sentences)}")
            print(f"anisotropy (PromptBERT Eq. 1): {value:.4f}")
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
            rows = []
            for i, s in enumerate(sentences):
                row = {"sentence": s, "topk": plain[i]}
                if den is not None:
                    row["topk_denoised"] = den[i]
                rows.append(row)
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

    encoder, tokenizer = _load(args, mlm_head=args.pooler == "topk")
    res = align_uniform_stsb(_encode_fn(args, encoder, tokenizer), data_root(args.data_dir),
                             threshold=args.threshold)
    if args.json:
        print(json.dumps({"command": "align-uniform", "backbone": args.backbone, "pooler": args.pooler, **res}))
    else:
        print(f"backbone {args.backbone}  pooler {args.pooler}  STS-B test: {int(res['n_pairs'])} pairs with gold > "
              f"{args.threshold}, {int(res['n_sentences'])} sentences")
        print(f"alignment: {res['alignment']:.4f}  uniformity: {res['uniformity']:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
