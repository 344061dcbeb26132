"""PromptBERT sup heads (head(h) - head(h_hat), denoised at test), the MLM-transform head, CoT-BERT's loss."""

from __future__ import annotations

import math

import pytest
import torch

from cselab.losses.cot_infonce import CoTInfoNCE
from cselab.model.heads import MLMTransformHead, build_head

ROWS = [
    {"sent0": "a man is playing a guitar", "sent1": "a man plays", "hard_neg": "a cat sat"},
    {"sent0": "the dog ran to the park", "sent1": "a dog runs", "hard_neg": "nobody is running"},
    {"sent0": "a woman is slicing an onion", "sent1": "someone cuts", "hard_neg": "the man is sleeping"},
]


@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_sup_promptbert_each_head_and_eval_denoising(make_method, family):
    head = "mlm_transform" if family == "bert" else "mlp"
    head_on = "each" if family == "bert" else "difference"
    m = make_method("promptbert", family, pooler="mask", denoise="position", prompt="promptbert", setting="sup",
                    head=head, head_on=head_on, mlp_only_train=False, denoise_at_eval=True)
    m.eval()
    batch = m.train_collate()(ROWS)
    assert batch["input_ids"].shape[1] == 3 and "bias_input_ids" in batch
    with torch.no_grad():
        h, bias = m.model.forward_views(batch)
        z = m.embed(batch)
    expected = m.head(h) - m.head(bias) if head_on == "each" else m.head(h - bias)
    torch.testing.assert_close(z, expected)
    if head_on == "each":  # the nonlinear head makes the two orders genuinely different
        assert not torch.allclose(z, m.head(h - bias), atol=1e-4)
    # at test: view 1 template, WITH the bias (official sup), head applied
    eval_batch = m.eval_collate(["a man is playing a guitar", "a dog runs"])
    assert "bias_input_ids" in eval_batch
    emb = m.encode(["a man is playing a guitar", "a dog runs"])
    with torch.no_grad():
        torch.testing.assert_close(emb, m.embed(eval_batch)[:, 0], atol=1e-5, rtol=1e-5)


def test_unsup_promptbert_tests_without_bias(make_method):
    m = make_method("promptbert", "bert", pooler="mask", denoise="position", prompt="promptbert")
    assert "bias_input_ids" not in m.eval_collate(["a man is playing"])
    assert "bias_input_ids" in m.train_collate()(["a man is playing", "a dog runs"])


def test_denoise_at_eval_needs_denoising(make_method):
    with pytest.raises(ValueError, match="denoise_at_eval"):
        make_method("promptbert", "bert", pooler="mask", denoise="none", prompt="promptbert", denoise_at_eval=True)


def test_mlm_transform_head_is_dense_gelu_layernorm():
    torch.manual_seed(0)
    head = build_head("mlm_transform", 8)
    assert isinstance(head, MLMTransformHead)
    x = torch.randn(4, 8)
    y = torch.nn.functional.gelu(x @ head.dense.weight.T + head.dense.bias)
    y = (y - y.mean(-1, keepdim=True)) / torch.sqrt(y.var(-1, unbiased=False, keepdim=True) + 1e-12)
    torch.testing.assert_close(head(x), y, atol=1e-5, rtol=1e-5)


def _cot_reference(z: torch.Tensor, tau: float, pn_term: bool, negatives: bool) -> float:
    """l_i = -log a(i,i+) / sum_j [a(i,j+) + a(i,j-) + a(i+,j-)], with explicit loops."""
    def a(u, v):
        return math.exp(torch.nn.functional.cosine_similarity(u, v, dim=0).item() / tau)

    b = z.shape[0]
    total = 0.0
    for i in range(b):
        denom = 0.0
        for j in range(b):
            denom += a(z[i, 0], z[j, 1])
            if negatives:
                denom += a(z[i, 0], z[j, 2])
                if pn_term:
                    denom += a(z[i, 1], z[j, 2])
        total += -math.log(a(z[i, 0], z[i, 1]) / denom)
    return total / b


@pytest.mark.parametrize("pn_term, negatives", [(True, True), (False, True), (True, False)])
def test_cot_infonce_matches_its_equation(pn_term, negatives):
    torch.manual_seed(1)
    z = torch.randn(5, 3, 16, dtype=torch.float64)
    loss = CoTInfoNCE(0.05, positive_negative_term=pn_term, use_negatives=negatives)(z)
    assert loss.item() == pytest.approx(_cot_reference(z, 0.05, pn_term, negatives), rel=1e-5)


def test_cot_infonce_switches_change_the_loss_and_errors():
    torch.manual_seed(2)
    z = torch.randn(4, 3, 8)
    full = CoTInfoNCE()(z)
    assert not torch.isclose(full, CoTInfoNCE(positive_negative_term=False)(z))
    with pytest.raises(ValueError, match="temperature"):
        CoTInfoNCE(temperature=0)
    with pytest.raises(ValueError, match=r"\(B, 3, D\)"):
        CoTInfoNCE()(z[:, :2])
    with pytest.raises(ValueError, match="at least 2"):
        CoTInfoNCE()(z[:1])


def test_cot_bert_method_trains_on_three_templates_with_pad_denoising(make_method):
    prompt = {
        "name": "cot_bert",
        "templates": {"bert": {
            "anchor": 'The sentence of "[X]" means [MASK] , so it can be summarized as [MASK] .',
            "positive": 'The sentence : "[X]" means [MASK] , so it can be summarized as [MASK] .',
            "negative": 'The sentence : "[X]" does not mean [MASK] , so it cannot be summarized as [MASK] .',
        }},
        "train_views": ["anchor", "positive", "negative"],
        "eval_view": "anchor",
        "mask_index": -1,
        "add_period_at_eval": True,
    }
    m = make_method("cot_bert", "bert", pooler="mask", denoise="pad", prompt=prompt,
                    loss={"name": "cot_infonce", "temperature": 0.05})
    batch = m.train_collate()(["a man is playing a guitar", "the dog ran to the park"])
    assert batch["input_ids"].shape[1] == 3
    # the representation is the LAST [MASK] of each view
    mask_id = m.tokenizer.mask_token_id
    ids = batch["input_ids"]
    for b in range(ids.shape[0]):
        for v in range(3):
            last_mask = max(i for i, t in enumerate(ids[b, v].tolist()) if t == mask_id)
            assert batch["rep_index"][b, v] == last_mask
    loss = m.training_step(batch, 0)
    assert torch.isfinite(loss)
    with pytest.raises(ValueError, match="unsupervised only"):
        make_method("cot_bert", "bert", pooler="mask", denoise="pad", prompt=prompt, setting="sup")
