"""Poolers: from encoder outputs to one vector per sentence, with SimCSE's names.

Source: SimCSE ``evaluation.py`` / ``models.py`` (``cls``, ``cls_before_pooler``, ``avg``, ``avg_first_last``,
``avg_top2``) and PromptBERT (the template ``[MASK]`` representation, here ``mask``).

* ``cls``: the backbone's own pooler output (dense + tanh on [CLS]).  A trained method with an MLP head
  implements SimCSE's ``cls`` as ``cls_before_pooler`` followed by that head (see the methods).
* ``cls_before_pooler``: last-layer [CLS] state.
* ``avg``: mean of the last layer over attended tokens.
* ``avg_first_last``: mean over attended tokens of (first transformer layer + last layer) / 2 -- SimCSE since
  Jan 2022 (``hidden_states[1]``).  ``avg_first_last_legacy`` uses the embedding layer (``hidden_states[0]``)
  as SimCSE did before, which is what the papers' 56.70 bert-base baseline used.
* ``avg_top2``: mean of the last two layers.
* ``mask``: the last-layer state at ``rep_index`` (the template's representation [MASK]).
* ``last_token``: a decoder's state at the LAST attended token of each row (PromptEOL: the token that predicts
  the one word, kongds/scaling_sentemb ``evaluation.py:223`` ``hidden_states[-1][:, -1, :]`` on left-padded
  rows); ``layer`` picks the hidden state (-1: the last layer after the final norm; -2: the output of the
  penultimate entry, before the final norm, as PretCoT / KE read it, ZBWpro/PretCoTandKE ``evaluation.py:266-267``).
"""

from __future__ import annotations

import torch

POOLERS = ("cls", "cls_before_pooler", "avg", "avg_first_last", "avg_first_last_legacy", "avg_top2", "mask",
           "last_token")
_NEEDS_HIDDEN = {"avg_first_last", "avg_first_last_legacy", "avg_top2"}


def needs_hidden_states(pooler: str, layer: int = -1) -> bool:
    """Whether ``pooler`` reads intermediate layers (ask the encoder for ``output_hidden_states``)."""
    return pooler in _NEEDS_HIDDEN or (pooler == "last_token" and layer != -1)


def _masked_mean(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * mask).sum(1) / mask.sum(1)


def pool(
    pooler: str,
    outputs,
    attention_mask: torch.Tensor,
    rep_index: torch.Tensor | None = None,
    layer: int = -1,
) -> torch.Tensor:
    """Pool encoder outputs into (N, D).

    Args:
        pooler: one of :data:`POOLERS`.
        outputs: Hugging Face encoder output (``last_hidden_state`` (N, T, D); ``hidden_states`` when needed;
            ``pooler_output`` (N, D) for ``cls``).
        attention_mask: (N, T), 1 on real tokens.
        rep_index: (N,) long, position of the representation token (``mask`` pooler).
        layer: ``last_token``: the entry of ``hidden_states`` to read (-1: ``last_hidden_state``).

    Raises:
        ValueError: unknown pooler, ``cls`` on a model without a pooler layer, ``mask`` without rep_index,
            or a layer pooler without hidden states (``last_token`` with ``layer`` != -1 included).
    """
    last = outputs.last_hidden_state
    if pooler == "cls":
        if getattr(outputs, "pooler_output", None) is None:
            raise ValueError("pooler=cls needs the backbone's pooler layer; this model has none "
                             "(use pooler=cls_before_pooler)")
        return outputs.pooler_output
    if pooler == "cls_before_pooler":
        return last[:, 0]
    if pooler == "avg":
        return _masked_mean(last, attention_mask)
    if pooler == "mask":
        if rep_index is None:
            raise ValueError("pooler=mask needs the template's [MASK] positions (rep_index)")
        return last[torch.arange(last.shape[0], device=last.device), rep_index]
    if pooler not in POOLERS:
        raise ValueError(f"pooler={pooler!r}: expected one of {POOLERS}")
    hs = getattr(outputs, "hidden_states", None)
    if hs is None and needs_hidden_states(pooler, layer):
        where = f" at layer {layer}" if pooler == "last_token" else ""
        raise ValueError(f"pooler={pooler}{where} needs output_hidden_states=True")
    if pooler == "last_token":  # each row's last attended token, for left or right padding alike
        last = last if layer == -1 else hs[layer]
        positions = torch.arange(attention_mask.shape[1], device=attention_mask.device).expand_as(attention_mask)
        index = torch.where(attention_mask.bool(), positions, torch.full_like(positions, -1)).max(dim=1).values
        return last[torch.arange(last.shape[0], device=last.device), index]
    if pooler == "avg_top2":
        return _masked_mean((hs[-1] + hs[-2]) / 2.0, attention_mask)
    first = hs[1] if pooler == "avg_first_last" else hs[0]  # avg_first_last(_legacy)
    return _masked_mean((first + hs[-1]) / 2.0, attention_mask)
