"""The run's objects from its typed pieces (:class:`cselab.run.spec.RunSpec`): the method, the callbacks, the
loggers, the Trainer and the training DataModule, each from its ``_target_`` node (lightning-hydra-template's
``instantiate_*``), with the values only the run knows."""

from __future__ import annotations

import inspect
import logging
from pathlib import Path
from typing import Any

import lightning as L
import torch
from hydra.utils import instantiate

from cselab.data.datamodule import SentenceDataModule
from cselab.io.config import clipped
from cselab.io.progress import interactive
from cselab.methods.base import ContrastiveMethod
from cselab.methods.checks import refuse_legacy
from cselab.methods.compiled import compile_training
from cselab.methods.registry import method_target
from cselab.model.spec import ConfigError
from cselab.run.checkpoints import AtomicCheckpointIO
from cselab.run.loggers import logged_config, run_display_name
from cselab.run.pieces import RunNames, TrainSpec
from cselab.run.resume import RunState
from cselab.run.spec import RunSpec

log = logging.getLogger(__name__)


def build_method(module: dict[str, Any], backbone: dict | None = None):
    """The method's LightningModule: the resolved ``module`` node instantiated (``_target_`` = the method's class,
    ``conf/method/*.yaml``; its arguments are read from the other groups by ``conf/config.yaml``); ``backbone``
    replaces the node's ``backbone`` (``eval.test_backbone``).

    Raises:
        ConfigError: ``method._target_`` cannot be imported (names it); what the method refuses.
    """
    node = dict(module)
    if backbone is not None:
        node["backbone"] = backbone
    cls = method_target(node.pop("_target_"))
    refuse_legacy(node)
    return cls(**node)


def build_run_method(spec: RunSpec):
    """The run's method (:func:`build_method`); a run that trains nothing is built on the test backbone
    (``eval.test_backbone``) at once.  An embedding model gets activation checkpointing and a compiled training
    forward as configured (:func:`cselab.methods.compiled.compile_training`; a token representation has no forward
    pass to change)."""
    training = spec.training
    method = build_method(spec.module, backbone=None if training else spec.evaluation.test_backbone)
    if isinstance(method, ContrastiveMethod) and training is not None:
        if training.activation_checkpointing:
            method.encoder.enable_activation_checkpointing()
        if training.compiled:
            compile_training(method, training.compile)
            log.info("torch.compile of the training forward: %s", training.compile.kwargs())
    return method


def runtime_arguments(spec: RunSpec, state: RunState) -> dict[str, dict[str, Any]]:
    """The ``???`` arguments of ``conf/callbacks/default.yaml`` that only the run knows, by callback name."""
    checkpoints = state.output_dir / "checkpoints"
    return {"sts": {"started": state.start, "run_dir": str(state.output_dir)},  # run_dir: where a whitened baseline writes its checkpoint
            "run_config": {"config": spec.config, "changes": list(state.changed_on_resume),
                           "resume_step": state.resume_step},
            "checkpoint": {"dirpath": checkpoints}, "last_checkpoint": {"dirpath": checkpoints}}


def build_callbacks(nodes: dict[str, Any], runtime: dict[str, dict[str, Any]],
                    names: tuple[str, ...] | None = None) -> dict[str, L.Callback]:
    """The ``callbacks`` nodes instantiated in their order (lightning-hydra-template's ``instantiate_callbacks``):
    name -> callback; a null node, or one with ``enabled: false``, is left out; ``runtime`` fills the ``???``
    arguments by name; ``names``: only these (a run without a Trainer builds ``sts`` alone).

    Raises:
        ConfigError: a node without ``_target_``, or a ``???`` argument the run does not fill (names it).
    """
    built: dict[str, L.Callback] = {}
    for name, node in nodes.items():
        if node is None or (names is not None and name not in names):
            continue
        if not isinstance(node, dict) or "_target_" not in node:
            raise ConfigError(f"callbacks.{name}: expected a node with a _target_ (a Lightning callback class) or "
                              f"null, got {node!r}")
        given = runtime.get(str(name)) or {}
        params = {k: v for k, v in node.items() if k not in given}
        if not params.pop("enabled", True):
            continue
        unset = [key for key, value in params.items() if value == "???"]
        if unset:
            raise ConfigError(f"callbacks.{name}.{unset[0]} is ??? (an argument only the run fills, for the "
                              f"callbacks it knows: {sorted(runtime)}); give it a value")
        # the node's own nested _target_s are built; the run's values (a config, paths) are passed as they are
        built[str(name)] = instantiate({**params, "_partial_": True})(**given)
    if "sts" not in built:
        raise ConfigError("callbacks.sts is missing: the STS evaluator is the run's (it selects the checkpoint)")
    return built


def run_tags(names: RunNames) -> list[str]:
    """The loggers' tags: method, backbone, setting, loss, tuning, the prompt (if any) and the variant."""
    tags = [names.method, names.backbone, names.setting, f"loss={names.loss}", f"tuning={names.tuning}"]
    if names.prompt:
        tags.append(f"prompt={names.prompt}")
    tags.append(clipped(f"variant={names.variant or 'default'}", 64))  # W&B refuses longer tags
    return tags


def start_loggers(spec: RunSpec, state: RunState, method) -> list:
    """The ``logger`` node instantiated (``conf/logger/*.yaml``: :func:`cselab.run.loggers.build_loggers`) with the
    run's tags and name; each gets the run's config and, on a fresh run, the trainable-parameter count."""
    names = spec.names
    name = run_display_name(names.method, names.backbone, names.setting, names.variant, spec.seed)
    loggers = instantiate(spec.logger, output_dir=str(state.output_dir), tags=run_tags(names), name=name,
                          resume_step=state.resume_step)
    config = logged_config(spec.config)
    for logger in loggers:
        logger.log_hyperparams(config)
        if state.resume_step is None:  # a resumed run's CSV / W&B run has it already
            logger.log_metrics({"model/trainable_parameters": float(method.num_trainable_parameters())}, step=0)
    return loggers


def build_trainer(training: TrainSpec, callbacks: list[L.Callback], loggers: list, output_dir: Path) -> L.Trainer:
    """The ``trainer`` node instantiated (``_target_: lightning.Trainer``) with the run's callbacks, loggers,
    directory and atomic checkpoint writes (``trainer.cached_step`` is the module's: left out); validation by
    steps (``val_check_interval``) across epochs, no sanity validation; ``precision: auto`` resolved; bars only in
    a terminal."""
    return instantiate(training.trainer, precision=training.precision,
                       enable_progress_bar=training.progress_bar and interactive(), callbacks=callbacks,
                       logger=loggers or False, default_root_dir=str(output_dir), check_val_every_n_epoch=None,
                       num_sanity_val_steps=0, plugins=[AtomicCheckpointIO()])


def build_datamodule(training: TrainSpec, method) -> L.LightningDataModule:
    """The training DataModule: the ``data.datamodule`` node instantiated (``conf/data/*.yaml``'s ``_target_``)
    with the method's training collate, built with the node's ``seed`` (its MLM masks) and the resolved
    ``pad_to_multiple_of`` (the node's key is the collate's, not passed on), the method's corpus transform
    (``method.prepare_train_set``), pinned memory on a CUDA GPU and the ``auto`` values resolved."""
    node = {k: v for k, v in training.datamodule.items() if k != "pad_to_multiple_of"}
    seed = node.get("seed", inspect.signature(SentenceDataModule).parameters["seed"].default)
    collate = method.train_collate(seed=int(seed), pad_to_multiple_of=training.pad_to_multiple_of)
    return instantiate(node, collate=collate, transform=method.prepare_train_set,
                       pin_memory=torch.cuda.is_available(), num_workers=training.num_workers)
