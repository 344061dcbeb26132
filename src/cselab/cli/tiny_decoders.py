"""Tiny random decoder LLMs for offline checks: 2 layers, a byte-level BPE trained here on the wiki sample.

    python -m cselab tiny-decoders                 # models/tiny_opt, models/tiny_llama, models/tiny_qwen2 (= cselab tiny-decoders)
    python -m cselab tiny-decoders --kinds opt --out models --corpus data/wiki1m_sample/wiki1m_for_simcse.head11914.txt

Each folder loads like a hub model (``AutoModel`` / ``AutoTokenizer``, ``backbone=tiny_opt`` ...) and follows its
family's conventions, so the decoder code paths meet what the real models do:

* ``opt``: ``OPTModel``; specials ``<s>`` 0, ``<pad>`` 1, ``</s>`` 2, ``<unk>`` 3; the tokenizer prepends ``</s>``
  (OPT's BOS) and never appends an EOS; positions from the attention mask (OPT's own rule);
* ``llama``: ``LlamaModel`` (rotary, RMSNorm, grouped-query attention); ``<unk>`` 0, ``<s>`` 1, ``</s>`` 2; BOS
  ``<s>`` prepended;
* ``qwen2``: ``Qwen2Model``; no BOS, ``<|endoftext|>`` at the END of the vocabulary as pad and EOS, so id 0 is an
  ordinary token (the official pad id 0 then pads with a real token: only the attention mask may hide pads).

The weights are random (``torch.manual_seed(seed)``): scores mean nothing, token ids and shapes are real.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from pathlib import Path

import torch

from cselab.cli import fail

KINDS = ("opt", "llama", "qwen2")
#: the embedded wiki sample (``make data``); the tests fall back to their own copy of its first lines
DEFAULT_CORPUS = "data/wiki1m_sample/wiki1m_for_simcse.head11914.txt"


def train_byte_level_bpe(lines: Iterable[str], specials: list[str], vocab_size: int = 1000):
    """A byte-level BPE (GPT-2's pre-tokenizer and byte alphabet) trained on ``lines``; ``specials`` get the
    first ids in order.  Returns a ``tokenizers.Tokenizer``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, min_frequency=2,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator((line.rstrip("\n") for line in lines), trainer=trainer)
    return tok


def build_tiny_decoder(kind: str, out_dir: str | Path, lines: Iterable[str], seed: int = 0, hidden: int = 32,
                       layers: int = 2, vocab_size: int = 1000) -> Path:
    """Write a tiny random decoder of ``kind`` (:data:`KINDS`) and its tokenizer into ``out_dir``.

    Args:
        kind: ``opt`` | ``llama`` | ``qwen2``.
        out_dir: the folder (created; files overwritten).
        lines: the corpus the BPE is trained on (the wiki sample).
        seed: seeds the random weights.
        hidden, layers, vocab_size: D, the number of decoder layers, the BPE's vocabulary size.

    Raises:
        ValueError: an unknown ``kind``.
    """
    from tokenizers import processors
    from transformers import LlamaModel, OPTModel, PreTrainedTokenizerFast, Qwen2Model

    if kind not in KINDS:
        raise ValueError(f"kind={kind!r}: expected one of {KINDS}")
    lines = list(lines)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if kind == "opt":
        specials = ["<s>", "<pad>", "</s>", "<unk>"]
        tok = train_byte_level_bpe(lines, specials, vocab_size)
        tok.post_processor = processors.TemplateProcessing(single="</s> $A", pair="</s> $A </s> $B",
                                                           special_tokens=[("</s>", 2)])
        fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="</s>", eos_token="</s>", unk_token="<unk>",
                                       pad_token="<pad>")
        model_cls, own = OPTModel, {"ffn_dim": 2 * hidden, "word_embed_proj_dim": hidden, "pad_token_id": 1,
                                    "bos_token_id": 2, "eos_token_id": 2}
    elif kind == "llama":
        specials = ["<unk>", "<s>", "</s>"]
        tok = train_byte_level_bpe(lines, specials, vocab_size)
        tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                           special_tokens=[("<s>", 1)])
        fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
        model_cls, own = LlamaModel, {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": None}
    else:
        tok = train_byte_level_bpe(lines, [], vocab_size - 1)
        tok.add_special_tokens(["<|endoftext|>"])
        end = tok.token_to_id("<|endoftext|>")
        fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
        model_cls, own = Qwen2Model, {"eos_token_id": end, "pad_token_id": end, "bos_token_id": None}
    # LLaMA and Qwen2: the MLP width and grouped-query attention
    llama_like = {} if kind == "opt" else {"intermediate_size": 2 * hidden, "num_key_value_heads": 2}
    config = model_cls.config_class(vocab_size=tok.get_vocab_size(), hidden_size=hidden, num_hidden_layers=layers,
                                    num_attention_heads=4, max_position_embeddings=512, **llama_like, **own)
    torch.manual_seed(seed)
    model_cls(config).save_pretrained(out)
    fast.save_pretrained(out)
    return out


def read_corpus(path: str | Path, limit: int | None = 2000) -> list[str]:
    """The first ``limit`` non-empty lines of ``path`` (UTF-8).

    Raises:
        FileNotFoundError: names the path and ``make data``.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no corpus for the tiny decoders' BPE (run `make data`, or pass --corpus)")
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return lines[:limit] if limit else lines


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
        return fail(f"cselab: {err}", 1)
    for kind in args.kinds:
        path = build_tiny_decoder(kind, Path(args.out) / f"tiny_{kind}", lines, seed=args.seed)
        print(f"{path}: tiny random {kind} decoder ({len(lines)} corpus lines for the BPE)")
    return 0
