"""The collate: raw sentences -> token tensors for every view of a contrastive example.

This is the only place that knows templates and the tokenizer (the architecture's rule: "keep the path one-way", README "Architecture").  A method
describes its views as :class:`ViewSpec` (which text field, which template); the collate tokenizes each
distinct field ONCE, truncates the sentence to ``max_seq_len`` tokens, wraps it in each view's template,
pads dynamically to the longest row of the batch, and builds the template-denoising inputs once per distinct
sentence length (see :mod:`cselab.model.template_bias`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from .mlm_masking import mask_tokens
from .soft_slots import SlotTable, check_soft_views, soft_slot_table, template_index
from .template import Template, TokenizedTemplate, period_rule, tokenize_template
from .template_bias import DENOISE_MODES, bias_table

#: ``train_tokenization`` values (:class:`ViewCollate`)
TRAIN_TOKENIZATIONS = ("promptbert", "sncse")


def field_texts(examples: Sequence[Mapping[str, str] | str], field: str) -> list[str]:
    """The ``field`` of every example (a bare string is ``{"text": it}``).

    Raises:
        KeyError: an example lacks ``field`` (names it and the keys present).
    """
    rows = [{"text": e} if isinstance(e, str) else e for e in examples]
    try:
        return [r[field] for r in rows]
    except KeyError:
        raise KeyError(f"example lacks field {field!r} needed by the method's views; it has {sorted(rows[0])}") from None


@dataclass(frozen=True)
class ViewSpec:
    """One view of an example: the text field it reads and the template that wraps it.

    Attributes:
        field: key of the raw example (``"text"`` for the unsup corpus; ``"sent0"``, ``"sent1"``,
            ``"hard_neg"`` for NLI triplets).
        template: a template string (readable or official spelling) or ``None`` for ``[CLS] s [SEP]``.
    """

    field: str
    template: str | None = None


class ViewCollate:
    """Turns a list of raw examples into the batch tensors of a method.

    Args:
        tokenizer: a Hugging Face tokenizer (fast or slow); must have cls/sep/pad (and mask for templates).
        views: the views of one example, in loss order (e.g. anchor, positive[, hard negative]).
        max_seq_len: maximum sentence length in tokens, applied to the sentence BEFORE the template wraps it
            (PromptBERT's official behaviour); without a template the two special tokens count, as SimCSE's
            ``max_seq_length`` does.  ``None``: no truncation beyond ``max_positions`` (evaluation, as SimCSE).
        denoise: ``"none"`` | ``"position"`` | ``"pad"`` -- build template-only rows per distinct length.
        mask_index: which [MASK] of a template is the representation (``-1``: the last one).
        add_period: append "." to sentences not ending in ``. ? " '`` (``True`` / ``"promptbert"``: PromptBERT's
            evaluation rule) or `` .`` to those not ending in a punctuation mark (``"sncse"``); :func:`period_rule`.
        train_tokenization: ``"promptbert"`` (default): ``max_seq_len`` counts the sentence's own tokens and the
            prefix is tokenized stripped (PromptBERT ``train.py:618-629``); ``"sncse"``: ``max_seq_len`` counts the
            whole wrapped input (SNCSE ``train_SNCSE.py:461-462``: the sentence keeps ``max_seq_length -
            len(prefix) - len(suffix) - 2`` tokens) and the prefix is tokenized WITH the whitespace before ``[X]``
            (``:447-450``, ``tokenizer.tokenize('This sentence : " ')``: RoBERTa's BPE gives a lone ``Ġ`` token;
            WordPiece ids do not change).  Only for the training tokenization (not with
            ``official_test_tokenization``).
        official_test_tokenization: tokenize as the official TEST encoder (PromptBERT ``evaluation.py:194-202``,
            CoT-BERT ``evaluation.py:221-228``), which tokenizes the template with the sentence inside as ONE
            string, ``.strip()``-ed: the sentence is tokenized with a leading space when the template has
            whitespace before ``[X]`` (RoBERTa's ``' a cat'`` -> ``Ġa``; WordPiece: no change) and the suffix
            without its trailing whitespace.  ``False`` (default): the training / in-training dev tokenization
            (``train.py:674-692``, ``models.py:307-335``), sentence and template pieces tokenized apart.
        position_offset: first position id of the backbone (``Encoder.position_offset``), for ``position``
            denoising.
        max_positions: the backbone's ``max_position_embeddings`` minus its offset; the sentence is cut further
            so that the wrapped input always fits, never cutting the template.
        soft_templates: for continuous templates (``tuning=soft_prompt``): the ordered list of every template
            string that shares the trainable table (train and eval collates get the same list, so slots agree).
            Each template token except [CLS], [SEP] and [MASK] gets a slot; ``template_index`` is emitted.
        mlm_probability: > 0 adds ``mlm_input_ids`` / ``mlm_labels`` (B, V, T) for the MLM auxiliary loss: BERT's
            masking of that fraction of the SENTENCE tokens (:func:`.mlm_masking.mask_tokens`).
        mlm_seed: seeds the masking together with the batch's token ids (:mod:`.mlm_masking`: the same masks in
            any DataLoader worker or process, and in a run resumed mid-epoch).  The run builds the training
            collate with its ``seed`` (:func:`cselab.run.assemble.build_datamodule`).
        pad_to_multiple_of: None, or the width T (and Tb of the bias rows) padded up to a multiple of it (never
            beyond ``max_positions``), and the bias rows padded to the fixed count :attr:`max_bias_rows` (copies
            of a real row, which no ``bias_row`` points to), so that a compiled training forward sees a few shapes
            only (:mod:`cselab.methods.compiled`).  Padding positions are masked: the representations do not
            change (but for rounding).  The run builds the training collate with ``data.pad_to_multiple_of``
            (8 on a GPU).

    Call it on ``list[Mapping[str, str]]`` or ``list[str]`` (the latter fills the field ``"text"``).  Returns:
        ``input_ids`` (B, V, T), ``attention_mask`` (B, V, T), ``rep_index`` (B, V) index of the
        representation token ([MASK] of the template, 0 = [CLS] without template), ``sent_len`` (B, V);
        with denoising also ``bias_input_ids`` (R, Tb), ``bias_attention_mask`` (R, Tb),
        ``bias_rep_index`` (R,), ``bias_row`` (B, V) row of the bias table for each (example, view), and for
        ``position`` denoising ``bias_position_ids`` (R, Tb).

    Raises:
        KeyError: an example lacks a view's field (the message names the field and the keys present).
        ValueError: unknown denoise mode or ``train_tokenization``, denoising requested for a view without
            template, or
            ``official_test_tokenization`` with views that disagree on the whitespace before ``[X]`` (the
            sentence of a field is tokenized once for all views) or with a continuous template whose test
            tokenization differs from its training one (the slot table would not match).
    """

    def __init__(
        self,
        tokenizer,
        views: Sequence[ViewSpec],
        max_seq_len: int | None = 32,
        denoise: str = "none",
        mask_index: int = -1,
        add_period: bool = False,
        position_offset: int = 0,
        max_positions: int = 512,
        soft_templates: Sequence[str] | None = None,
        mlm_probability: float = 0.0,
        mlm_seed: int = 0,
        pad_to_multiple_of: int | None = None,
        official_test_tokenization: bool = False,
        train_tokenization: str = "promptbert",
    ) -> None:
        if denoise not in DENOISE_MODES:
            raise ValueError(f"denoise={denoise!r}: expected one of {DENOISE_MODES}")
        self.tokenizer = tokenizer
        self.pad_to_multiple_of = pad_to_multiple_of
        self.views = list(views)
        self.max_seq_len = max_seq_len
        self.denoise = denoise
        self.add_period = add_period
        self._period = period_rule(add_period)
        if train_tokenization not in TRAIN_TOKENIZATIONS:
            raise ValueError(f"train_tokenization={train_tokenization!r}: expected one of {TRAIN_TOKENIZATIONS}")
        self.budget_includes_template = train_tokenization == "sncse"
        self.official_test_tokenization = bool(official_test_tokenization)
        keep_space = self.budget_includes_template and not self.official_test_tokenization
        self.position_offset = position_offset
        self.max_positions = max_positions
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        self.templates: list[TokenizedTemplate] = []
        for view in self.views:
            tpl = Template.parse(view.template, mask_index) if view.template is not None else None
            if tpl is None and denoise != "none":
                raise ValueError(
                    f"denoise={denoise!r} needs a template on every view; view {view} has none "
                    "(set denoise=none or choose a prompt)"
                )
            self.templates.append(tokenize_template(tpl, tokenizer, whole_string=self.official_test_tokenization,
                                                    keep_space_before_sentence=keep_space))
        prefixes = {tt.sentence_prefix for tt in self.templates}
        if len(prefixes) > 1:
            raise ValueError(
                f"official_test_tokenization=True needs views that agree on the whitespace before [X]; "
                f"views {self.views} do not (use one template per collate)"
            )
        self.sentence_prefix = prefixes.pop()
        self.fields = list(dict.fromkeys(v.field for v in self.views))
        self.mlm_probability = float(mlm_probability)
        self.mlm_seed = int(mlm_seed)
        #: the continuous template's slot table and the token id of every slot (:mod:`.soft_slots`), or empty
        self.soft_slots: SlotTable = {}
        self.soft_init_ids: list[int] = []
        if soft_templates:
            self.soft_slots, self.soft_init_ids = soft_slot_table(list(soft_templates), tokenizer, mask_index)
            check_soft_views(self.views, self.templates, self.soft_slots, list(soft_templates), tokenizer, mask_index)

    def _budget(self, view: int) -> int:
        tt = self.templates[view]
        room = self.max_positions - len(tt.prefix_ids) - len(tt.suffix_ids)
        if self.max_seq_len is None:
            return room
        if self.views[view].template is None:
            own = self.max_seq_len - 2
        elif self.budget_includes_template:
            own = self.max_seq_len - len(tt.prefix_ids) - len(tt.suffix_ids)
        else:
            own = self.max_seq_len
        return max(0, min(own, room))

    def tokenize(self, texts: Sequence[str]) -> list[list[int]]:
        """Sentence token ids without special tokens and without truncation (the period rule applied, then
        ``sentence_prefix``: a space for the official test tokenization of a template with whitespace before
        ``[X]``)."""
        if not texts:  # Hugging Face fast tokenizers raise IndexError on an empty batch
            return []
        if self._period is not None:
            texts = [self._period(t) for t in texts]
        if self.sentence_prefix:
            texts = [self.sentence_prefix + t for t in texts]
        return list(self.tokenizer(list(texts), add_special_tokens=False)["input_ids"])

    def __call__(self, examples: Sequence[Mapping[str, str] | str]) -> dict[str, torch.Tensor]:
        return self.build({field: self.tokenize(field_texts(examples, field)) for field in self.fields})

    def build(self, tokens: Mapping[str, Sequence[Sequence[int]]]) -> dict[str, torch.Tensor]:
        """Wrap pre-tokenized sentences (field -> list of id lists) into the batch tensors."""
        n_views = len(self.views)
        batch = len(next(iter(tokens.values())))
        wrapped: list[list[list[int]]] = [[None] * n_views for _ in range(batch)]  # type: ignore[list-item]
        rep_index = torch.zeros(batch, n_views, dtype=torch.long)
        sent_len = torch.zeros(batch, n_views, dtype=torch.long)
        for v, view in enumerate(self.views):
            tt, budget = self.templates[v], self._budget(v)
            for b, ids in enumerate(tokens[view.field]):
                ids = list(ids[:budget])
                wrapped[b][v] = tt.wrap(ids)
                rep_index[b, v] = tt.rep_position(len(ids))
                sent_len[b, v] = len(ids)
        width = self._padded_width(max(len(seq) for row in wrapped for seq in row))
        input_ids = torch.full((batch, n_views, width), self.pad_id, dtype=torch.long)
        attention = torch.zeros((batch, n_views, width), dtype=torch.long)
        for b, row in enumerate(wrapped):
            for v, seq in enumerate(row):
                input_ids[b, v, : len(seq)] = torch.tensor(seq, dtype=torch.long)
                attention[b, v, : len(seq)] = 1
        out = {"input_ids": input_ids, "attention_mask": attention, "rep_index": rep_index, "sent_len": sent_len}
        if self.soft_slots:
            out["template_index"] = template_index(input_ids.shape, sent_len, self.views, self.templates,
                                                   self.soft_slots)
        if self.mlm_probability > 0:  # BERT masking on sentence tokens, seeded by mlm_seed and the batch
            eligible = self._sentence_mask(input_ids.shape, sent_len)
            out.update(mask_tokens(input_ids, eligible, self.mlm_probability, self.mlm_seed,
                                   self.tokenizer.mask_token_id, len(self.tokenizer)))
        if self.denoise != "none":  # with pad_to_multiple_of, max_bias_rows rows
            rows = self.max_bias_rows if self.pad_to_multiple_of else None
            out.update(bias_table(self.templates, sent_len, self.denoise, self.pad_id, self.position_offset,
                                  self._padded_width, rows))
        return out

    def _padded_width(self, width: int) -> int:
        """``width`` rounded up to a multiple of ``pad_to_multiple_of`` (at most ``max_positions``, and never below
        ``width``)."""
        m = self.pad_to_multiple_of
        if not m:
            return width
        return max(width, min(-(-width // m) * m, self.max_positions))

    @property
    def max_bias_rows(self) -> int:
        """The most template-bias rows a batch can need: for each distinct template, one per possible sentence
        length (0 .. the view's length budget)."""
        budgets: dict[TokenizedTemplate, int] = {}
        for v, tt in enumerate(self.templates):
            budgets[tt] = max(budgets.get(tt, 0), self._budget(v))
        return sum(b + 1 for b in budgets.values())

    def _sentence_mask(self, shape: torch.Size, sent_len: torch.Tensor) -> torch.Tensor:
        """(B, V, T) bool: True on the sentence's own tokens (never on template or special tokens)."""
        mask = torch.zeros(shape, dtype=torch.bool)
        for v in range(shape[1]):
            p = len(self.templates[v].prefix_ids)
            for b in range(shape[0]):
                mask[b, v, p : p + int(sent_len[b, v])] = True
        return mask
