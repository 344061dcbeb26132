"""The run's resolved config in every checkpoint, so that a resume can compare the new command with it.

A run resumed with other values for keys that change its result (``optim.lr``, ``loss.temperature``,
``trainer.max_steps``, ...) would continue with the checkpoint's optimizer state while ``results.json`` and
``.hydra/`` record the new values.  :func:`config_changes` lists the differences, leaving out
:data:`cselab.io.config.OUTPUT_ONLY_KEYS` (the one list of keys that never change a result, also used for
``run_name``); :func:`check_resume` refuses those that ``resume.allow_changed`` does not list, and
:class:`RunConfig` keeps the config and the accepted changes (key, both values, the step) in each checkpoint.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning as L
import torch
from hydra.utils import get_object

from cselab.io.config import ADDED_KEYS, ADDED_NODES, OUTPUT_ONLY_KEYS, flatten, key_matches
from cselab.methods.checks import LEGACY_MODEL_KEYS, LEGACY_OPTIM_KEYS
from cselab.model.spec import ConfigError

log = logging.getLogger(__name__)

#: the key under ``checkpoint["callbacks"]`` that Lightning files :class:`RunConfig`'s state under
STATE_KEY = "RunConfig"
#: optimizer hyper-parameters that a restored optimizer state would otherwise override
OPTIMIZER_KEYS: dict[str, str] = {"optim.lr": "lr", "optim.weight_decay": "weight_decay"}
_ABSENT = "(absent)"


def config_changes(saved: dict[str, Any], new: dict[str, Any],
                   copies: Sequence[str] = ()) -> list[tuple[str, Any, Any]]:
    """The keys whose resolved values differ between a checkpoint's config ``saved`` and the new one, leaving out
    :data:`~cselab.io.config.OUTPUT_ONLY_KEYS` (logging, paths, evaluation batch size, workers, ...), the
    ``module`` node's copies of other keys (``copies``, :func:`cselab.run.spec.copies_of`), and a node added since
    ``saved`` was written whose switch keeps the old behaviour (:data:`~cselab.io.config.ADDED_NODES`; a key:
    :data:`~cselab.io.config.ADDED_KEYS`).

    Args:
        saved, new: resolved configs as plain containers.

    Returns:
        ``[(key, checkpoint value, new value)]`` sorted by key; ``"(absent)"`` for a key one side lacks.
    """
    # a checkpoint written before the embedding spec has the flat module node: copies of the groups' keys too
    derived = [*copies, *(f"module.{key}" for key in (*LEGACY_MODEL_KEYS, *LEGACY_OPTIM_KEYS))]
    old_flat, new_flat = flatten(saved), flatten(new)
    derived += [node for node, (switch, old_value) in ADDED_NODES.items()
                if not any(key_matches(k, (node,)) for k in old_flat) and new_flat.get(f"{node}.{switch}") == old_value]
    derived += [key for key, old_value in ADDED_KEYS.items() if key not in old_flat and new_flat.get(key, _ABSENT) == old_value]
    changes = []
    for key in sorted(set(old_flat) | set(new_flat)):
        if key_matches(key, OUTPUT_ONLY_KEYS) or key_matches(key, tuple(derived)):
            continue
        before, after = old_flat.get(key, _ABSENT), new_flat.get(key, _ABSENT)
        if before != after and not (key.endswith("_target_") and moved_target(before, after)):
            changes.append((key, before, after))
    return changes


def moved_target(before: Any, after: Any) -> bool:
    """Whether a ``_target_`` value saved by an older cselab names the object ``after`` names now: the old path no
    longer imports (its module moved, e.g. ``cselab.methods.prompt_tuning.DCPCSE`` -> ``cselab.methods.dcpcse.method
    .DCPCSE``, ``cselab.loggers.build_loggers`` -> ``cselab.run.loggers.build_loggers``) and the object's name is
    the same.  Another object, or an old path that still imports, is a change."""
    if not (isinstance(before, str) and isinstance(after, str)) or before.rpartition(".")[2] != after.rpartition(".")[2]:
        return False
    try:
        get_object(before)
    except Exception:
        try:
            get_object(after)
        except Exception:
            return False
        return True
    return False


def check_resume(config: dict[str, Any], copies: Sequence[str], allowed: Sequence[str], ckpt_path: str | None,
                 step: int | None) -> list[dict[str, Any]]:
    """Compare a resumed run's config with its checkpoint's, before any weights load.

    Args:
        config: the new command's resolved config; copies: its ``module`` node's copies (``copies_of``).
        allowed: ``resume.allow_changed``, keys allowed to differ (a key covers its sub-keys).
        ckpt_path: the checkpoint ``fit`` resumes from (``None``: a fresh run, nothing to compare).
        step: the checkpoint's global step (where the accepted changes take effect).

    Returns:
        every accepted change of this and earlier resumes, ``[{"key", "checkpoint", "now", "step"}]`` (for
        ``results.json`` and the next checkpoints).

    Raises:
        cselab.methods.checks.ConfigError: a key that changes the result differs and is not listed; the message
            names each key with both values and the override that accepts them.
    """
    if ckpt_path is None or not Path(ckpt_path).is_file():
        return []
    checkpoint = torch.load(ckpt_path, map_location="cpu", mmap=True, weights_only=False)  # weights not read
    state = (checkpoint.get("callbacks") or {}).get(STATE_KEY)  # None: written before RunConfig existed
    if state is None:
        log.warning("%s holds no run config (written by an older cselab): the resumed run's overrides cannot be "
                    "compared with the checkpoint's", ckpt_path)
        return []
    changes = config_changes(state["config"], config, copies)
    refused = [c for c in changes if not key_matches(c[0], tuple(allowed))]
    if refused:
        lines = "\n".join(f"  {key}: {before!r} in the checkpoint, {after!r} now" for key, before, after in refused)
        keys = ",".join(key for key, _, _ in refused)
        raise ConfigError(
            f"resuming from {ckpt_path} (step {step}) with values that change the result:\n{lines}\n"
            f"Resume with the checkpoint's values, start a new run (another run_name / overwrite=true), or accept "
            f"the change from step {step} on with resume.allow_changed=[{keys}]")
    earlier = list(state.get("changes") or [])
    now = [{"key": key, "checkpoint": before, "now": after, "step": step} for key, before, after in changes]
    for change in now:
        log.warning("resume: %s changes from %r to %r at step %s (resume.allow_changed)", change["key"],
                    change["checkpoint"], change["now"], step)
    return earlier + now


def finished_run_changes(results: dict[str, Any], config: dict[str, Any], copies: Sequence[str],
                         run_dir: str | Path) -> str | None:
    """Why re-running a finished run with this command changes nothing, when the command asks for a value that
    changes the result (``resume=<finished run> optim.lr=1e-4``): the keys with both values and how to run the
    change; ``None`` when the command matches the finished run (or its ``results.json`` records no config).
    """
    saved = results.get("config")
    if not isinstance(saved, dict):
        return None
    changes = config_changes(saved, config, copies)
    if not changes:
        return None
    listed = "; ".join(f"{key}: {before!r} in the finished run, {after!r} now" for key, before, after in changes)
    return (f"{run_dir} already finished (results.json) with other values that change the result ({listed}); "
            "nothing was run. To train with the change, start a new run (without resume=, or with run_name=<new "
            "name>), or replace this one with overwrite=true")


class RunConfig(L.Callback):
    """Save the run's resolved config and its accepted resume changes with every checkpoint; when ``fit``
    resumes with an accepted ``optim.lr`` / ``optim.weight_decay`` change, put the new value into the restored
    optimizer (and the LR schedule's base), which otherwise keeps the checkpoint's.

    Args:
        config: the resolved config (:attr:`cselab.run.spec.RunSpec.config`).
        changes: the accepted changes (:func:`check_resume`); those of this resume have ``step`` = the step
            resumed from.
        resume_step: the step this fit resumes from (``None``: a fresh run).
    """

    def __init__(self, config: dict[str, Any], changes: list[dict[str, Any]] | None = None,
                 resume_step: int | None = None) -> None:
        self.config = config
        self.changes = list(changes or [])
        self.resume_step = resume_step

    def state_dict(self) -> dict[str, Any]:  # nothing to load back: check_resume read it before the run was built
        return {"config": self.config, "changes": self.changes}

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        new = {OPTIMIZER_KEYS[c["key"]]: c["now"] for c in self.changes
               if c["key"] in OPTIMIZER_KEYS and c["step"] == self.resume_step and self.resume_step is not None}
        if not new:
            return
        for optimizer in trainer.optimizers:
            for group in optimizer.param_groups:
                if "weight_decay" in new and not group.get("no_decay"):  # the HF Trainer's biases, LayerNorms
                    group["weight_decay"] = float(new["weight_decay"])
                if "lr" in new:  # the schedule's factor at this step is kept: lr = new base x factor
                    base = group.get("initial_lr", group["lr"])
                    group["lr"] = group["lr"] * float(new["lr"]) / base if base else float(new["lr"])
                    group["initial_lr"] = float(new["lr"])
        if "lr" in new:
            for config in trainer.lr_scheduler_configs:
                scheduler = config.scheduler
                scheduler.base_lrs = [float(new["lr"])] * len(scheduler.base_lrs)
                scheduler._last_lr = [g["lr"] for g in scheduler.optimizer.param_groups]
        log.info("resume: optimizer set to %s from step %s", new, self.resume_step)
