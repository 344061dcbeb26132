"""What a training step does with a NaN / inf loss (``method.on_nonfinite``): ``stop`` or ``skip``.

Either way the step, the loss and the batch's sentences (first view, decoded as the model saw them) are written
to ``<run dir>/nonfinite_step<N>.json``.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from cselab.files import atomic_write_text

POLICIES = ("stop", "skip")


class NonFiniteLossError(FloatingPointError):
    """The training loss became NaN or inf (the batch's sentences are saved beside the checkpoints)."""


class NonFinitePolicy:
    """Apply ``method.on_nonfinite`` to a step's loss.

    Args:
        policy: ``stop`` (raise :class:`NonFiniteLossError`) or ``skip`` (the step returns None: Lightning
            takes no optimizer step).

    Raises:
        ValueError: an unknown policy (names ``method.on_nonfinite``).
    """

    def __init__(self, policy: str = "stop") -> None:
        if policy not in POLICIES:
            raise ValueError(f"method.on_nonfinite={policy!r}: expected 'stop' or 'skip'")
        self.policy = policy
        self.skipped = 0

    def __call__(self, module, loss: torch.Tensor, batch: dict[str, torch.Tensor]) -> bool:
        """True when the step must be skipped; raises :class:`NonFiniteLossError` under ``stop``; False for a
        finite loss."""
        if torch.isfinite(loss):
            return False
        path = save_batch(module, batch, loss)
        if self.policy == "skip":
            self.skipped += 1
            module.log("train/skipped_nonfinite", float(self.skipped))
            return True
        raise NonFiniteLossError(
            f"training loss is {loss.item()} at step {module.global_step}; the batch's sentences are in {path} "
            "(set method.on_nonfinite=skip to skip such batches)"
        )


def save_batch(module, batch: dict[str, torch.Tensor], loss: torch.Tensor) -> Path:
    """Write the step, the loss and the batch's first view (decoded) to ``nonfinite_step<N>.json``."""
    root = Path(module.trainer.default_root_dir) if module._trainer is not None else Path(".")
    path = root / f"nonfinite_step{module.global_step}.json"
    ids, mask = batch["input_ids"][:, 0], batch["attention_mask"][:, 0]
    texts = [module.tokenizer.decode(i[m.bool()].tolist(), skip_special_tokens=True)
             for i, m in zip(ids, mask, strict=True)]
    atomic_write_text(path, json.dumps({"step": int(module.global_step), "loss": str(loss.item()),
                                        "sentences": texts}, indent=1))
    return path
