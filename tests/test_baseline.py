"""Non-fine-tuned representations through the Baseline method (PromptBERT Table 5 / Table 9)."""

from __future__ import annotations

import copy

import pytest
import torch

from cselab.analysis import static_avg_encoder, topk_token_encoder
from cselab.methods import method_class
from tests.conftest import PROMPTBERT_PROMPT

SENTS = ["a man is playing a guitar", "the dog ran to the park", "A Woman is slicing an onion ."]


@pytest.mark.parametrize("pooler, debiased", [("static_avg", False), ("static_avg_debiased", True)])
def test_static_representations(make_method, pooler, debiased):
    m = make_method("baseline", "bert", pooler=pooler, head="none")
    ref = static_avg_encoder(m.encoder, m.tokenizer, remove_biased=debiased, lowercase=debiased)(SENTS)
    torch.testing.assert_close(m.encode(SENTS), ref)
    assert m.hparams.pooler == pooler


def test_topk_representation_with_and_without_denoising(tiny_mlm_dir):
    prompt = copy.deepcopy(PROMPTBERT_PROMPT)
    backbone = {"name_or_path": str(tiny_mlm_dir), "family": "bert"}
    model = {"pooler": "topk", "head": "none", "prompt": prompt}
    plain = method_class("baseline")(backbone=backbone, model=model, topk=5, mlm=None)  # as the pipeline passes it
    denoised = method_class("baseline")(backbone=backbone, model=model, topk=5, topk_denoise=True)
    tpl = prompt["templates"]["bert"]["view1"]
    ref = topk_token_encoder(plain.encoder, plain.tokenizer, template=tpl, k=5, denoise=False)(SENTS)
    out = plain.encode(SENTS)
    torch.testing.assert_close(out, ref)
    assert out.shape == (3, plain.encoder.hidden_size)
    assert not torch.allclose(out, denoised.encode(SENTS))


def test_topk_needs_a_prompt_and_an_mlm_head(make_method, tiny_bert_dir):
    with pytest.raises(ValueError, match="choose a prompt"):
        make_method("baseline", "bert", pooler="topk", head="none")
    from cselab.model.loading import BackboneUnavailableError

    with pytest.raises(BackboneUnavailableError, match="no masked-LM head"):
        make_method("baseline", "bert", pooler="topk", head="none", prompt="promptbert")
