"""``compile.enabled=true`` compiles the backbone in place: same outputs, same parameter names, bad backend refused."""

from __future__ import annotations

import pytest
import torch

from cselab.pipeline import ConfigError, compile_backbone


def test_compiled_backbone_gives_the_same_embeddings_and_keys(make_method) -> None:
    method = make_method("promptbert", "bert", pooler="mask", denoise="position", prompt="promptbert")
    sentences = ["a man is playing a guitar", "the cat sat on the mat", "birds fly"]
    before = method.encode(sentences)
    keys = list(method.state_dict())
    torch._dynamo.reset()
    compile_backbone(method, {"enabled": True, "backend": "eager", "dynamic": True, "mode": None})
    after = method.encode(sentences)
    assert torch.allclose(before, after, atol=1e-6)
    assert list(method.state_dict()) == keys  # checkpoints unchanged (no `_orig_mod.` prefix)
    method.train()
    loss = method.training_step(method.train_collate([{"text": s} for s in sentences]), 0)
    loss.backward()
    assert torch.isfinite(loss)


def test_disabled_does_nothing_and_unknown_backend_is_refused(make_method) -> None:
    method = make_method("simcse", "bert")
    compile_backbone(method, {"enabled": False, "backend": "nope"})
    with pytest.raises(ConfigError, match=r"compile.backend='nope': expected one of .*inductor"):
        compile_backbone(method, {"enabled": True, "backend": "nope"})
