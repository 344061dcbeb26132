"""Static token-embedding sentence representations (PromptBERT Sec. 3, Tables 1, 3 and 5; Appendix A.1).

``static avg`` is the mean of the INPUT word embeddings (``model.embeddings.word_embeddings``) of a sentence's
tokens: no position / token-type embeddings, no LayerNorm, no transformer layer.  The official PromptBERT
``evaluation.py --embedding_only`` computes exactly ``word_embeddings(input_ids)`` (it builds the position and
type embeddings but never adds them) and averages it with the attention mask (``--pooler avg``).

Special tokens (``[CLS]``/``[SEP]``, ``<s>``/``</s>``):

* plain ``static avg`` (Table 5: 56.02 on bert-base-uncased) INCLUDES them: the official code averages over the
  tokenizer's attention mask, which is 1 on ``[CLS]`` and ``[SEP]``;
* ``static avg with biased tokens removed`` (Table 5: 63.10) EXCLUDES them: the official code sets the attention
  mask of ``cls_token_id`` and ``sep_token_id`` to 0 when ``--remove_continue_word`` is on.

``include_special`` overrides this (``None`` = the official choice above).

Biased-token removal (``remove_biased=True``; paper Appendix A.1 / Table 3, official ``--remove_continue_word``):

1. **Freq.** -- the 36 most frequent tokens of Table 11 for the backbone, stored in :data:`BIASED_TOKENS`.
2. **Sub.** -- every subword (continuation) token:

   * BERT (WordPiece): tokens starting with ``##``;
   * RoBERTa (byte-level BPE): the sentence is tokenized with a leading space (``" " + s``, as the official
     code does), so EVERY word, the first one included, starts with the leading-space marker ``Ġ``; a piece
     without ``Ġ`` is a continuation of the previous word and is removed.  (So the un-marked entries of the
     RoBERTa list -- ``a``, ``the``, ``s``, ``.``, ``-``, ``i``, which are what the first word of a sentence
     becomes WITHOUT the leading space -- never match here; they are kept as data, as transcribed.)
3. **Case** -- only SICK has upper case; ``lowercase=True`` lowercases the sentence text before tokenization
   (pass it for SICK-R; the processed STS12-16 / STS-B files are already lower case).
4. **Pun.** -- punctuation-only tokens: for BERT, the tokens of :data:`BERT_PUNCTUATION` (the official
   ``pun_remove_set``, which also holds ``[UNK]``); for RoBERTa, a token with no ASCII letter or digit (the
   official ``re.search('[a-zA-Z0-9]', w) is None``).

A sentence left with no token after removal FALLS BACK to all of its tokens (with the special tokens as
``include_special`` says); an empty sentence falls back to its special tokens.  (The official code instead
encodes a constant -- the ``[PAD]`` embedding for BERT, the bare ``Ġ`` for RoBERTa -- for such sentences; they
are rare in the STS data, e.g. a sentence made only of punctuation or Table-11 words.)

Differences from the official code, all deliberate and small: (a) the kept token ids are averaged directly,
whereas the official code lowercases the kept word strings and re-tokenizes them (identical for
bert-base-uncased; for RoBERTa the re-tokenized string ends with a space that adds one stray ``Ġ`` token to
every average, a quirk not reproduced); (b) the official code lowercases kept tokens of every task in this mode;
here lowercasing is the explicit ``lowercase`` flag (the same for the lower-cased STS data).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import PurePath

import torch

_BERT_TABLE11: tuple[str, ...] = (
    ".", "a", "the", "in", ",", "is", "to", "of", "and", "'", "on", "man", "-", "s", "with", "for", '"', "at",
    "##s", "woman", "are", "it", "two", "that", "you", "dog", "said", "playing", "i", "an", "as", "was",
    "from", ":", "by", "white",
)  # fmt: skip

_ROBERTA_TABLE11: tuple[str, ...] = (
    "Ġ.", "Ġa", "Ġthe", "Ġin", "a", "Ġ,", "Ġis", "Ġto", "Ġof", "Ġand", "Ġon", "Ġ'", "s", ".", "the", "Ġman",
    "-", "Ġwith", "Ġfor", "Ġat", "Ġwoman", "Ġare", 'Ġ"', "Ġthat", "Ġit", "Ġdog", "Ġsaid", "Ġplaying", "Ġwas",
    "Ġas", "Ġfrom", "Ġ:", "Ġyou", "Ġan", "i", "Ġby",
)  # fmt: skip

#: PromptBERT Table 11: the 36 most frequent tokens removed by "static avg with biased tokens removed", as
#: VOCABULARY TOKENS of each backbone's tokenizer: WordPiece tokens of bert-base-uncased / bert-base-cased
#: (one shared list: Table 11 prints a single row for "bert-base-uncased and bert-base-cased", and the official
#: code uses one list for every non-RoBERTa model), and byte-level BPE tokens of roberta-base (``Ġ`` = leading
#: space).  The paper's text extraction garbles the table (the two-column layout drops tokens); the order and
#: the complete 36 follow the official ``evaluation.py`` sets, which agree with every legible entry of Table 11.
#: The paper typesets the apostrophe as a curly ``’``; the official code (and the processed SentEval text) use
#: the ASCII ``'``.  The official RoBERTa set spells the comma ``'Ġ, '`` (trailing space, so it never matches);
#: it is stored as ``Ġ,`` -- removed by the punctuation rule anyway, so the result is the same.
BIASED_TOKENS: dict[str, tuple[str, ...]] = {
    "bert-base-uncased": _BERT_TABLE11,
    "bert-base-cased": _BERT_TABLE11,
    "roberta-base": _ROBERTA_TABLE11,
}

#: The list used for a backbone whose name is not a key of :data:`BIASED_TOKENS`, by family.
_FAMILY_DEFAULT = {"bert": "bert-base-uncased", "roberta": "roberta-base"}

#: Official PromptBERT ``pun_remove_set`` (BERT): single punctuation / symbol WordPiece tokens and ``[UNK]``.
BERT_PUNCTUATION: frozenset[str] = frozenset({
    "?", "*", "#", "´", "’", "=", "…", "|", "~", "/", "‚", "¿", "–", "»", "-", "€", "‘", '"', "(", "•", "`", "$",
    ":", "[", "”", "%", "£", "<", "[UNK]", ";", "“", "@", "_", "{", "^", ",", ".", "!", "™", "&", "]", ">", "\\",
    "'", ")", "+", "—",
})  # fmt: skip

_ALNUM = re.compile(r"[a-zA-Z0-9]")


def biased_tokens_for(name_or_path: str | None, family: str) -> tuple[str, ...]:
    """Table 11 list for a backbone: by its name (last path component, e.g. ``google-bert/bert-base-uncased``
    -> ``bert-base-uncased``) when listed in :data:`BIASED_TOKENS`, else the family default (``bert`` ->
    bert-base-uncased's list, ``roberta`` -> roberta-base's).  For another vocabulary the entries are matched
    as token strings, so the ones it lacks simply never match.

    Raises:
        ValueError: ``family`` is neither ``bert`` nor ``roberta``.
    """
    if name_or_path:
        key = PurePath(str(name_or_path).rstrip("/")).name
        if key in BIASED_TOKENS:
            return BIASED_TOKENS[key]
    if family not in _FAMILY_DEFAULT:
        raise ValueError(f"family={family!r}: expected 'bert' or 'roberta' to pick a Table 11 token list")
    return BIASED_TOKENS[_FAMILY_DEFAULT[family]]


def is_subword(token: str, family: str) -> bool:
    """Whether a vocabulary token is a word continuation: ``##`` prefix (BERT) / no ``Ġ`` marker (RoBERTa).

    For RoBERTa this assumes the sentence was tokenized with a leading space (see the module docstring).
    """
    if family == "roberta":
        return "Ġ" not in token
    return token.startswith("##")


def is_punctuation(token: str, family: str) -> bool:
    """Whether a vocabulary token is punctuation-only (official PromptBERT rules, see the module docstring)."""
    if family == "roberta":
        return _ALNUM.search(token) is None
    return token in BERT_PUNCTUATION


def static_token_ids(
    sentences: Sequence[str],
    tokenizer,
    family: str,
    remove_biased: bool = False,
    lowercase: bool = False,
    include_special: bool | None = None,
    biased_tokens: Sequence[str] | None = None,
) -> list[list[int]]:
    """The token ids whose static embeddings are averaged, one list per sentence.

    Args:
        sentences: raw sentences (SentEval's whitespace-joined text).
        tokenizer: the backbone's Hugging Face tokenizer.
        family: ``bert`` | ``roberta`` (subword / punctuation rules and RoBERTa's leading space).
        remove_biased: drop Table-11 tokens, subword tokens and punctuation-only tokens (module docstring).
        lowercase: lowercase the text before tokenization (PromptBERT's "Case" step, for SICK).
        include_special: add ``[CLS]`` first and ``[SEP]`` last; ``None`` = official choice
            (``not remove_biased``).
        biased_tokens: the frequent-token list; ``None`` = :func:`biased_tokens_for` the tokenizer's name.

    Returns:
        ``len(sentences)`` lists of ids, never empty (see the fallback in the module docstring).
    """
    if include_special is None:
        include_special = not remove_biased
    if biased_tokens is None and remove_biased:
        biased_tokens = biased_tokens_for(getattr(tokenizer, "name_or_path", None), family)
    drop = frozenset(biased_tokens or ())
    texts = [s.lower() if lowercase else s for s in sentences]
    if remove_biased and family == "roberta":
        texts = [" " + t for t in texts]  # official: every word, the first one included, gets the Ġ marker
    encoded = list(tokenizer(texts, add_special_tokens=False)["input_ids"]) if texts else []
    cls_id, sep_id = tokenizer.cls_token_id, tokenizer.sep_token_id
    specials = [i for i in (cls_id, sep_id) if i is not None]
    out: list[list[int]] = []
    for ids in encoded:
        ids = list(ids)
        if remove_biased:
            toks = tokenizer.convert_ids_to_tokens(ids)
            kept = [
                i for i, t in zip(ids, toks, strict=True)
                if t not in drop and not is_subword(t, family) and not is_punctuation(t, family)
            ]  # fmt: skip
            ids = kept or ids  # fallback: a sentence with nothing left keeps all its tokens
        if include_special:
            ids = ([cls_id] if cls_id is not None else []) + ids + ([sep_id] if sep_id is not None else [])
        out.append(ids or list(specials))
    return out


def static_avg(word_embeddings: torch.Tensor, token_ids: Sequence[Sequence[int]]) -> torch.Tensor:
    """Mean of ``word_embeddings`` rows per id list: (V, D) x N lists -> (N, D) float32 on CPU.

    Raises:
        ValueError: an empty id list (nothing to average).
    """
    if any(len(ids) == 0 for ids in token_ids):
        raise ValueError("static_avg: every sentence needs at least one token id")
    weight = word_embeddings.detach()
    if not token_ids:
        return torch.zeros(0, weight.shape[1])
    flat = torch.tensor([i for ids in token_ids for i in ids], dtype=torch.long, device=weight.device)
    lengths = torch.tensor([len(ids) for ids in token_ids], dtype=torch.long)
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)[:-1]]).to(weight.device)
    out = torch.nn.functional.embedding_bag(flat, weight.float(), offsets, mode="mean")
    return out.cpu()


def static_avg_encoder(
    encoder,
    tokenizer,
    remove_biased: bool = False,
    lowercase: bool = False,
    include_special: bool | None = None,
    biased_tokens: Sequence[str] | None = None,
) -> Callable[[list[str]], torch.Tensor]:
    """PromptBERT's ``static avg`` (Table 5; Table 1 / Table 3) as an ``encode`` function.

    Args:
        encoder: a :class:`cselab.model.backbone.Encoder`; its ``model.embeddings.word_embeddings`` is used.
        tokenizer: the backbone's tokenizer.
        remove_biased: "static avg with biased tokens removed" (Table 11 tokens, subwords, punctuation).
        lowercase: lowercase sentences first (pass True for SICK-R, whose processed text keeps case).
        include_special: average ``[CLS]``/``[SEP]`` too; ``None`` = official (yes for plain static avg, no with
            ``remove_biased``), see the module docstring.
        biased_tokens: override the Table 11 list (default: by the backbone's name, else its family).

    Returns:
        ``encode(sentences: list[str]) -> Tensor[N, D]`` float32 on CPU, rows in input order.

    Raises:
        ValueError: the backbone has no ``embeddings.word_embeddings`` module.
    """
    emb = getattr(getattr(encoder.model, "embeddings", None), "word_embeddings", None)
    if emb is None:
        raise ValueError(f"backbone {type(encoder.model).__name__} has no embeddings.word_embeddings; "
                         "static avg needs a BERT/RoBERTa-like input embedding matrix")
    family = encoder.family
    if biased_tokens is None and remove_biased:
        name = getattr(encoder.model.config, "_name_or_path", None) or getattr(tokenizer, "name_or_path", None)
        biased_tokens = biased_tokens_for(name, family)

    @torch.no_grad()
    def encode(sentences: list[str]) -> torch.Tensor:
        ids = static_token_ids(sentences, tokenizer, family, remove_biased, lowercase, include_special,
                               biased_tokens)
        return static_avg(emb.weight, ids)

    return encode
