"""The continuous template's slot table (``tuning=soft_prompt``: SCPCSE, OptiPrompt).

Every template that shares the trainable table (the train and eval collates get the same ordered list, so their
slots agree) gives each of its tokens except [CLS], [SEP] and [MASK] a slot.  The collate marks each template
token of a batch with its slot (``template_index``); the backbone's (n_slots, D) table starts from the slots'
input word embeddings (:meth:`.backbone.Encoder.add_soft_template`, PromptBERT Sec. 4.2, DCPCSE SCPCSE).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .template import Template, TokenizedTemplate, tokenize_template

#: template string -> (first slot, prefix positions with a slot, suffix positions with a slot)
SlotTable = dict[str, tuple[int, list[int], list[int]]]


def soft_slot_table(templates: Sequence[str], tokenizer, mask_index: int) -> tuple[SlotTable, list[int]]:
    """The slot table of ``templates`` (each distinct string once, in order) and the token id of every slot
    (the table's initial rows), from their training tokenization."""
    slots: SlotTable = {}
    init_ids: list[int] = []
    mask_id = tokenizer.mask_token_id
    for source in dict.fromkeys(templates):
        tt = tokenize_template(Template.parse(source, mask_index), tokenizer)
        pre = [i for i in range(1, len(tt.prefix_ids)) if tt.prefix_ids[i] != mask_id]
        suf = [j for j in range(len(tt.suffix_ids) - 1) if tt.suffix_ids[j] != mask_id]
        slots[source] = (len(init_ids), pre, suf)
        init_ids += [tt.prefix_ids[i] for i in pre] + [tt.suffix_ids[j] for j in suf]
    return slots, init_ids


def check_soft_views(views: Sequence, tokenized: Sequence[TokenizedTemplate], slots: SlotTable,
                     templates: Sequence[str], tokenizer, mask_index: int) -> None:
    """Every view (a :class:`.template_input.ViewSpec`) has slots in the table, and its collate's template ids
    (``tokenized``) are the training ids the table was built from.

    Raises:
        ValueError: a view without a template or without slots in ``templates``; or
            ``official_test_tokenization`` changing a continuous template's ids (trailing whitespace).
    """
    for view in views:
        if view.template is None or view.template not in slots:
            raise ValueError(f"view {view} has no slots in the continuous template table {list(templates)}")
    for view, tt in zip(views, tokenized, strict=True):
        trained = tokenize_template(Template.parse(view.template, mask_index), tokenizer)
        if (tt.prefix_ids, tt.suffix_ids) != (trained.prefix_ids, trained.suffix_ids):
            raise ValueError(
                f"official_test_tokenization=True changes the ids of continuous template {view.template!r} "
                "(trailing whitespace after the last template token); its slot table is built from the "
                "training ids -- remove the trailing whitespace from the template"
            )


def template_index(shape: torch.Size, sent_len: torch.Tensor, views: Sequence,
                   tokenized: Sequence[TokenizedTemplate], slots: SlotTable) -> torch.Tensor:
    """(B, V, T): the slot of each template token of a batch of ``shape`` (B, V, T), -1 on sentence and special
    tokens; ``sent_len`` (B, V) the sentence lengths, ``views`` / ``tokenized`` the collate's views and their
    templates."""
    index = torch.full(shape, -1, dtype=torch.long)
    for v, view in enumerate(views):
        offset, pre, suf = slots[view.template]
        p = len(tokenized[v].prefix_ids)
        for b in range(shape[0]):
            base = p + int(sent_len[b, v])
            for k, i in enumerate(pre):
                index[b, v, i] = offset + k
            for k, j in enumerate(suf):
                index[b, v, base + j] = offset + len(pre) + k
    return index
