"""ESimCSE's word repetition (Wu et al. 2022, Sec. 3.1): the positive view is the sentence with a few of its tokens
(``dup_type=bpe``, the official run scripts') or words (``word``, the paper's Sec. 5.2 ablation) repeated in place.

Official code (caskcsg/sentemb, ``ESimCSE/train.py``), transcribed rule by rule:

* the repetitions are drawn ONCE, before training, over the corpus in file order, by Python's ``random`` seeded
  with the run's seed (``set_seed(training_args.seed)`` :331, then ``datasets.map(prepare_features)`` :543-549);
  every epoch sees the same repeated sentences.  :func:`repetition_plan` makes the same calls, in the same order,
  on a ``random.Random(seed)``;
* ``bpe`` (:498-528): the sentence is tokenized WITH its special tokens and truncated to ``max_seq_length`` first
  (:491-496), then, with ``L`` that length and ``int(dup_rate * L) > 0``, ``add_len = randrange(min(10,
  int(dup_rate * L)))`` distinct positions are drawn from ``range(1, L - 1)`` (never [CLS] / <s>, never the last
  token) and each is doubled in place; the repeated sequence is NOT truncated again (up to ``L + 9`` tokens).  The
  attention mask is all ones and the token type ids zeros (:527-528);
* ``word`` (:461-480): the raw sentence split on ``' '``; ``add_len = randrange(min(10, n, max(2, int(dup_rate *
  n))))`` word indices from ``range(0, n - 1)`` (never the last word), each word written twice; the new sentence is
  tokenized and truncated like any other (:491-496).  (``add_stop``, the stop-word variant, is not ported.)
* the first view is the untouched sentence, the second the repeated one (``sentences = sent0 + new_sent1``, :480;
  ``features[key] = [[s[i], s[i + total]] ...]``, :538).

The corpus cselab reads skips empty and whitespace-only lines (:mod:`cselab.data.unsup`): under ``bpe`` such a line
is ``[CLS] [SEP]`` (``int(dup_rate * 2) = 0``, no draw), so the stream is the official one; under ``word`` the
official code would draw for them, so a corpus with such lines gets another (equally distributed) stream.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import islice

import torch

from cselab.model.spec import ConfigError
from cselab.model.template_input import ViewCollate, ViewSpec

#: ``method.esimcse.dup_type`` values: ``bpe`` (tokens, official run.sh) | ``word`` (words, paper Sec. 5.2)
DUP_TYPES = ("bpe", "word")
#: the row key of a sentence's drawn positions (token positions for ``bpe``, word indices for ``word``)
PLAN_KEY = "repetition"
#: the field name of the repeated view (:class:`RepetitionCollate`)
REPEATED_FIELD = "text_repeated"


def draw_token_positions(length: int, dup_rate: float, rng: random.Random) -> list[int]:
    """The positions of a ``length``-token sequence (special tokens included) that ``bpe`` repeats, drawn from
    ``rng`` as ``ESimCSE/train.py:516-518`` draws them: none (and no draw) when ``int(dup_rate * length) == 0``,
    else ``randrange(min(10, int(dup_rate * length)))`` sorted positions of ``range(1, length - 1)``."""
    if int(dup_rate * length) <= 0:
        return []
    add_len = rng.randrange(min(10, int(dup_rate * length)))
    return sorted(rng.sample(range(1, length - 1), add_len))


def draw_word_positions(text: str, dup_rate: float, rng: random.Random) -> list[int]:
    """The word indices (of ``text.split(' ')``) that ``word`` repeats, drawn as ``ESimCSE/train.py:465-469``."""
    sent_len = len(text.split(" "))
    if sent_len <= 0:  # never: str.split(' ') has at least one item (kept as the official test)
        return []
    add_len = rng.randrange(min(10, sent_len, max(2, int(dup_rate * sent_len))))
    return sorted(rng.sample(range(0, sent_len - 1), add_len))


def repeat_tokens(ids: Sequence[int], positions: Iterable[int]) -> list[int]:
    """``ids`` with the token at each of ``positions`` doubled in place (``ESimCSE/train.py:519-523``)."""
    dup = set(positions)
    out: list[int] = []
    for i, token in enumerate(ids):
        if i in dup:
            out.append(token)
        out.append(token)
    return out


def repeat_words(text: str, positions: Iterable[int]) -> str:
    """``text`` with each word at ``positions`` (of ``text.split(' ')``) written twice (``train.py:470-476``)."""
    words = text.split(" ")
    for i in positions:
        words[i] = words[i] + " " + words[i]
    return " ".join(words)


def repetition_plan(texts: Iterable[str], dup_rate: float, seed: int, dup_type: str = "bpe",
                    lengths: Callable[[list[str]], list[int]] | None = None,
                    chunk: int = 10_000) -> list[list[int]]:
    """The repetition of every sentence of a corpus, in corpus order, from ONE ``random.Random(seed)`` stream (the
    official ``set_seed`` then ``datasets.map``, ``ESimCSE/train.py:331,543``).

    Args:
        texts: the sentences in corpus (file) order.
        dup_rate: the repetition rate (official ``--dup_rate``).
        seed: the run's seed.
        dup_type: ``bpe`` (token positions of the sentence with its special tokens, truncated) or ``word``.
        lengths: ``bpe``: sentences -> their token counts WITH special tokens after truncation to the training
            length (:meth:`RepetitionCollate.wrapped_lengths`); unused for ``word``.
        chunk: sentences tokenized per call of ``lengths``.

    Returns:
        one sorted list of positions per sentence (token positions for ``bpe``, word indices for ``word``).

    Raises:
        ConfigError: ``bpe`` without ``lengths`` (the values come checked: ``ESimCSEOptions``).
    """
    if dup_type == "bpe" and lengths is None:
        raise ConfigError("repetition_plan(dup_type='bpe') needs the tokenized lengths (lengths=...)")
    rng = random.Random(int(seed))
    plan: list[list[int]] = []
    rows = iter(texts)
    while buffer := list(islice(rows, chunk)):
        if dup_type == "word":
            plan.extend(draw_word_positions(t, dup_rate, rng) for t in buffer)
        else:
            plan.extend(draw_token_positions(n, dup_rate, rng) for n in lengths(buffer))
    return plan


class RepetitionCollate(ViewCollate):
    """ESimCSE's training collate: view 0 the sentence (``[CLS] s [SEP]``, truncated to ``max_seq_len`` tokens),
    view 1 the same sentence with the planned repetition (:data:`PLAN_KEY` of each row, from
    :func:`repetition_plan`), never truncated after the repetition (``bpe``) / truncated like view 0 (``word``).

    Args:
        tokenizer: the backbone's tokenizer.
        dup_rate, dup_type: the repetition (:func:`repetition_plan`).
        max_seq_len: the training truncation, special tokens included (official ``--max_seq_length`` 32).
        max_positions: the backbone's position budget (:attr:`cselab.model.backbone.Encoder.max_positions`).
        pad_to_multiple_of: as :class:`ViewCollate` (``data.pad_to_multiple_of``).

    Call it on rows ``{"text": str, "repetition": list[int]}``; returns :class:`ViewCollate`'s tensors with
    V = 2 (``input_ids`` (B, 2, T) ...).

    Raises:
        KeyError: a row without its :data:`PLAN_KEY` (the corpus was not prepared by :func:`add_repetition_column`).
    """

    def __init__(self, tokenizer, dup_rate: float, dup_type: str = "bpe", max_seq_len: int = 32,
                 max_positions: int = 512, pad_to_multiple_of: int | None = None) -> None:
        super().__init__(tokenizer, [ViewSpec("text"), ViewSpec(REPEATED_FIELD)], max_seq_len=max_seq_len,
                         max_positions=max_positions, pad_to_multiple_of=pad_to_multiple_of)
        self.dup_rate, self.dup_type = float(dup_rate), dup_type

    def _budget(self, view: int) -> int:
        """View 1 arrives truncated already (its repetition may exceed ``max_seq_len``): only the positions cut it."""
        if view == 1:
            return self.max_positions - len(self.templates[view].prefix_ids) - len(self.templates[view].suffix_ids)
        return super()._budget(view)

    def wrapped_lengths(self, texts: list[str]) -> list[int]:
        """Token counts of ``texts`` with the two special tokens, after the training truncation (the ``L`` of
        ``ESimCSE/train.py:501``)."""
        budget = super()._budget(0)
        return [min(len(ids), budget) + 2 for ids in self.tokenize(texts)]

    def __call__(self, examples: Sequence[Mapping]) -> dict[str, torch.Tensor]:
        try:
            texts = [r["text"] for r in examples]
            plans = [list(r[PLAN_KEY]) for r in examples]
        except (KeyError, TypeError):
            raise KeyError(f"ESimCSE's collate needs rows with 'text' and {PLAN_KEY!r} (the repetition drawn before "
                           "training, cselab.methods.esimcse.repetition.add_repetition_column)") from None
        budget = super()._budget(0)
        ids = [t[:budget] for t in self.tokenize(texts)]
        if self.dup_type == "bpe":  # positions count the leading special token: position p is sentence token p - 1
            repeated = [repeat_tokens([-1, *t, -1], p)[1:-1] for t, p in zip(ids, plans, strict=True)]
        else:
            new = [repeat_words(t, p) for t, p in zip(texts, plans, strict=True)]
            repeated = [t[:budget] for t in self.tokenize(new)]
        return self.build({"text": ids, REPEATED_FIELD: repeated})


def add_repetition_column(dataset, collate: RepetitionCollate, seed: int):
    """``dataset`` (a Hugging Face ``Dataset`` of ``{"text"}`` rows in corpus order) with the :data:`PLAN_KEY`
    column of :func:`repetition_plan` (a no-op when it has one).

    Raises:
        ConfigError: ``dataset`` is not a map-style ``datasets.Dataset`` (the streamed corpus has no corpus-order
            pass before training: names ``data.streaming``).
    """
    import datasets

    if not isinstance(dataset, datasets.Dataset):
        raise ConfigError("method=esimcse draws its repetitions over the whole corpus in file order before training "
                          "(ESimCSE/train.py:543); data.streaming=true has no such pass: set data.streaming=false")
    if PLAN_KEY in dataset.column_names:
        return dataset
    texts = (text for batch in dataset.iter(batch_size=10_000) for text in batch["text"])
    plan = repetition_plan(texts, collate.dup_rate, seed, collate.dup_type, lengths=collate.wrapped_lengths)
    return dataset.add_column(PLAN_KEY, plan)
