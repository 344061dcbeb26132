"""Every trainable parameter of every method, as ``run.py`` builds it, gets a gradient from one training step.

This is what lets ``trainer=ddp`` use plain ``ddp`` (no per-step search for unused parameters): DDP fails at
the second step on a trainable parameter that took no part in the loss.  Layers a method never uses (the
backbone's pooler unless ``method.pooler=cls`` without a head, the MLM head's layers without ``method.mlm``) must be
frozen by the method.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir

import cselab.io.config  # noqa: F401  (resolvers)
from tests.conftest import build_method

CONF = str(Path(__file__).resolve().parents[1] / "conf")
SENTENCES = ["a man is playing a guitar", "the cat sat on the mat", "two dogs are running in the park",
             "it is raining today"]
TRIPLETS = [{"sent0": s, "sent1": s + " today", "hard_neg": "birds fly"} for s in SENTENCES]
CASES = [
    ("simcse", "unsup", []), ("simcse", "sup", []), ("simcse", "unsup", ["method.pooler=cls", "method.head=none"]),
    ("promptbert", "unsup", []), ("promptbert", "sup", []), ("cot_bert", "unsup", []),
    ("dcpcse", "unsup", []), ("dcpcse", "unsup", ["method.mlm=${method.mlm_config}"]), ("promcse", "sup", []),
    ("promcse", "sup", ["loss=infonce_eh"]), ("scpcse", "unsup", []), ("optiprompt", "unsup", []),
    ("promcse", "sup", ["tuning.variant=input_layer"]),
]


def _method_and_batch(method: str, setting: str, extra: list[str], mlm_dir):
    """The method as ``run.py`` builds it on the tiny MLM BERT, in train mode, and one training batch."""
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        cfg = compose("config", overrides=[
            f"method={method}", f"setting={setting}", f"backbone.name_or_path={mlm_dir}",
            "backbone.family=bert", *extra,
        ])
    model = build_method(cfg)
    model.train()
    rows = TRIPLETS if setting == "sup" else [{"text": s} for s in SENTENCES]
    return model, model.train_collate()(rows)


@pytest.mark.parametrize(("method", "setting", "extra"), CASES, ids=lambda v: str(v))
def test_every_trainable_parameter_gets_a_gradient(method, setting, extra, tiny_mlm_dir):
    model, batch = _method_and_batch(method, setting, extra, tiny_mlm_dir)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # self.log() without a Trainer
        loss = model.training_step(batch, 0)
    loss.backward()
    trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    assert trainable
    missing = [n for n, p in trainable if p.grad is None]
    assert not missing, f"{method}/{setting} {extra}: trainable but unused in the loss: {missing}"


@pytest.mark.parametrize(("method", "setting", "extra"), CASES, ids=lambda v: str(v))
def test_bf16_autocast_step_matches_float32(method, setting, extra, tiny_mlm_dir):
    """The GPU training precision (bf16-mixed autocast) on CPU: the loss is float32 and close to the float32
    loss of the same batch and dropout masks, and every trainable gradient is finite."""
    model, batch = _method_and_batch(method, setting, extra, tiny_mlm_dir)
    losses = {}
    for precision in ("32", "bf16"):
        model.zero_grad(set_to_none=True)
        torch.manual_seed(0)  # the same dropout masks in both passes
        with warnings.catch_warnings(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            warnings.simplefilter("ignore")
            loss = model.training_step(batch, 0)
        loss.backward()
        losses[precision] = loss
    assert losses["bf16"].dtype == torch.float32
    assert torch.isfinite(losses["bf16"])
    assert losses["bf16"].item() == pytest.approx(losses["32"].item(), rel=0.05, abs=0.05)
    bad = [n for n, p in model.named_parameters() if p.requires_grad and not torch.isfinite(p.grad).all()]
    assert not bad, f"non-finite bf16 gradients: {bad}"


@pytest.mark.parametrize(("method", "setting", "extra"), CASES, ids=lambda v: str(v))
def test_activation_checkpointing_gives_the_same_loss_and_gradients(method, setting, extra, tiny_mlm_dir):
    """``activation_checkpointing=true`` recomputes each layer in the backward pass with the forward's RNG state
    (so the same dropout masks): loss and every trainable gradient equal those without it."""
    model, batch = _method_and_batch(method, setting, extra, tiny_mlm_dir)

    def step() -> tuple[float, dict[str, torch.Tensor]]:
        model.zero_grad(set_to_none=True)
        torch.manual_seed(0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            loss = model.training_step(batch, 0)
        loss.backward()
        return loss.item(), {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}

    loss_plain, grads_plain = step()
    if model.encoder.tuning == "prefix" and model.encoder.prefix_variant != "input_layer":
        with pytest.raises(ValueError, match="activation_checkpointing=true with tuning=prefix"):
            model.encoder.enable_activation_checkpointing()
        return
    model.encoder.enable_activation_checkpointing()
    base = model.encoder.model.get_base_model() if hasattr(model.encoder.model, "get_base_model") else \
        model.encoder.model
    assert base.is_activation_checkpointing
    loss_ckpt, grads_ckpt = step()
    assert loss_ckpt == pytest.approx(loss_plain, rel=1e-6)
    assert grads_ckpt.keys() == grads_plain.keys()
    for name, grad in grads_plain.items():
        torch.testing.assert_close(grads_ckpt[name], grad, rtol=1e-5, atol=1e-6, msg=name)
