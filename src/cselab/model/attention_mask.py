"""The attention mask handed to the backbone, prepared in 4D so that building it never reads the device.

Hugging Face's mask builders (``transformers/masking_utils.py``) check whether a 2D padding mask is all ones
(``_ignore_bidirectional_mask_sdpa``: ``padding_mask.all()``; ``_ignore_causal_mask_sdpa``: ``fast_all``) to call
SDPA without a mask; that check is a Python ``if`` on a device tensor, one host sync per backbone forward.  A 4D mask
is returned as it is (``_preprocess_mask_arguments``: "If the mask is already 4D, simply return as-is"), so we
build the boolean (N, 1, Q, K) mask that ``sdpa_mask`` builds when it does not skip (padding AND, for decoders,
causal), on the device, without the check.  The numbers are those of the materialised mask; SDPA without a mask
(the skip, only for batches without any padding) differs from it only in kernel choice (rounding).

Only for ``sdpa`` attention (the default of every backbone cselab names) and the model types whose forward uses
the 2D mask for nothing else: BERT / RoBERTa-like encoders, and the decoders of :data:`CAUSAL_4D_TYPES` (OPT,
whose positions come from the 2D mask, gets them from :func:`opt_positions`, its own formula).  Other attention
implementations and model types keep the 2D mask (and the check), as does ``tuning.variant=input_layer`` (PEFT's
prompt-tuning forward concatenates the 2D mask with the prompt's).
"""

from __future__ import annotations

import torch

#: decoder model types that take a prepared 4D causal mask (positions rotary, or OPT's from :func:`opt_positions`)
CAUSAL_4D_TYPES = ("opt", "llama", "mistral", "qwen2")


def takes_4d_mask(config, is_decoder: bool) -> bool:
    """True when a backbone with this Hugging Face ``config`` gets the prepared 4D mask: ``sdpa`` attention and an
    encoder, or a decoder of :data:`CAUSAL_4D_TYPES`."""
    if getattr(config, "_attn_implementation", None) != "sdpa":
        return False
    return not is_decoder or getattr(config, "model_type", None) in CAUSAL_4D_TYPES


def sdpa_mask_4d(mask: torch.Tensor, q_length: int, causal: bool) -> torch.Tensor:
    """The boolean SDPA mask (True = attend) of a 2D padding mask ``mask`` (N, K) (1 = token, 0 = padding) for
    ``q_length`` queries: (N, 1, Q, K), key ``k`` visible to query ``q`` when it is a token and, if ``causal``,
    ``k <= q + (K - Q)`` (the queries are the last Q positions: prefixes come first).  As ``sdpa_mask`` of
    ``transformers/masking_utils.py`` with ``padding_mask_function`` (and ``causal_mask_function``)."""
    n, k = mask.shape
    keys = mask.bool()[:, None, None, :]
    if not causal:
        return keys.expand(n, 1, q_length, k)
    q_pos = torch.arange(q_length, device=mask.device)[:, None] + (k - q_length)
    visible = torch.arange(k, device=mask.device)[None, :] <= q_pos
    return keys & visible[None, None]


def opt_positions(mask: torch.Tensor) -> torch.Tensor:
    """OPT's own position ids from its 2D mask (N, T): ``cumsum(mask) * mask - 1`` (``transformers/models/opt/
    modeling_opt.py``, ``OPTDecoder.forward``), which it can no longer compute from a 4D mask."""
    return (torch.cumsum(mask, dim=1) * mask - 1).long()
