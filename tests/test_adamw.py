"""``optim.adamw``: the official code's AdamW update (transformers 4.2.1's ``AdamW``, the optimizer of the ``Trainer``
that SimCSE, PromptBERT, CoT-BERT, DCPCSE and PromCSE train with) against a transcription of its ``step``, with
torch's fused and for-loop kernels; torch's own update kept as ``optim.adamw=torch``; a saved state continued."""

from __future__ import annotations

import math

import pytest
import torch

from cselab.callbacks.run_config import config_changes
from cselab.methods.checks import ConfigError, check_training
from cselab.methods.optim import TransformersAdamW

LR, STEPS, TOTAL = 2e-3, 6, 8


class Transformers421AdamW:
    """transformers 4.2.1 ``optimization.py:309-366`` (``AdamW.step``, ``correct_bias=True``), line by line, for a
    list of float64 tensors: the reference the tests hold cselab's optimizer to."""

    def __init__(self, params, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
        self.params, self.lr, self.betas, self.eps, self.weight_decay = params, lr, betas, eps, weight_decay
        self.state = [{"step": 0, "exp_avg": torch.zeros_like(p), "exp_avg_sq": torch.zeros_like(p)} for p in params]

    def step(self, grads, lr) -> None:
        for p, grad, state in zip(self.params, grads, self.state, strict=True):
            exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
            beta1, beta2 = self.betas
            state["step"] += 1
            exp_avg.mul_(beta1).add_(grad, alpha=1.0 - beta1)
            exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1.0 - beta2)
            denom = exp_avg_sq.sqrt().add_(self.eps)
            bias_correction1 = 1.0 - beta1 ** state["step"]
            bias_correction2 = 1.0 - beta2 ** state["step"]
            step_size = lr * math.sqrt(bias_correction2) / bias_correction1
            p.addcdiv_(exp_avg, denom, value=-step_size)
            if self.weight_decay > 0.0:
                p.add_(p, alpha=-lr * self.weight_decay)


def _problem(seed: int = 0):
    """Parameters and STEPS gradients per parameter, float64: ordinary gradients (1e-2), small ones (1e-6, where
    the epsilon's place matters most) and an entry without gradient (0: no update in either)."""
    gen = torch.Generator().manual_seed(seed)
    params = [torch.randn(5, 3, generator=gen, dtype=torch.float64), torch.randn(7, generator=gen, dtype=torch.float64)]
    grads = []
    for _ in range(STEPS):
        big = torch.randn(5, 3, generator=gen, dtype=torch.float64) * 1e-2
        small = torch.randn(7, generator=gen, dtype=torch.float64) * 1e-6
        small[0] = 0.0
        grads.append([big, small])
    return params, grads


def _train(optimizer_cls, params, grads, steps=range(STEPS), state=None, **kwargs):
    """``optimizer_cls`` over copies of ``params`` with the linear schedule, as configure_adamw builds it."""
    from transformers import get_linear_schedule_with_warmup

    weights = [torch.nn.Parameter(p.clone()) for p in params]
    optimizer = optimizer_cls(weights, lr=LR, eps=1e-8, **kwargs)
    scheduler = get_linear_schedule_with_warmup(optimizer, 0, TOTAL)
    if state is not None:
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
    for t in steps:
        for w, g in zip(weights, grads[t], strict=True):
            w.grad = g.clone()
        optimizer.step()
        scheduler.step()
    return weights, {"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict()}


def _reference(params, grads, steps=STEPS, weight_decay=0.0):
    weights = [p.clone() for p in params]
    reference = Transformers421AdamW(weights, LR, weight_decay=weight_decay)
    for t in range(steps):
        reference.step(grads[t], LR * (TOTAL - t) / TOTAL)  # get_linear_schedule_with_warmup, no warm-up
    return weights


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "for_loop"])
def test_the_update_is_transformers_4_2_1_adamw(fused) -> None:
    params, grads = _problem()
    expected = _reference(params, grads)
    got, _ = _train(TransformersAdamW, params, grads, fused=fused)
    for w, e in zip(got, expected, strict=True):
        torch.testing.assert_close(w.detach(), e, rtol=1e-12, atol=1e-15)
    # torch's own update differs where the gradients are small (its epsilon is sqrt(1 - beta2^t) times smaller)
    plain, _ = _train(torch.optim.AdamW, params, grads, fused=fused)
    moved_ref, moved_torch = (expected[1] - params[1])[1:], (plain[1].detach() - params[1])[1:]
    assert ((moved_torch - moved_ref).abs() / moved_ref.abs()).max() > 1e-3
    assert torch.equal(got[1].detach()[0], params[1][0])  # no gradient, no move


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "for_loop"])
def test_weight_decay_is_applied_after_the_update_as_transformers(fused) -> None:
    """transformers 4.2.1 decays the updated weights (``p <- p - lr * wd * p`` after ``addcdiv_``); torch decays
    before the update.  With ``optim.weight_decay`` 0.1, cselab's optimizer follows transformers to 1e-12 over 6
    steps; torch's own kernel differs by ``lr * wd`` times the update (> 1e-9 here); the group keeps its decay."""
    params, grads = _problem(2)
    expected = _reference(params, grads, weight_decay=0.1)
    got, state = _train(TransformersAdamW, params, grads, fused=fused, weight_decay=0.1)
    for w, e in zip(got, expected, strict=True):
        torch.testing.assert_close(w.detach(), e, rtol=1e-12, atol=1e-15)
    assert state["optimizer"]["param_groups"][0]["weight_decay"] == 0.1
    before, _ = _train(TransformersAdamW, params, grads, fused=fused, weight_decay=0.0)
    decayed = [(g.detach() - b.detach()).abs().max() for g, b in zip(got, before, strict=True)]
    assert min(decayed) > 1e-6  # the decay moved every weight
    torch_first = torch.optim.AdamW([torch.nn.Parameter(p.clone()) for p in params], lr=LR, weight_decay=0.1,
                                    fused=fused)
    for w, g in zip(torch_first.param_groups[0]["params"], grads[0], strict=True):
        w.grad = g.clone()
    torch_first.step()
    one_step = _reference(params, grads, steps=1, weight_decay=0.1)
    diff = max(float((w.detach() - e).abs().max())
               for w, e in zip(torch_first.param_groups[0]["params"], one_step, strict=True))
    assert diff > 1e-9, diff  # torch's order, with its own epsilon too (the first test)


def test_a_step_skipped_on_the_device_skips_the_decay_too() -> None:
    """``nonfinite.policy=skip`` with the fused kernel: a step whose ``found_inf`` is 1 changes no weight (the
    update and the decay skipped on the device); the next step, with ``found_inf`` 0, updates and decays."""
    params, grads = _problem(3)
    weights = [torch.nn.Parameter(p.clone()) for p in params]
    optimizer = TransformersAdamW(weights, lr=LR, eps=1e-8, weight_decay=0.1, fused=True)
    optimizer.found_inf = torch.ones((), dtype=torch.float32)
    for w, g in zip(weights, grads[0], strict=True):
        w.grad = g.clone()
    optimizer.step()
    for w, p in zip(weights, params, strict=True):
        assert torch.equal(w.detach(), p)
    optimizer.found_inf.zero_()
    optimizer.step()
    assert all(not torch.equal(w.detach(), p) for w, p in zip(weights, params, strict=True))


def test_a_saved_state_continues_as_one_uninterrupted_run() -> None:
    """The step count that the epsilon needs is saved with the optimizer's state (a checkpoint), and a state saved by
    ``torch.optim.AdamW`` (``optim.adamw=torch``, or a checkpoint of an older cselab) is continued from the count
    of its own state."""
    params, grads = _problem(1)
    whole, _ = _train(TransformersAdamW, params, grads)
    first, state = _train(TransformersAdamW, params, grads, steps=range(3))
    assert [g["transformers_steps"] for g in state["optimizer"]["param_groups"]] == [3]
    resumed, _ = _train(TransformersAdamW, [w.detach() for w in first], grads, steps=range(3, STEPS), state=state)
    for a, b in zip(resumed, whole, strict=True):
        torch.testing.assert_close(a.detach(), b.detach(), rtol=1e-13, atol=1e-16)
    # from torch's state: its first steps torch's, the rest transformers' with the step count read from the state
    torch_first, torch_state = _train(torch.optim.AdamW, params, grads, steps=range(3))
    assert "transformers_steps" not in torch_state["optimizer"]["param_groups"][0]
    continued, state = _train(TransformersAdamW, [w.detach() for w in torch_first], grads, steps=range(3, STEPS),
                              state=torch_state)
    assert state["optimizer"]["param_groups"][0]["transformers_steps"] == STEPS
    eps_t = 1e-8 / math.sqrt(1 - 0.999 ** STEPS)  # the last step's epsilon, counted from torch's state
    assert state["optimizer"]["param_groups"][0]["eps"] == pytest.approx(eps_t, rel=1e-12)
    assert all(torch.isfinite(w).all() for w in continued)


def test_the_key_is_checked_and_an_old_run_resumes_only_with_torch() -> None:
    """``optim.adamw`` is one of transformers / torch (named when not); a run saved before the key existed trained
    with torch's update: the same command now (transformers) is a change, ``optim.adamw=torch`` is none."""
    with pytest.raises(ConfigError, match=r"optim.adamw='adam': expected one of transformers, torch"):
        check_training(None, {"lr": 1e-5, "adamw": "adam"}, train=True)
    check_training(None, {"lr": 1e-5, "adamw": "torch"}, train=True)
    saved = {"optim": {"lr": 3e-5, "fused": "auto"}}
    now = {"optim": {"lr": 3e-5, "fused": "auto", "adamw": "transformers"}}
    assert config_changes(saved, now) == [("optim.adamw", "(absent)", "transformers")]
    assert config_changes(saved, {"optim": {**now["optim"], "adamw": "torch"}}) == []
    assert config_changes(now, {"optim": {**now["optim"], "adamw": "torch"}}) == [
        ("optim.adamw", "transformers", "torch")]


def test_a_run_trains_with_the_transformers_update_by_default(make_method, tmp_path) -> None:
    """``configure_optimizers`` builds :class:`TransformersAdamW` unless ``optim.adamw=torch``; the fit steps it."""
    from tests.test_fused_adamw import _fit

    for update, cls in (("transformers", TransformersAdamW), ("torch", torch.optim.AdamW)):
        method = make_method("simcse", "bert", pooler="cls", lr=1e-5)
        if update == "torch":
            method.optim["adamw"] = "torch"  # optim.adamw=torch
        _fit(method, tmp_path / update, 2)
        optimizer = method.trainer.optimizers[0]
        assert type(optimizer) is cls, update
        assert optimizer.param_groups[0].get("transformers_steps", 2) == 2


def test_weight_decay_spares_biases_and_layernorm_weights_as_the_hf_trainer(make_method, tmp_path) -> None:
    """transformers 4.2.1 ``trainer.py:553-562``: a parameter whose name contains ``bias`` or ``LayerNorm.weight``
    is not decayed; the others decay by ``optim.weight_decay`` (and with 0, one group as before)."""
    from tests.test_fused_adamw import _fit

    method = make_method("simcse", "bert", pooler="cls", lr=1e-5, weight_decay=0.01)
    _fit(method, tmp_path / "wd", 1)
    names = {id(p): n for n, p in method.named_parameters()}
    groups = method.trainer.optimizers[0].param_groups
    assert [(g["weight_decay"], bool(g.get("no_decay"))) for g in groups] == [(0.01, False), (0.0, True)]
    spared = {names[id(p)] for p in groups[1]["params"]}
    expected = {n for n, p in method.named_parameters() if p.requires_grad and (
        n.endswith(".bias") or n.endswith("LayerNorm.weight"))}
    assert spared == expected and any("LayerNorm.weight" in n for n in spared) and any("bias" in n for n in spared)
    assert not any(n.endswith(".bias") or "LayerNorm" in n for n in (names[id(p)] for p in groups[0]["params"]))
    plain = make_method("simcse", "bert", pooler="cls", lr=1e-5)
    _fit(plain, tmp_path / "no_wd", 1)
    assert len(plain.trainer.optimizers[0].param_groups) == 1
