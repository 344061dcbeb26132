"""The collate: raw sentences -> token tensors for every view of a contrastive example.

This is the only place that knows templates and the tokenizer (DESIGN.md: "keep the path one-way").  A method
describes its views as :class:`ViewSpec` (which text field, which template); the collate tokenizes each
distinct field ONCE, truncates the sentence to ``max_seq_len`` tokens, wraps it in each view's template,
pads dynamically to the longest row of the batch, and builds the template-denoising inputs once per distinct
sentence length (see :mod:`cselab.prompts.denoise`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from cselab.prompts.denoise import DENOISE_MODES, bias_inputs
from cselab.prompts.template import Template, TokenizedTemplate, append_period, tokenize_template


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
        add_period: append "." to sentences not ending in ``. ? " '`` (PromptBERT's evaluation rule).
        position_offset: first position id of the backbone (``Encoder.position_offset``), for ``position``
            denoising.
        max_positions: the backbone's ``max_position_embeddings`` minus its offset; the sentence is cut further
            so that the wrapped input always fits, never cutting the template.

    Call it on ``list[Mapping[str, str]]`` or ``list[str]`` (the latter fills the field ``"text"``).  Returns:
        ``input_ids`` (B, V, T), ``attention_mask`` (B, V, T), ``rep_index`` (B, V) index of the
        representation token ([MASK] of the template, 0 = [CLS] without template), ``sent_len`` (B, V);
        with denoising also ``bias_input_ids`` (R, Tb), ``bias_attention_mask`` (R, Tb),
        ``bias_rep_index`` (R,), ``bias_row`` (B, V) row of the bias table for each (example, view), and for
        ``position`` denoising ``bias_position_ids`` (R, Tb).

    Raises:
        KeyError: an example lacks a view's field (the message names the field and the keys present).
        ValueError: unknown denoise mode, or denoising requested for a view without template.
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
    ) -> None:
        if denoise not in DENOISE_MODES:
            raise ValueError(f"denoise={denoise!r}: expected one of {DENOISE_MODES}")
        if not views:
            raise ValueError("a collate needs at least one view")
        self.tokenizer = tokenizer
        self.views = list(views)
        self.max_seq_len = max_seq_len
        self.denoise = denoise
        self.add_period = add_period
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
            self.templates.append(tokenize_template(tpl, tokenizer))
        self.fields = list(dict.fromkeys(v.field for v in self.views))

    def _budget(self, view: int) -> int:
        tt = self.templates[view]
        room = self.max_positions - len(tt.prefix_ids) - len(tt.suffix_ids)
        if self.max_seq_len is None:
            return room
        own = self.max_seq_len - 2 if self.views[view].template is None else self.max_seq_len
        return max(0, min(own, room))

    def tokenize(self, texts: Sequence[str]) -> list[list[int]]:
        """Sentence token ids without special tokens and without truncation (the period rule applied)."""
        if not texts:  # Hugging Face fast tokenizers raise IndexError on an empty batch
            return []
        if self.add_period:
            texts = [append_period(t) for t in texts]
        return list(self.tokenizer(list(texts), add_special_tokens=False)["input_ids"])

    def __call__(self, examples: Sequence[Mapping[str, str] | str]) -> dict[str, torch.Tensor]:
        rows = [{"text": e} if isinstance(e, str) else e for e in examples]
        tokens: dict[str, list[list[int]]] = {}
        for field in self.fields:
            try:
                texts = [r[field] for r in rows]
            except KeyError:
                raise KeyError(
                    f"example lacks field {field!r} needed by the method's views; it has {sorted(rows[0])}"
                ) from None
            tokens[field] = self.tokenize(texts)
        return self.build(tokens)

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
        width = max(len(seq) for row in wrapped for seq in row)
        input_ids = torch.full((batch, n_views, width), self.pad_id, dtype=torch.long)
        attention = torch.zeros((batch, n_views, width), dtype=torch.long)
        for b, row in enumerate(wrapped):
            for v, seq in enumerate(row):
                input_ids[b, v, : len(seq)] = torch.tensor(seq, dtype=torch.long)
                attention[b, v, : len(seq)] = 1
        out = {"input_ids": input_ids, "attention_mask": attention, "rep_index": rep_index, "sent_len": sent_len}
        if self.denoise != "none":
            out.update(self._bias(sent_len))
        return out

    def _bias(self, sent_len: torch.Tensor) -> dict[str, torch.Tensor]:
        """One template-only row per (distinct template, distinct length) in the batch."""
        parts: list[dict[str, torch.Tensor]] = []
        bias_row = torch.zeros_like(sent_len)
        start = 0
        groups: dict[TokenizedTemplate, list[int]] = {}  # views sharing a template share its rows
        for v, tt in enumerate(self.templates):
            groups.setdefault(tt, []).append(v)
        for tt, views in groups.items():
            lengths = sorted(set(sent_len[:, views].flatten().tolist()))
            parts.append(bias_inputs(tt, lengths, self.denoise, self.pad_id, self.position_offset))
            lookup = torch.full((int(max(lengths)) + 1,), -1, dtype=torch.long)
            lookup[torch.tensor(lengths)] = torch.arange(start, start + len(lengths))
            bias_row[:, views] = lookup[sent_len[:, views]]
            start += len(lengths)
        width = max(p["input_ids"].shape[1] for p in parts)

        def pad(t: torch.Tensor, value: int) -> torch.Tensor:
            return torch.nn.functional.pad(t, (0, width - t.shape[1]), value=value)

        out = {
            "bias_input_ids": torch.cat([pad(p["input_ids"], self.pad_id) for p in parts]),
            "bias_attention_mask": torch.cat([pad(p["attention_mask"], 0) for p in parts]),
            "bias_rep_index": torch.cat([p["rep_index"] for p in parts]),
            "bias_row": bias_row,
        }
        if self.denoise == "position":
            out["bias_position_ids"] = torch.cat([pad(p["position_ids"], self.position_offset) for p in parts])
        return out
