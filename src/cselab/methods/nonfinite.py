"""What a training step does with a NaN / inf loss (``method.on_nonfinite``): ``stop`` or ``skip``.

Either way the step, the loss and the batch's sentences (first view, decoded as the model saw them) are written
to ``<run dir>/nonfinite_step<N>.json``.

Two ways to decide, by what the optimizer can do (:meth:`NonFinitePolicy.attach`):

* **on the device** (the default: AdamW with ``optim.fused`` on, ``auto`` = fused on CPU and CUDA): nothing is read
  on the host during a step.  Each step records ``~isfinite(loss)`` as a device flag (and keeps a reference to its
  batch's ids); before the optimizer step, the gradients' total norm is checked on the device too, and a
  non-finite step sets the optimizer's ``found_inf`` flag, which the fused AdamW kernel reads: **its update is
  not applied** (parameters, moments and step count unchanged: the mechanism of ``torch.amp.GradScaler``).
  The flags are read on the host at the next logging step (``trainer.log_every_n_steps``), before every
  validation and at the end of training: ``skip`` then counts and saves the skipped steps; ``stop`` raises
  :class:`NonFiniteLossError` naming the FIRST non-finite step.  So under ``stop`` the run stops at most
  ``log_every_n_steps - 1`` steps after the bad one, none of the non-finite steps having changed the weights; the
  finite steps in between were applied.  The learning-rate schedule and ``global_step`` advance over a skipped
  step.
* **on the host** (an optimizer without ``found_inf``: ``optim.fused=false``): ``isfinite(loss)`` is read at every
  step (one host sync per step on a GPU); a bad step returns None from ``training_step``, so Lightning takes no
  backward and no optimizer step, and ``stop`` raises at once.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import lightning as L
import torch

from cselab.io.files import atomic_write_text
from cselab.io.progress import is_logging_step

POLICIES = ("stop", "skip")


class NonFiniteLossError(FloatingPointError):
    """The training loss became NaN or inf (the batch's sentences are saved beside the checkpoints)."""


@dataclass
class _Pending:
    """One step's record (device mode: until read on the host): its global step, its flag (bool scalar), its loss
    (detached) and its batch's first view (ids and mask, (B, T), kept by reference)."""

    step: int
    bad: torch.Tensor
    loss: torch.Tensor
    ids: torch.Tensor
    mask: torch.Tensor


def honours_found_inf(optimizer: torch.optim.Optimizer) -> bool:
    """True for an optimizer whose step reads ``optimizer.found_inf`` and skips its update when it is nonzero:
    the fused Adam, AdamW and SGD of ``torch.optim`` (``torch/optim/adam.py``: ``found_inf=getattr(self,
    "found_inf", None)``, passed to ``torch._fused_adamw_``)."""
    fused_types = (torch.optim.Adam, torch.optim.AdamW, torch.optim.SGD)
    return isinstance(optimizer, fused_types) and all(g.get("fused") for g in optimizer.param_groups)


class NonFinitePolicy:
    """Apply ``method.on_nonfinite`` to a step's loss.

    Args:
        policy: ``stop`` (raise :class:`NonFiniteLossError`) or ``skip`` (the step's update is not applied).

    Attributes:
        skipped: steps skipped so far (counted when their flags are read on the host).
        found_inf: the float32 scalar the optimizer reads (device mode), or None (host mode).

    The policy comes checked (:data:`POLICIES`, by :func:`cselab.methods.checks.check_method`).
    """

    def __init__(self, policy: str = "stop") -> None:
        self.policy = policy
        self.skipped = 0
        self.found_inf: torch.Tensor | None = None
        self._pending: list[_Pending] = []

    @property
    def on_device(self) -> bool:
        """True when the decision is taken on the device (the optimizer reads :attr:`found_inf`)."""
        return self.found_inf is not None

    def attach(self, optimizer: torch.optim.Optimizer, device: torch.device) -> None:
        """Decide on the device when ``optimizer`` honours ``found_inf`` (:func:`honours_found_inf`): give it this
        policy's flag on ``device``; otherwise decide on the host."""
        self._pending.clear()
        if honours_found_inf(optimizer):
            self.found_inf = torch.zeros((), dtype=torch.float32, device=device)
            optimizer.found_inf = self.found_inf
        else:
            self.found_inf = None

    def __call__(self, module, loss: torch.Tensor, batch: dict[str, torch.Tensor]) -> bool:
        """A step's loss.  Device mode: record its flag and return False (nothing read on the host).  Host
        mode: True when the step must be skipped; raises :class:`NonFiniteLossError` under ``stop``; False for a
        finite loss."""
        loss = loss.detach()
        step = _Pending(int(module.global_step), ~torch.isfinite(loss), loss, batch["input_ids"][:, 0],
                        batch["attention_mask"][:, 0])
        if self.on_device:
            self._pending.append(step)
        elif step.bad:  # read on the host
            self._handle(module, [step], log=True)
            return True
        return False

    def check_gradients(self, parameters) -> None:
        """Device mode, before the optimizer step (after the backward passes and DDP's all-reduce): set
        :attr:`found_inf` to 1 when the accumulated gradients' total norm is not finite (a NaN / inf loss, or an
        overflow in backward on any rank), else 0; the step's flag takes it too."""
        if not self.on_device:
            return
        grads = [p.grad for p in parameters if p.grad is not None]
        if not grads:
            return
        bad = ~torch.isfinite(torch.nn.utils.get_total_norm(grads, foreach=True).float())
        if self._pending:
            self._pending[-1].bad = self._pending[-1].bad | bad
        self.found_inf.copy_(bad)

    def check(self, module, log: bool = False) -> int:
        """Read the recorded flags on the host (one sync) and apply the policy to the non-finite steps: save
        their batches, count them (``skip``; ``log``: also ``train/skipped_nonfinite``, from a hook where
        Lightning allows logging), or raise for the first (``stop``).  Returns how many were found.

        Raises:
            NonFiniteLossError: under ``stop``, naming the first non-finite step and its saved batch.
        """
        if not self._pending:
            return 0
        pending, self._pending = self._pending, []
        flags = torch.stack([p.bad for p in pending]).cpu().tolist()
        bad = [p for p, flag in zip(pending, flags, strict=True) if flag]
        if bad:
            self._handle(module, bad, log)
        return len(bad)

    def _handle(self, module, bad: list[_Pending], log: bool) -> None:
        paths = [save_batch(module, p.step, p.loss, p.ids, p.mask) for p in bad]
        if self.policy == "skip":
            self.skipped += len(bad)
            if log:
                module.log("train/skipped_nonfinite", float(self.skipped))
            return
        raise NonFiniteLossError(
            f"training loss is {bad[0].loss.item()} at step {bad[0].step}; the batch's sentences are in {paths[0]} "
            "(set method.on_nonfinite=skip to skip such batches)"
        )


def save_batch(module, step: int, loss: torch.Tensor, ids: torch.Tensor, mask: torch.Tensor) -> Path:
    """Write the step, the loss and the batch's first view (``ids``, ``mask``: (B, T), decoded) to
    ``nonfinite_step<N>.json`` in the trainer's root directory (the working directory without a Trainer)."""
    root = Path(module.trainer.default_root_dir) if module._trainer is not None else Path(".")
    path = root / f"nonfinite_step{step}.json"
    texts = [module.tokenizer.decode(i[m.bool()].tolist(), skip_special_tokens=True)
             for i, m in zip(ids.cpu(), mask.cpu(), strict=True)]
    atomic_write_text(path, json.dumps({"step": int(step), "loss": str(loss.item()), "sentences": texts}, indent=1))
    return path


class NonFiniteCheck(L.Callback):
    """The Trainer's side of a method's :class:`NonFinitePolicy` (``method.on_nonfinite``), hook by hook below;
    every :class:`cselab.methods.base.ContrastiveMethod` hands the Trainer one for its own policy
    (:meth:`~cselab.methods.base.ContrastiveMethod.configure_callbacks`).

    Args:
        policy: the method's policy (``method.nonfinite``), whose flags the training step records.
    """

    def __init__(self, policy: NonFinitePolicy) -> None:
        self.policy = policy

    def on_before_optimizer_step(self, trainer: L.Trainer, pl_module: L.LightningModule, optimizer) -> None:
        """The gradients' non-finite check, on the device (:meth:`NonFinitePolicy.check_gradients`)."""
        self.policy.check_gradients(p for p in pl_module.parameters() if p.requires_grad)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs, batch,
                           batch_idx: int) -> None:
        """On logging steps only: the recorded non-finite flags read on the host (:meth:`NonFinitePolicy.check`)."""
        if is_logging_step(trainer):
            self.policy.check(pl_module, log=True)

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Before a validation (and the checkpoint it selects): the pending non-finite flags read."""
        if trainer.state.fn == "fit":
            self.policy.check(pl_module, log=False)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """The last steps' non-finite flags read."""
        self.policy.check(pl_module, log=False)
