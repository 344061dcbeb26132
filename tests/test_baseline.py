"""Non-fine-tuned representations through the Baseline method (PromptBERT Table 5 / Table 9)."""

from __future__ import annotations

import copy

import pytest
import torch

from cselab.methods.registry import method_class
from cselab.representations.static import static_avg_encoder
from cselab.representations.topk import topk_token_encoder
from tests.conftest import PROMPTBERT_PROMPT

SENTS = ["a man is playing a guitar", "the dog ran to the park", "A Woman is slicing an onion ."]


@pytest.mark.parametrize("pooler, debiased", [("static_avg", False), ("static_avg_debiased", True)])
def test_static_representations(make_method, pooler, debiased):
    m = make_method("baseline", "bert", pooler=pooler, head="none")
    ref = static_avg_encoder(m.encoder, m.tokenizer, remove_biased=debiased, lowercase=debiased)(SENTS)
    torch.testing.assert_close(m.encode(SENTS), ref)
    assert m.describe()["pooler"] == pooler and m.describe()["representation"] == "token"


def test_topk_representation_with_and_without_denoising(tiny_mlm_dir):
    prompt = copy.deepcopy(PROMPTBERT_PROMPT)
    backbone = {"name_or_path": str(tiny_mlm_dir), "family": "bert"}
    model = {"pooler": "topk", "head": "none", "prompt": prompt}
    plain = method_class("baseline")(backbone=backbone, model=model, options={"topk": 5}, mlm=None)  # as the pipeline passes it
    denoised = method_class("baseline")(backbone=backbone, model=model, options={"topk": 5, "topk_denoise": True})
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


def test_analysis_mask_equals_the_baseline_mask_method(tiny_bert_dir):
    """``cselab analysis --pooler mask`` (the manual template) is ``method=baseline method.pooler=mask
    prompt=promptbert_manual``: the same embedding model (``mask_model``), the same numbers."""
    from pathlib import Path

    from hydra import compose, initialize_config_dir

    import cselab.io.config  # noqa: F401  (resolvers)
    from cselab.analysis.representations import make_encode_fn
    from cselab.model.loading import load_backbone
    from tests.conftest import build_method

    conf = str(Path(__file__).resolve().parents[1] / "conf")
    with initialize_config_dir(config_dir=conf, version_base="1.3"):
        cfg = compose("config", overrides=["method=baseline", "method.pooler=mask", "prompt=promptbert_manual",
                                           "backbone=bert_base", f"backbone.name_or_path={tiny_bert_dir}"])
    method = build_method(cfg)
    encoder, tokenizer = load_backbone(str(tiny_bert_dir), "bert")
    sentences = [*SENTS, "a man is playing a guitar", "birds fly?"]
    analysis = make_encode_fn(encoder, tokenizer, "mask", batch_size=2)(sentences)
    torch.testing.assert_close(analysis, method.encode(sentences), rtol=0, atol=1e-6)
