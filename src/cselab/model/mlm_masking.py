"""The masked-LM inputs of a batch (the MLM auxiliary loss, DCPCSE's ``method.mlm``): BERT's masking of the
eligible tokens, seeded by the batch itself.

BERT / SimCSE ``mask_tokens`` (DCPCSE ``train.py:538-552``): a ``probability`` fraction of the eligible tokens is
selected; of those 80 % become [MASK], then ``bernoulli(0.5)`` of the rest a random token (10 %), the other 10 %
stay.  The generator is seeded by the run's seed and the CRC-32 of the batch's token ids, so a batch gets the same
masks in whichever DataLoader worker or process it is collated, and in a run resumed mid-epoch.
"""

from __future__ import annotations

import zlib

import torch


def mask_tokens(input_ids: torch.Tensor, eligible: torch.Tensor, probability: float, seed: int,
                mask_token_id: int, vocab_size: int) -> dict[str, torch.Tensor]:
    """``mlm_input_ids`` (the masked copy of ``input_ids``) and ``mlm_labels`` (the original id where a token was
    selected, -100 elsewhere), both of ``input_ids``' shape (e.g. (B, V, T)); ``eligible`` (same shape, bool):
    the tokens that may be selected (the sentence's own, never template or special tokens); random tokens are
    drawn from ``[0, vocab_size)``."""
    # CPU generators keep 32 bits of a seed (mt19937): the CRC-32 of the batch, started from the seed's CRC
    gen_seed = zlib.crc32(input_ids.contiguous().numpy().tobytes(), zlib.crc32(str(seed).encode()))
    gen = torch.Generator().manual_seed(gen_seed)
    prob = torch.full(input_ids.shape, probability) * eligible
    selected = torch.bernoulli(prob, generator=gen).bool()
    labels = torch.where(selected, input_ids, torch.full_like(input_ids, -100))
    masked = input_ids.clone()
    replace = torch.bernoulli(torch.full(input_ids.shape, 0.8), generator=gen).bool() & selected
    masked[replace] = mask_token_id
    random = torch.bernoulli(torch.full(input_ids.shape, 0.5), generator=gen).bool() & selected & ~replace
    tokens = torch.randint(vocab_size, input_ids.shape, dtype=torch.long, generator=gen)
    masked[random] = tokens[random]
    return {"mlm_input_ids": masked, "mlm_labels": labels}
