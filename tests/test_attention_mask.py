"""The 4D SDPA mask built on the device (:mod:`cselab.model.attention_mask`) gives the numbers of Hugging Face's own
2D-mask path, for encoders (BERT, RoBERTa, with deep prefixes too) and the decoders that take it (OPT with its
positions, LLaMA, Qwen2), with padding and without; and building it reads nothing on the host."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from cselab.model.attention_mask import sdpa_mask_4d, takes_4d_mask
from cselab.model.loading import load_backbone


class _LocalScalars(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.__name__.startswith("_local_scalar_dense"):
            self.count += 1
        return func(*args, **(kwargs or {}))


def _outputs(encoder, ids, mask, use_4d: bool) -> torch.Tensor:
    encoder.mask_4d = use_4d and takes_4d_mask(encoder.base_model.config, encoder.is_decoder)
    with torch.no_grad():
        return encoder(ids, mask).last_hidden_state


def _batch(tokenizer, texts, left: bool = False):
    tokenizer.padding_side = "left" if left else "right"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    enc = tokenizer(texts, return_tensors="pt", padding=True)
    return enc["input_ids"], enc["attention_mask"]


@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_encoders_give_the_same_states(family, backbone_dirs) -> None:
    encoder, tokenizer = load_backbone(str(backbone_dirs[family]), family)
    encoder = encoder.double().eval()
    assert encoder.mask_4d
    for texts in (["a man is playing a guitar", "birds fly"], ["the cat sat", "a dog ran"]):  # padded / not
        ids, mask = _batch(tokenizer, texts)
        two_d, four_d = _outputs(encoder, ids, mask, False), _outputs(encoder, ids, mask, True)
        real = mask.bool()
        torch.testing.assert_close(four_d[real], two_d[real], rtol=1e-12, atol=1e-12)


def test_deep_prefixes_give_the_same_states(backbone_dirs) -> None:
    encoder, tokenizer = load_backbone(str(backbone_dirs["bert"]), "bert")
    encoder.add_prefix(4, variant="deep", dropout=0.0)
    encoder = encoder.double().eval()
    ids, mask = _batch(tokenizer, ["a man is playing a guitar", "birds fly"])
    torch.testing.assert_close(_outputs(encoder, ids, mask, True)[mask.bool()],
                               _outputs(encoder, ids, mask, False)[mask.bool()], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kind", ["opt", "llama", "qwen2"])
def test_decoders_give_the_same_states(kind, tiny_decoder_dirs) -> None:
    encoder, tokenizer = load_backbone(str(tiny_decoder_dirs[kind]), "decoder")
    encoder = encoder.double().eval()
    assert encoder.mask_4d
    ids, mask = _batch(tokenizer, ["a man is playing a guitar in the park", "birds fly"], left=True)
    real = mask.bool()
    torch.testing.assert_close(_outputs(encoder, ids, mask, True)[real], _outputs(encoder, ids, mask, False)[real],
                               rtol=1e-12, atol=1e-12)


def test_the_mask_itself_and_no_host_read() -> None:
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    bidirectional = sdpa_mask_4d(mask, 3, causal=False)
    assert bidirectional.shape == (2, 1, 3, 3) and bidirectional[0, 0].tolist() == [[True, True, False]] * 3
    causal = sdpa_mask_4d(torch.tensor([[0, 1, 1]]), 3, causal=True)
    assert causal[0, 0].tolist() == [[False, False, False], [False, True, False], [False, True, True]]
    prefixed = sdpa_mask_4d(torch.tensor([[1, 1, 1, 0]]), 2, causal=False)  # 2 prefix keys + 2 tokens
    assert prefixed.shape == (1, 1, 2, 4)
    with _LocalScalars() as probe:
        sdpa_mask_4d(mask, 3, causal=True)
    assert probe.count == 0
