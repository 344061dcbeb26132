"""Poolers on a tiny BERT output against manual computations."""

from __future__ import annotations

import pytest
import torch

from cselab.model.loading import load_backbone
from cselab.model.pooling import POOLERS, needs_hidden_states, pool


@pytest.fixture(scope="module")
def bert_outputs(tiny_bert_dir):
    encoder, tokenizer = load_backbone(str(tiny_bert_dir))
    encoder.eval()
    batch = tokenizer(["the cat sat on the mat", "birds fly", "a man is playing a guitar"], padding=True,
                      return_tensors="pt")
    mask = batch["attention_mask"]
    assert mask.sum(1).tolist() == [8, 4, 8] and mask.shape[1] == 8  # padding present in row 1
    with torch.no_grad():
        out = encoder(batch["input_ids"], mask, output_hidden_states=True)
    return encoder, out, mask


def manual_mean(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    rows = []
    for n in range(hidden.shape[0]):
        kept = [hidden[n, t] for t in range(hidden.shape[1]) if int(mask[n, t]) == 1]
        rows.append(torch.stack(kept).mean(0))
    return torch.stack(rows)


def test_avg(bert_outputs) -> None:
    _, out, mask = bert_outputs
    got = pool("avg", out, mask)
    torch.testing.assert_close(got, manual_mean(out.last_hidden_state, mask), atol=1e-6, rtol=0)
    # padding is really excluded
    assert not torch.allclose(got[1], out.last_hidden_state[1].mean(0), atol=1e-4)


def test_avg_first_last_uses_the_first_transformer_layer(bert_outputs) -> None:
    _, out, mask = bert_outputs
    hs = out.hidden_states
    assert len(hs) == 3  # embeddings + 2 layers
    expected = manual_mean((hs[1] + hs[-1]) / 2, mask)
    torch.testing.assert_close(pool("avg_first_last", out, mask), expected, atol=1e-6, rtol=0)


def test_avg_first_last_legacy_uses_the_embeddings(bert_outputs) -> None:
    _, out, mask = bert_outputs
    hs = out.hidden_states
    legacy = pool("avg_first_last_legacy", out, mask)
    torch.testing.assert_close(legacy, manual_mean((hs[0] + hs[-1]) / 2, mask), atol=1e-6, rtol=0)
    assert not torch.allclose(legacy, pool("avg_first_last", out, mask), atol=1e-4)


def test_avg_top2(bert_outputs) -> None:
    _, out, mask = bert_outputs
    hs = out.hidden_states
    torch.testing.assert_close(pool("avg_top2", out, mask), manual_mean((hs[-1] + hs[-2]) / 2, mask), atol=1e-6,
                               rtol=0)


def test_cls_before_pooler(bert_outputs) -> None:
    _, out, mask = bert_outputs
    torch.testing.assert_close(pool("cls_before_pooler", out, mask), out.last_hidden_state[:, 0], atol=0, rtol=0)


def test_cls_is_the_backbone_pooler_output(bert_outputs) -> None:
    encoder, out, mask = bert_outputs
    got = pool("cls", out, mask)
    torch.testing.assert_close(got, out.pooler_output, atol=0, rtol=0)
    with torch.no_grad():
        manual = torch.tanh(encoder.model.pooler.dense(out.last_hidden_state[:, 0]))
    torch.testing.assert_close(got, manual, atol=1e-6, rtol=0)
    assert not torch.allclose(got, out.last_hidden_state[:, 0], atol=1e-3)


def test_mask_gathers_rep_index(bert_outputs) -> None:
    _, out, mask = bert_outputs
    rep = torch.tensor([5, 2, 7])
    got = pool("mask", out, mask, rep)
    for n, t in enumerate(rep.tolist()):
        torch.testing.assert_close(got[n], out.last_hidden_state[n, t], atol=0, rtol=0)


def test_needs_hidden_states() -> None:
    assert {p for p in POOLERS if needs_hidden_states(p)} == {"avg_first_last", "avg_first_last_legacy", "avg_top2"}


def test_pooler_errors(bert_outputs, tiny_bert_dir) -> None:
    encoder, out, mask = bert_outputs
    with pytest.raises(ValueError, match="expected one of"):
        pool("max", out, mask)
    with pytest.raises(ValueError, match="rep_index"):
        pool("mask", out, mask)
    with torch.no_grad():
        bare = encoder(torch.tensor([[2, 10, 3]]), torch.ones(1, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="output_hidden_states"):
        pool("avg_top2", bare, torch.ones(1, 3, dtype=torch.long))


def test_unknown_pooler_refused_by_the_method(make_method) -> None:
    with pytest.raises(ValueError, match="method.pooler='max'"):
        make_method("simcse", "bert", pooler="max")
