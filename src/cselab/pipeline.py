"""The run's former home, kept for the imports that use it: every name re-exported from :mod:`cselab.run`, and
a few config-taking helpers that read the config through :class:`~cselab.run.spec.RunSpec` (tests, scripts).

The run itself: :func:`cselab.run.flow.run` (docs/architecture.md, "The run").
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import lightning as L
from omegaconf import DictConfig, OmegaConf

from cselab.callbacks.run_config import config_changes as _changes
from cselab.callbacks.run_config import finished_run_changes as _finished
from cselab.config import has_templates
from cselab.methods.checks import ConfigError
from cselab.methods.registry import method_target
from cselab.run import assemble, flow
from cselab.run.assemble import _short_tag, runtime_arguments, start_loggers
from cselab.run.failure import disk_full_record, record_failure
from cselab.run.flow import Run, validate_at_end
from cselab.run.inputs import check_inputs
from cselab.run.pieces import resolve_precision
from cselab.run.results import (
    DEV_ENCODER_WORDS,
    Outcome,
    RunState,
    dev_encoder_used,
    print_results,
    tested_weights,
)
from cselab.run.resume import RunFinished, checkpoint_step, resolve_ckpt_path, resumable_checkpoint
from cselab.run.spec import (
    RunSpec,
    callback_nodes,
    copies_of,
    evaluation_spec,
    module_node,
    resolved_config,
)

__all__ = ["DEV_ENCODER_WORDS", "ConfigError", "Outcome", "Run", "RunFinished", "RunSpec", "RunState", "_short_tag",
           "build_callbacks", "build_method", "build_run_method", "build_trainer", "check_data_files",
           "check_templates", "checkpoint_step", "config_changes", "dev_encoder_used", "disk_full_record",
           "finished_run_changes", "method_target", "print_results", "prompt_config", "record_failure",
           "resolve_ckpt_path", "resolve_precision", "resumable_checkpoint", "run", "runtime_arguments",
           "start_loggers", "test_backbone", "tested_weights", "validate", "validate_at_end"]


def run(cfg: DictConfig, output_dir: str | Path) -> dict[str, Any]:
    """``run.py``'s two steps in one call (tests, notebooks): the config read into a :class:`RunSpec`, then
    :func:`cselab.run.flow.run`.

    Raises:
        RunFinished: ``output_dir`` holds ``results.json`` and ``overwrite`` is false.
        ConfigError: what :meth:`RunSpec.from_config` or :func:`cselab.run.flow.prepare` refuses.
    """
    start = time.perf_counter()
    return flow.run(RunSpec.from_config(cfg, output_dir), output_dir, start)


def validate(cfg: DictConfig) -> RunSpec:
    """Every config rule, checked (:meth:`RunSpec.from_config`); returns the run's spec.

    Raises:
        ConfigError: an out-of-range value or conflicting choices (the message names the keys).
    """
    return RunSpec.from_config(cfg)


def check_templates(cfg: DictConfig) -> None:
    """The config's rules, the prompt's templates among them (:func:`cselab.model.template.check_prompt_views`)."""
    RunSpec.from_config(cfg)


def check_data_files(cfg: DictConfig) -> None:
    """Every input file of the config's run (:func:`cselab.run.inputs.check_inputs`)."""
    check_inputs(RunSpec.from_config(cfg).inputs)


def test_backbone(cfg: DictConfig) -> dict:
    """The backbone the test scores (``module.backbone`` with ``eval.test_backbone``'s keys over it)."""
    return evaluation_spec(cfg).test_backbone


def prompt_config(cfg: DictConfig) -> DictConfig | None:
    """The ``prompt`` group's config, or ``None`` for ``prompt=none`` (whose file holds only ``template: null``)."""
    prompt = OmegaConf.select(cfg, "prompt")
    return prompt if has_templates(prompt) else None


def build_method(cfg: DictConfig, backbone: dict | None = None):
    """The config's method (:func:`cselab.run.assemble.build_method` of its ``module`` node)."""
    return assemble.build_method(module_node(cfg), backbone)


def build_run_method(cfg: DictConfig):
    """The config's method as a run builds it (:func:`cselab.run.assemble.build_run_method`: ``eval.test_backbone``
    for a run that trains nothing, activation checkpointing, ``torch.compile``)."""
    return assemble.build_run_method(RunSpec.from_config(cfg))


def build_callbacks(cfg: DictConfig, runtime: dict, names: tuple[str, ...] | None = None) -> dict[str, L.Callback]:
    """The config's callbacks (:func:`cselab.run.assemble.build_callbacks`)."""
    return assemble.build_callbacks(callback_nodes(cfg), runtime, names)


def build_trainer(cfg: DictConfig, callbacks: list[L.Callback], loggers: list, output_dir: Path) -> L.Trainer:
    """The config's Trainer (:func:`cselab.run.assemble.build_trainer`)."""
    return assemble.build_trainer(RunSpec.from_config(cfg).training, callbacks, loggers, output_dir)


def config_changes(saved: dict[str, Any], cfg: DictConfig) -> list[tuple[str, Any, Any]]:
    """:func:`cselab.callbacks.run_config.config_changes` of a checkpoint's config and a composed one."""
    return _changes(saved, resolved_config(cfg), copies_of(cfg))


def finished_run_changes(results: dict[str, Any], cfg: DictConfig, run_dir) -> str | None:
    """:func:`cselab.callbacks.run_config.finished_run_changes` of a finished run and a composed config."""
    return _finished(results, resolved_config(cfg), copies_of(cfg), run_dir)
