"""Template-denoising inputs: the template alone, one row per distinct sentence length.

The template bias of PromptBERT (Eq. 4) and CoT-BERT depends only on (template, sentence length L), never on
the sentence itself, so it is computed once per distinct L in the batch (the official code feeds a fixed table
of 50 rows -- 256 for sup -- every step, and picks the row by length).  The rows are forwarded WITH gradient by
the method, exactly like the official code.

Modes (config key ``denoise``):

* ``position`` (PromptBERT): input ``[CLS] prefix suffix [SEP]`` with the position ids of the suffix shifted by
  ``L`` so that every template token keeps the position it has in the real input.  Positions include the
  backbone's offset (RoBERTa numbers positions from ``padding_idx + 1 = 2``), so they equal the positions the
  backbone computes for the real input.
* ``pad`` (CoT-BERT): input ``[CLS] prefix [PAD]*L suffix [SEP]``, attention 1 on the template and the L
  placeholders, 0 on the tail padding, and the backbone's DEFAULT position ids.  For BERT the placeholders
  shift the suffix by L like real tokens.  For RoBERTa the default position ids are derived from non-pad
  tokens (``create_position_ids_from_input_ids``), so the placeholders get the padding position and do NOT
  shift the suffix: this is what the official CoT-BERT code computes on RoBERTa and it is kept as is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

from .template import TokenizedTemplate

DENOISE_MODES = ("none", "position", "pad")


def bias_inputs(
    template: TokenizedTemplate,
    lengths: list[int],
    mode: str,
    pad_token_id: int,
    position_offset: int = 0,
) -> dict[str, torch.Tensor]:
    """Inputs of the template-only forward pass, one row per entry of ``lengths``.

    Args:
        template: the tokenized template (prefix ids start with [CLS], suffix ids end with [SEP]).
        lengths: sentence lengths in tokens, one row each (pass distinct lengths).
        mode: ``"position"`` or ``"pad"`` (see module docstring).
        pad_token_id: the tokenizer's pad id (placeholders and tail padding).
        position_offset: the backbone's first position id (0 for BERT, ``padding_idx + 1`` for RoBERTa).

    Returns:
        ``input_ids`` (R, T) long, ``attention_mask`` (R, T) long, ``rep_index`` (R,) long (index of the
        representation [MASK] in each row), and for ``position`` mode ``position_ids`` (R, T) long.

    Raises:
        ValueError: unknown mode, or the template has no [MASK] to represent.
    """
    if mode not in ("position", "pad"):
        raise ValueError(f"denoise={mode!r}: expected one of {DENOISE_MODES[1:]} for a bias forward pass")
    p, s = len(template.prefix_ids), len(template.suffix_ids)
    rows = len(lengths)
    if mode == "position":
        ids = torch.tensor([*template.prefix_ids, *template.suffix_ids], dtype=torch.long)
        input_ids = ids.unsqueeze(0).expand(rows, -1).contiguous()
        attention = torch.ones_like(input_ids)
        lens = torch.tensor(lengths, dtype=torch.long).unsqueeze(1)
        base = torch.arange(p + s, dtype=torch.long).unsqueeze(0).expand(rows, -1)
        shift = torch.cat([torch.zeros(rows, p, dtype=torch.long), lens.expand(rows, s)], dim=1)
        position_ids = base + shift + position_offset
        rep = [template.rep_position(0)] * rows
        return {
            "input_ids": input_ids,
            "attention_mask": attention,
            "position_ids": position_ids,
            "rep_index": torch.tensor(rep, dtype=torch.long),
        }
    width = p + max(lengths) + s
    input_ids = torch.full((rows, width), pad_token_id, dtype=torch.long)
    attention = torch.zeros((rows, width), dtype=torch.long)
    for r, length in enumerate(lengths):
        row = [*template.prefix_ids, *([pad_token_id] * length), *template.suffix_ids]
        input_ids[r, : len(row)] = torch.tensor(row, dtype=torch.long)
        attention[r, : len(row)] = 1
    rep = [template.rep_position(length) for length in lengths]
    return {"input_ids": input_ids, "attention_mask": attention, "rep_index": torch.tensor(rep, dtype=torch.long)}


def bias_table(templates: Sequence[TokenizedTemplate], sent_len: torch.Tensor, mode: str, pad_token_id: int,
               position_offset: int, padded_width: Callable[[int], int],
               rows: int | None = None) -> dict[str, torch.Tensor]:
    """A batch's template-bias inputs: one template-only row (:func:`bias_inputs`) per (distinct template,
    distinct sentence length) of the batch; views sharing a template share its rows.

    Args:
        templates: the tokenized template of each view (V of them).
        sent_len: (B, V) sentence lengths in tokens.
        mode, pad_token_id, position_offset: as :func:`bias_inputs`.
        padded_width: the width Tb of the rows from the widest part's (the collate's ``pad_to_multiple_of``).
        rows: a fixed row count R (copies of row 0, which no ``bias_row`` points to, fill it up) or None.

    Returns:
        ``bias_input_ids`` (R, Tb), ``bias_attention_mask`` (R, Tb), ``bias_rep_index`` (R,), ``bias_row`` (B, V)
        the row of each (example, view), and for ``position`` mode ``bias_position_ids`` (R, Tb).
    """
    parts: list[dict[str, torch.Tensor]] = []
    bias_row = torch.zeros_like(sent_len)
    start = 0
    groups: dict[TokenizedTemplate, list[int]] = {}
    for v, tt in enumerate(templates):
        groups.setdefault(tt, []).append(v)
    for tt, views in groups.items():
        lengths = sorted(set(sent_len[:, views].flatten().tolist()))
        parts.append(bias_inputs(tt, lengths, mode, pad_token_id, position_offset))
        lookup = torch.full((int(max(lengths)) + 1,), -1, dtype=torch.long)
        lookup[torch.tensor(lengths)] = torch.arange(start, start + len(lengths))
        bias_row[:, views] = lookup[sent_len[:, views]]
        start += len(lengths)
    width = padded_width(max(p["input_ids"].shape[1] for p in parts))
    extra = rows - start if rows is not None else 0

    def table(key: str, value: int | None) -> torch.Tensor:
        """The parts' ``key`` tensors stacked (widths padded with ``value``), then ``extra`` copies of row 0."""
        t = torch.cat([p[key] if value is None else F.pad(p[key], (0, width - p[key].shape[1]), value=value)
                       for p in parts])
        return torch.cat([t, t[:1].expand(extra, *t.shape[1:])]) if extra > 0 else t

    out = {
        "bias_input_ids": table("input_ids", pad_token_id),
        "bias_attention_mask": table("attention_mask", 0),
        "bias_rep_index": table("rep_index", None),
        "bias_row": bias_row,
    }
    if mode == "position":
        out["bias_position_ids"] = table("position_ids", position_offset)
    return out
