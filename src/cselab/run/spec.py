"""The run read from the composed config once: :meth:`RunSpec.from_config`, the one reader of ``cfg``.

Every key that no class below the run owns becomes a field of a frozen piece (:mod:`cselab.run.pieces`, each
default written once, in its type); every rule is checked once, here or by the class that owns it (the method's
``check_config``, :mod:`cselab.model.template`, ``BootstrapOptions``, ``CompileOptions``, ``TransferProtocol``).
The ``_target_`` nodes stay as they are, resolved; :mod:`cselab.run.assemble` instantiates them.  Nothing loads.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, ListConfig, OmegaConf

from cselab.evaluation.stats import BootstrapOptions
from cselab.evaluation.sts import AGGREGATIONS, check_best_rule
from cselab.evaluation.transfer import TransferProtocol
from cselab.io.config import MOVED_KEYS, flatten, has_templates
from cselab.methods.cached_step import check_options
from cselab.methods.checks import check_module
from cselab.methods.compiled import CompileOptions
from cselab.methods.options import legacy_keys
from cselab.methods.registry import method_target
from cselab.model.decoder_input import split_prompt
from cselab.model.spec import ConfigError
from cselab.model.template import Template, TemplateError, check_prompt_views, check_template_override
from cselab.run.pieces import (
    EvalSpec,
    InputFiles,
    RunNames,
    TrainSpec,
    resolve_num_workers,
    resolve_pad_to_multiple_of,
    resolve_precision,
)
from cselab.run.resume import ResumeSpec, RunFinished

#: ``lightning.Trainer``'s own defaults of the arguments the run reads from the ``trainer`` node
TRAINER_DEFAULTS = {"accelerator": "auto", "precision": "auto", "strategy": "auto", "enable_progress_bar": True}


@dataclass(frozen=True)
class RunSpec:
    """One run, typed: built by :meth:`from_config` from the composed config, every rule checked.

    Attributes:
        names, resume, inputs, evaluation: the pieces above; training: None when ``method.train`` is false.
        module: the resolved ``module`` node (``_target_`` = the method's class, its arguments).
        callbacks, logger: the resolved ``callbacks`` (name -> node or None) and ``logger`` nodes.
        config: the whole config resolved (the loggers', the checkpoints' and ``results.json``'s).
        copies: the ``module`` node's copies of the groups' keys (compared where they live on resume).
    """

    names: RunNames
    resume: ResumeSpec
    inputs: InputFiles
    evaluation: EvalSpec
    module: dict[str, Any]
    callbacks: dict[str, Any]
    logger: dict[str, Any]
    config: dict[str, Any]
    copies: tuple[str, ...] = ()
    training: TrainSpec | None = None
    seed: int = 42

    @property
    def train(self) -> bool:
        """``method.train``: the run fine-tunes (else it evaluates the representation as it is)."""
        return self.training is not None

    @classmethod
    def from_config(cls, cfg: DictConfig, output_dir: str | Path | None = None) -> RunSpec:
        """Read and check the composed config; with ``output_dir``, its directory is checked first
        (:meth:`ResumeSpec.check_directory`: a finished run, a ``resume`` directory without a checkpoint).

        Raises:
            RunFinished: as :meth:`ResumeSpec.check_directory` (with what this command would change).
            ConfigError: an out-of-range value or conflicting choices (the message names the keys).
        """
        check_types(cfg)  # seed=x, trainer.max_steps=abc: named here, not as a traceback from deep inside
        train = bool(cfg.method.train)
        resume = ResumeSpec(ckpt_path=cfg.ckpt_path, dir=cfg.resume.dir, overwrite=bool(cfg.overwrite),
                            allow_changed=tuple(str(k) for k in cfg.resume.allow_changed or ()))
        config = resolved_config(cfg)
        if output_dir is not None:
            try:
                resume.check_directory(Path(output_dir), train, config)
            except RunFinished as done:  # (the copies name the method's class: imported here, or after the checks)
                done.copies = copies_of(cfg)
                raise
        moved = [key for key in MOVED_KEYS if "." in key and OmegaConf.select(cfg, key, default=None) is not None]
        if moved:  # a YAML (an experiment, a sweep) that still uses an old spelling
            raise ConfigError(f"{moved[0]} moved: it is {MOVED_KEYS[moved[0]]} now (conf/config.yaml)")
        if train:
            _check_data(cfg)
        _check_prompt(cfg)  # every template parsed before any weights load
        if cfg.eval.dev_encoder not in ("official", "test"):
            raise ConfigError(f"eval.dev_encoder={cfg.eval.dev_encoder!r}: expected 'official' or 'test'")
        training = _training(cfg) if train else None
        evaluation = evaluation_spec(cfg)
        # the checks above read the config alone; the method's class (a LightningModule: Lightning takes seconds to
        # import) is imported from here on, for its options and its own rules
        module, callbacks = module_node(cfg), resolved_config(cfg.callbacks) or {}  # name -> node (null: None)
        copies = copies_of(cfg)
        names = RunNames(method=cfg.method.name, backbone=str(OmegaConf.select(cfg, "backbone.name")
                                                              or cfg.backbone.name_or_path),
                         name_or_path=cfg.backbone.name_or_path, setting=cfg.setting.name, loss=cfg.loss.name,
                         tuning=cfg.tuning.name, variant=OmegaConf.select(cfg, "variant"),
                         prompt=cfg.prompt.name if has_templates(cfg.prompt) else None)
        shares = {k: cfg.data[k] for k in ("max_undecodable_share", "max_control_share") if k in cfg.data}
        inputs = InputFiles(data_dir=cfg.data_dir, test_tasks=tuple(cfg.eval.test_tasks), dev_task=cfg.eval.dev_task,
                            train_path=str(cfg.data.path) if train else None, setting=cfg.setting.name,
                            transfer_tasks=tuple(cfg.eval.transfer_tasks or ()),
                            transfer_mode=str(cfg.eval.transfer_mode), **shares,  # absent: the type's defaults
                            **model_inputs(cfg, training, module))
        spec = cls(names=names, resume=resume, inputs=inputs, evaluation=evaluation, module=module,
                   callbacks=callbacks, logger=OmegaConf.to_container(cfg.logger, resolve=True), config=config,
                   copies=copies, training=training, seed=cfg.seed)
        node = dict(module)
        check_module(method_target(node.pop("_target_")), node)  # the method's and its embedding model's rules
        return spec


#: keys whose values have a type, checked before anything else (Hydra reads ``seed=x`` as the string "x"): key ->
#: (the accepted types, how to write one); a key absent from the config is not checked
TYPED_KEYS: dict[str, tuple[tuple[type, ...], str]] = {
    "seed": ((int,), "an integer, e.g. seed=42"),
    "max_seq_len": ((int,), "an integer, e.g. max_seq_len=32"),
    "trainer.max_steps": ((int,), "an integer, e.g. trainer.max_steps=1000 (-1: no limit)"),
    "trainer.max_epochs": ((int, type(None)), "an integer or null, e.g. trainer.max_epochs=1"),
    "trainer.val_check_interval": ((int, float, type(None)), "a number of steps or a fraction of an epoch"),
    "data.batch_size": ((int,), "an integer, e.g. data.batch_size=64"),
    "optim.lr": ((int, float), "a number, e.g. optim.lr=3e-5"),
    "optim.weight_decay": ((int, float), "a number, e.g. optim.weight_decay=0.0"),
    "optim.warmup_ratio": ((int, float), "a number, e.g. optim.warmup_ratio=0.1"),
    "optim.warmup_steps": ((int,), "an integer, e.g. optim.warmup_steps=100"),
    "loss.temperature": ((int, float), "a number, e.g. loss.temperature=0.05"),
    "eval.batch_size": ((int, type(None)), "an integer or null"),
    "eval.max_seq_len": ((int, type(None)), "an integer or null"),
}


def check_types(cfg: DictConfig) -> None:
    """Every key of :data:`TYPED_KEYS` present in ``cfg`` holds a value of its type (a bool is no number).

    Raises:
        ConfigError: ``<key>=<value>: expected <type>, e.g. ...``; an interpolation that cannot be resolved.
    """
    absent = object()
    for key, (types, expected) in TYPED_KEYS.items():
        try:
            value = OmegaConf.select(cfg, key, default=absent)
        except Exception as err:  # an interpolation of the key fails (hp of an unknown backbone)
            raise ConfigError(f"{key}: {err}") from None
        if value is absent:
            continue
        if isinstance(value, bool) or not isinstance(value, types):
            raise ConfigError(f"{key}={value!r}: expected {expected}")


def model_inputs(cfg: DictConfig, training: TrainSpec | None, module: dict[str, Any]) -> dict[str, Any]:
    """The input files that the model or the test read besides the data (``InputFiles``' fields): the whitening
    corpus (``eval.whitening``, :class:`~cselab.evaluation.whitening.WhiteningOptions`, checked here), SNCSE's
    soft negatives (a DataModule node with ``soft_negatives``: its value, or the default next to the corpus
    :func:`~cselab.methods.sncse.data.default_soft_negatives`), RankCSE's teachers (``method.teachers[i].path``).

    Raises:
        ConfigError: a bad ``eval.whitening`` value (names the key).
    """
    from cselab.evaluation.whitening import WhiteningOptions
    from cselab.methods.sncse.data import default_soft_negatives

    node = OmegaConf.select(cfg, "eval.whitening")
    whitening = WhiteningOptions.from_config(OmegaConf.to_container(node, resolve=True) if node is not None else None)
    out: dict[str, Any] = {"whitening_corpus": whitening.corpus_file() if whitening else None}
    if training is not None and "soft_negatives" in training.datamodule:
        given = training.datamodule["soft_negatives"]
        out["soft_negatives"] = str(given or default_soft_negatives(str(cfg.data.path)))
    teachers = (module.get("options") or {}).get("teachers") if training is not None else None
    if isinstance(teachers, list):
        out["teachers"] = tuple(str(t["path"]) for t in teachers if isinstance(t, dict) and t.get("path"))
    return out


def _check_data(cfg: DictConfig) -> None:
    """The training data's rules: a contrastive batch, the data of the setting, a step bound for a stream, a
    gradient clipping norm >= 0, a validation interval Lightning can count (steps >= 1, or a fraction of an epoch
    in (0, 1])."""
    if cfg.data.batch_size < 2:
        raise ConfigError(f"data.batch_size must be >= 2 for a contrastive loss, got {cfg.data.batch_size}")
    if cfg.data.module != cfg.setting.name:
        raise ConfigError(f"data={cfg.data.module} does not match setting={cfg.setting.name} "
                          f"(choose data=unsup/wiki1m for setting=unsup, data=sup for setting=sup)")
    if cfg.setting.name == "unsup" and OmegaConf.select(cfg, "data.streaming") and cfg.trainer.max_steps <= 0:
        raise ConfigError("data.streaming=true has no epoch length: set trainer.max_steps (e.g. 1M / batch_size)")
    clip = OmegaConf.select(cfg, "trainer.gradient_clip_val")
    if clip is not None and (isinstance(clip, bool) or not isinstance(clip, int | float) or not clip >= 0):
        raise ConfigError(f"trainer.gradient_clip_val={clip!r}: expected a gradient norm >= 0 (0 or null: no "
                          "clipping); a negative one would turn each step's gradient around")
    every = OmegaConf.select(cfg, "trainer.val_check_interval")
    if every is not None and not (every >= 1 if isinstance(every, int) else 0 < every <= 1):
        raise ConfigError(f"trainer.val_check_interval={every}: expected a number of steps >= 1 (e.g. 125, SimCSE's "
                          "eval_steps) or a fraction of an epoch in (0, 1]")


def _check_prompt(cfg: DictConfig) -> None:
    """The prompt's templates, parsed for the backbone's family by :mod:`cselab.model.template` (its views read
    here: a view whose value cannot be read, ``prompt=icl_file`` without its file, is named by its key).

    Raises:
        ConfigError: what :func:`check_template_override` / :func:`check_prompt_views` refuse.
    """
    prompt = cfg.prompt
    templates = prompt.templates if "templates" in prompt and prompt.templates else {}
    try:
        check_template_override(OmegaConf.select(prompt, "template"), OmegaConf.select(prompt, "name") or "none",
                                {family: list(views) for family, views in templates.items()})
        if not has_templates(prompt):
            return
        family = str(cfg.backbone.family)
        views, keys = {}, {}
        raw = OmegaConf.to_container(templates[family], resolve=False) if family in templates else {}
        for view in raw:  # the key the user typed: prompt.template (prompt=custom), prompt.file, prompt.line, ...
            references = re.findall(r"\$\{([\w.]+)\}", raw[view]) if isinstance(raw[view], str) else []
            keys[view] = ", ".join(references) or f"prompt.templates.{family}.{view}"
            try:
                views[view] = templates[family][view]
            except Exception as err:  # e.g. prompt=icl_file: prompt.file / prompt.line name no line
                views[view] = err
        named = [*[("prompt.train_views", v) for v in OmegaConf.select(prompt, "train_views") or []],
                 ("prompt.sup_view", OmegaConf.select(prompt, "sup_view")),
                 ("prompt.eval_view", OmegaConf.select(prompt, "eval_view"))]
        mask_index = int(OmegaConf.select(prompt, "mask_index", default=Template.mask_index))
        parse = split_prompt if family == "decoder" else (lambda t: Template.parse(t, mask_index))
        check_prompt_views(prompt.name, family, list(templates), views, keys, named, parse)
    except TemplateError as err:
        raise ConfigError(str(err)) from err.__cause__


def _training(cfg: DictConfig) -> TrainSpec:
    """The training piece: its rules (activation checkpointing with deep prefixes, the cached step's Trainer,
    ``compile``, the DataModule's ``auto`` values) checked; ``auto`` values resolved for this machine."""
    tuning = cfg.tuning
    variant = OmegaConf.select(tuning, "variant") or "deep"
    if cfg.activation_checkpointing and tuning.name == "prefix" and variant != "input_layer":
        raise ConfigError(
            f"activation_checkpointing=true with tuning=prefix, tuning.variant={variant}: "
            "the prefixes reach every layer as past_key_values, which Hugging Face's checkpointed layers drop. "
            "Set activation_checkpointing=false, or use tuning.variant=input_layer")
    trainer = OmegaConf.to_container(cfg.trainer, resolve=True)
    cached_step = (trainer.pop("cached_step", None) or {}).get("chunk_size") is not None  # the module's
    given = {**TRAINER_DEFAULTS, **trainer}
    if cached_step:
        check_options(precision=given["precision"], strategy=given["strategy"])
    cuda = torch.cuda.is_available() and str(given["accelerator"]) in ("auto", "gpu", "cuda")
    options = CompileOptions.from_config(OmegaConf.to_container(cfg.compile, resolve=True) if cfg.compile else None)
    options.check(cuda=cuda, activation_checkpointing=bool(cfg.activation_checkpointing), cached_step=cached_step)
    node = cfg.data.datamodule if "datamodule" in cfg.data else None
    if not isinstance(node, DictConfig) or "_target_" not in node:
        raise ConfigError(f"data.datamodule: expected a node with a _target_ (a LightningDataModule class), got "
                          f"{node!r}")
    datamodule = OmegaConf.to_container(node, resolve=True)
    try:
        workers = resolve_num_workers(datamodule["num_workers"] if "num_workers" in datamodule else 0, cuda)
        multiple = resolve_pad_to_multiple_of(datamodule.get("pad_to_multiple_of"), cuda)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    keep = {"keep_last": bool(cfg.checkpointing.keep_last)} if "keep_last" in cfg.checkpointing else {}
    return TrainSpec(trainer=trainer, datamodule=datamodule, precision=resolve_precision(given["precision"]),
                     progress_bar=bool(given["enable_progress_bar"]), num_workers=workers,
                     pad_to_multiple_of=multiple, activation_checkpointing=bool(cfg.activation_checkpointing),
                     compile=options, compiled=options.active(cuda, bool(OmegaConf.select(cfg, "backbone.load_in_4bit"))),
                     **keep)


def evaluation_spec(cfg: DictConfig) -> EvalSpec:
    """The test phase's piece: the bootstrap options, the transfer protocol and the test backbone checked, and the
    values only the test reads (``eval.aggregation``, ``eval.batch_size``, the transfer tasks and mode), so that
    none of them fails after the training."""
    aggregation, batch_size = cfg.eval.aggregation, cfg.eval.batch_size
    if aggregation not in AGGREGATIONS:
        raise ConfigError(f"eval.aggregation={aggregation!r}: expected one of {', '.join(AGGREGATIONS)} (how "
                          "STS12-16's subsets combine: SimCSE's all)")
    if batch_size is not None and batch_size < 1:
        raise ConfigError(f"eval.batch_size={batch_size}: expected a number of sentences >= 1, or null (256 on a "
                          "GPU, 128 on CPU)")
    try:
        bootstrap = BootstrapOptions.from_config(cfg.eval.bootstrap)
        check_best_rule(OmegaConf.select(cfg, "eval.best_on_tie", default="first"),
                        OmegaConf.select(cfg, "eval.best_decimals", default=None))
    except ValueError as err:
        raise ConfigError(str(err)) from None
    trained = OmegaConf.to_container(cfg.module.backbone, resolve=True)
    over = cfg.eval.test_backbone
    if over is not None and not isinstance(over, DictConfig):
        raise ConfigError(f"eval.test_backbone={over!r}: expected null or a mapping of backbone keys, e.g. "
                          "{dtype: float32, load_in_4bit: false}")
    over = OmegaConf.to_container(over, resolve=True) if over is not None else None
    unknown = sorted(set(over or ()) - set(trained))
    if unknown:
        raise ConfigError(f"eval.test_backbone: unknown key(s) {unknown}; expected some of {sorted(trained)}")
    tasks, mode = tuple(cfg.eval.transfer_tasks or ()), str(cfg.eval.transfer_mode)
    protocol = None
    modes = OmegaConf.select(cfg, "transfer") or {}
    node = modes[mode] if mode in modes else None
    if node is None and (tasks or modes):  # (a config without transfer modes and tasks: nothing to check)
        raise ConfigError(f"eval.transfer_mode={mode!r}: no transfer.{mode} node; expected one of "
                          f"{sorted(modes)} (conf/transfer/<mode>.yaml)")
    twice = sorted({t for t in tasks if tasks.count(t) > 1})
    if twice:
        raise ConfigError(f"eval.transfer_tasks={list(tasks)}: {', '.join(twice)} listed twice")
    if tasks:
        try:
            protocol = TransferProtocol.from_config(OmegaConf.to_container(node, resolve=True))
        except ValueError as err:
            raise ConfigError(f"eval.transfer_tasks / transfer.{mode}: {err}") from err
    tested = {**trained, **(over or {})}
    return EvalSpec(test_backbone=tested, test_backbone_keys=over, reloads_backbone=tested != trained, transfer_tasks=tasks,
                    transfer=protocol, bootstrap=bootstrap, aggregation=cfg.eval.aggregation,
                    batch_size=cfg.eval.batch_size)


def module_node(cfg: DictConfig) -> dict[str, Any]:
    """The resolved ``module`` node: the method's ``_target_`` and its arguments, plus the method's own options
    (``options``: ``method.<node>`` of its ``options_type``, or the fields of a type read from ``method`` itself,
    :mod:`cselab.methods.options`), so that each option is written once, in ``conf/method/<name>.yaml``.

    Raises:
        ConfigError: ``method._target_`` cannot be imported (names it).
    """
    node = OmegaConf.to_container(cfg.module, resolve=True)
    options_type = getattr(method_target(node["_target_"]), "options_type", None)
    if options_type is not None:
        if options_type.node:
            node["options"] = resolved_config(OmegaConf.select(cfg.method, options_type.node))
        else:
            node["options"] = {f.name: resolved_config(cfg.method[f.name]) for f in fields(options_type)
                               if f.name in cfg.method}
    return node


def resolved_config(cfg: Any) -> Any:
    """A config node as plain containers, resolved (the whole config: as saved in a checkpoint and
    ``results.json``); any other value as it is."""
    return OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig | ListConfig) else cfg


def copies_of(cfg: DictConfig) -> tuple[str, ...]:
    """The paths under ``module`` whose unresolved value is an interpolation: copies of the groups' keys (the
    ``module`` node reads every argument from the groups, ``conf/config.yaml``), compared where they live on
    resume (:func:`cselab.callbacks.run_config.config_changes`); and the method's options' copies in the ``module``
    node of a config saved before they were typed (``module.esimcse``, ``module.teachers`` ...,
    :func:`cselab.methods.options.legacy_keys`): they live in ``method``."""
    if "module" not in cfg:
        return ()
    options_type = getattr(method_target(cfg.module._target_), "options_type", None)
    legacy = [f"module.{key}" for key in legacy_keys(options_type)] if options_type is not None else []
    raw = flatten(OmegaConf.to_container(cfg.module, resolve=False), "module")
    return (*(key for key, value in raw.items() if isinstance(value, str) and "${" in value), *legacy)


