"""``optim.fused`` and the non-finite policy decided on the device (:mod:`cselab.methods.nonfinite`): a NaN step is
not applied (the fused AdamW reads ``found_inf``), its flag is read at the next logging step, where ``skip`` counts it
and ``stop`` raises naming it; gradient clipping still applies with a fused AdamW under bf16-mixed."""

from __future__ import annotations

import warnings

import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader

from cselab.methods.nonfinite import NonFiniteLossError, honours_found_inf
from cselab.methods.optim import fused_adamw

ROWS = [{"text": s} for s in ["a man is playing a guitar", "the cat sat on the mat", "birds fly", "a cat sat"]]


class _Weights(L.Callback):
    """The trainable weights after each optimizer step (global step -> {name: tensor})."""

    def __init__(self) -> None:
        self.after: dict[int, dict[str, torch.Tensor]] = {}
        self.grad_norms: list[float] = []

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        grads = [p.grad for p in pl_module.parameters() if p.grad is not None]
        self.grad_norms.append(float(torch.nn.utils.get_total_norm(grads)))

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.after[trainer.global_step] = {n: p.detach().clone() for n, p in pl_module.named_parameters()
                                           if p.requires_grad}


def _fit(method, tmp_path, steps: int, log_every: int = 3, **trainer_args) -> _Weights:
    weights = _Weights()
    loader = DataLoader([ROWS] * steps, batch_size=None, collate_fn=method.train_collate())
    trainer = L.Trainer(max_steps=steps, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, limit_val_batches=0, accelerator="cpu", callbacks=[weights],
                        log_every_n_steps=log_every, default_root_dir=str(tmp_path), **trainer_args)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(method, loader)
    return weights


def _nan_at(method, step: int) -> None:
    real = method.loss_fn.forward

    def loss(*args, **kwargs):
        value = real(*args, **kwargs)
        return value * float("nan") if method.global_step == step else value

    method.loss_fn.forward = loss


def test_fused_resolution_and_the_flag() -> None:
    cpu = [torch.nn.Parameter(torch.zeros(2))]
    assert fused_adamw("auto", cpu) is True and fused_adamw(False, cpu) is False
    assert fused_adamw("auto", [torch.nn.Parameter(torch.zeros(2, dtype=torch.long), requires_grad=False)]) is False
    with pytest.raises(ValueError, match="optim.fused='yes'"):
        fused_adamw("yes", cpu)
    assert honours_found_inf(torch.optim.AdamW(cpu, fused=True))
    assert not honours_found_inf(torch.optim.AdamW(cpu))


def test_a_nan_step_is_skipped_on_the_device_and_counted_at_the_logging_step(make_method, tmp_path) -> None:
    method = make_method("simcse", "bert", on_nonfinite="skip")
    _nan_at(method, 1)
    weights = _fit(method, tmp_path, steps=4)
    assert method.nonfinite.on_device  # the fused AdamW reads the flag: nothing read on the host per step
    after = weights.after
    assert all(torch.equal(after[2][n], after[1][n]) for n in after[1])  # step 1 (NaN) not applied
    assert any(not torch.equal(after[3][n], after[2][n]) for n in after[2])  # the next steps are
    assert all(torch.isfinite(p).all() for p in method.parameters())
    assert method.skipped_nonfinite == 1 and (tmp_path / "nonfinite_step1.json").is_file()


def test_stop_raises_at_the_next_logging_step_naming_the_first_bad_step(make_method, tmp_path) -> None:
    method = make_method("simcse", "bert")
    _nan_at(method, 0)
    with pytest.raises(NonFiniteLossError, match=r"training loss is nan at step 0; the batch's sentences are in "
                                                  r".*nonfinite_step0.json"):
        _fit(method, tmp_path, steps=6, log_every=3)
    assert method.global_step == 3  # read at the logging step (the third): steps 1 and 2 trained, step 0 did not


def test_host_mode_with_a_non_fused_adamw(make_method, tmp_path) -> None:
    method = make_method("simcse", "bert", on_nonfinite="skip")
    method.optim["fused"] = False  # optim.fused=false
    _nan_at(method, 0)
    _fit(method, tmp_path, steps=2)
    assert not method.nonfinite.on_device and method.skipped_nonfinite == 1


def test_gradient_clipping_applies_with_the_fused_adamw_under_bf16(make_method, tmp_path) -> None:
    """Lightning's mixed-precision plugin refuses to clip for a fused optimizer; the method clips itself."""
    method = make_method("simcse", "bert")
    clipped, weights = _Clip(), _Weights()
    loader = DataLoader([ROWS] * 2, batch_size=None, collate_fn=method.train_collate())
    trainer = L.Trainer(max_steps=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, limit_val_batches=0, accelerator="cpu", precision="bf16-mixed",
                        gradient_clip_val=1e-3, callbacks=[weights, clipped], default_root_dir=str(tmp_path))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(method, loader)
    assert honours_found_inf(trainer.optimizers[0])
    assert min(weights.grad_norms) > 1e-3  # before clipping
    assert clipped.norms and max(clipped.norms) <= 1e-3 * (1 + 1e-4)  # what the optimizer received


class _Clip(L.Callback):
    """The gradient norm the optimizer receives (after Lightning's clipping hook)."""

    def __init__(self) -> None:
        self.norms: list[float] = []

    def setup(self, trainer, pl_module, stage) -> None:
        real = pl_module.configure_gradient_clipping

        def clip(optimizer, gradient_clip_val=None, gradient_clip_algorithm=None):
            real(optimizer, gradient_clip_val, gradient_clip_algorithm)
            grads = [p.grad for p in pl_module.parameters() if p.grad is not None]
            self.norms.append(float(torch.nn.utils.get_total_norm(grads)))

        pl_module.configure_gradient_clipping = clip
