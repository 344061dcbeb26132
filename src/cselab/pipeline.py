"""One run, end to end: build the method and data from the composed config, fit, test the best, write results.

``run.py`` only composes the Hydra config and calls :func:`run`.  Steps:

1. validate the config (names the offending keys before any heavy work);
   a resumed run's config is compared with its checkpoint's (``resume.allow_changed``,
   :mod:`cselab.callbacks.run_config`);
2. build the method (loads the backbone) and, when training, its DataModule with the method's collate;
3. fit with the STS callback validating STS-B dev every ``trainer.val_check_interval`` steps and a
   ``ModelCheckpoint`` keeping the best ``val/stsb_spearman``;
4. reload the best checkpoint and score the 7 test tasks;
5. write ``results.json`` (atomically) in the run's output directory and print the papers' table.
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lightning as L
import torch
from omegaconf import DictConfig, OmegaConf

from cselab.callbacks.run_config import check_resume, resolved_config
from cselab.checkpoint_io import AtomicCheckpointIO
from cselab.config import MOVED_KEYS, has_templates
from cselab.data.datamodule import resolve_num_workers, resolve_pad_to_multiple_of
from cselab.data.paths import data_root, require
from cselab.evaluation.callback import STSCallback
from cselab.evaluation.encoder import SentenceEncoder
from cselab.evaluation.results import build_results, write_results
from cselab.evaluation.sts import PAPER_NAMES, format_table
from cselab.loggers import (
    close_loggers,
    log_test_charts,
    log_transfer_table,
    logged_config,
    run_display_name,
)
from cselab.methods.base import FUSED_CHOICES, ContrastiveMethod
from cselab.methods.cached_step import check_options
from cselab.methods.checks import ConfigError, check_module, refuse_legacy
from cselab.methods.compiled import CompileOptions, compile_training
from cselab.progress import interactive

log = logging.getLogger(__name__)


class RunFinished(FileExistsError):
    """The run directory already holds ``results.json``: the run finished, nothing to continue.

    Attributes:
        results: the finished run's parsed ``results.json`` (``{}`` when unreadable).
    """

    def __init__(self, message: str, results: dict | None = None) -> None:
        super().__init__(message)
        self.results = results or {}


def resolve_precision(precision: str) -> str:
    """``auto`` -> ``bf16-mixed`` on a CUDA GPU that supports it, else ``32-true``."""
    if precision != "auto":
        return precision
    if torch.cuda.is_available() and torch.cuda.is_bf16_supported():
        return "bf16-mixed"
    return "32-true"


def prompt_config(cfg: DictConfig) -> DictConfig | None:
    """The ``prompt`` group's config, or ``None`` for ``prompt=none`` (whose file holds only ``template: null``)."""
    prompt = cfg.get("prompt")
    return prompt if has_templates(prompt) else None


def validate(cfg: DictConfig) -> None:
    """Refuse impossible configs early, naming the keys.

    Raises:
        ConfigError: an out-of-range value or conflicting choices (the message names the keys).
    """
    moved = [key for key in MOVED_KEYS if "." in key and OmegaConf.select(cfg, key, default=None) is not None]
    if moved:  # a YAML (an experiment, a sweep) that still uses an old spelling
        raise ConfigError(f"{moved[0]} moved: it is {MOVED_KEYS[moved[0]]} now (conf/config.yaml)")
    if cfg.loss.get("temperature", 1.0) <= 0:
        raise ConfigError(f"loss.temperature must be > 0, got {cfg.loss.temperature}")
    if cfg.method.train:
        check_optim(cfg.optim)
        if cfg.data.batch_size < 2:
            raise ConfigError(f"data.batch_size must be >= 2 for a contrastive loss, got {cfg.data.batch_size}")
        if cfg.data.module != cfg.setting.name:
            raise ConfigError(
                f"data={cfg.data.module} does not match setting={cfg.setting.name} "
                f"(choose data=unsup/wiki1m for setting=unsup, data=sup for setting=sup)"
            )
    if cfg.method.train and cfg.setting.name == "unsup" and cfg.data.get("streaming") and cfg.trainer.max_steps <= 0:
        raise ConfigError("data.streaming=true has no epoch length: set trainer.max_steps (e.g. 1M / batch_size)")
    _check_template_override(cfg)
    check_templates(cfg)  # every template parsed before any weights load
    if (cfg.method.train and cfg.get("activation_checkpointing", False) and cfg.tuning.name == "prefix"
            and cfg.tuning.get("variant", "deep") != "input_layer"):
        raise ConfigError(
            f"activation_checkpointing=true with tuning=prefix, tuning.variant={cfg.tuning.get('variant', 'deep')}: "
            "the prefixes reach every layer as past_key_values, which Hugging Face's checkpointed layers drop. "
            "Set activation_checkpointing=false, or use tuning.variant=input_layer")
    if cfg.method.train and OmegaConf.select(cfg, "trainer.cached_step.chunk_size") is not None:
        check_options(precision=cfg.trainer.get("precision", "auto"), strategy=cfg.trainer.get("strategy", "auto"))
    if cfg.eval.get("dev_encoder", "official") not in ("official", "test"):
        raise ConfigError(f"eval.dev_encoder={cfg.eval.dev_encoder!r}: expected 'official' or 'test'")
    if cfg.method.train:
        compile_options(cfg)
        try:
            resolve_num_workers(cfg.data.get("num_workers", 0), False)
            resolve_pad_to_multiple_of(cfg.data.get("pad_to_multiple_of"), False)
        except ValueError as err:
            raise ConfigError(str(err)) from None
    check_bootstrap(cfg.eval.get("bootstrap"))
    test_backbone(cfg)  # eval.test_backbone's keys
    node = OmegaConf.to_container(cfg.module, resolve=True)
    check_module(method_target(node.pop("_target_")), node)  # the method's and its embedding model's rules


#: learning rates above this are outside what any of the papers' configs use (largest: 3e-2, soft prompts)
PLAUSIBLE_MAX_LR = 0.1


def check_optim(optim) -> None:
    """``optim.lr`` is a number > 0 (a warning above :data:`PLAUSIBLE_MAX_LR`), ``optim.weight_decay >= 0``,
    ``0 <= optim.warmup_ratio < 1``, ``optim.fused`` auto / true / false.

    Raises:
        ConfigError: names the key, the value and what was expected.
    """
    checks = (("lr", lambda v: v > 0, "a number > 0 (the papers use 1e-5 .. 3e-2)"),
              ("weight_decay", lambda v: v >= 0, "a number >= 0"),
              ("warmup_ratio", lambda v: 0 <= v < 1, "a fraction of the training steps in [0, 1)"))
    for key, ok, expected in checks:
        value = optim.get(key, 0.0 if key != "lr" else None)
        if isinstance(value, bool) or not isinstance(value, int | float) or value != value or not ok(value):
            raise ConfigError(f"optim.{key}={value!r}: expected {expected}")
    fused = optim.get("fused", "auto")
    if fused not in FUSED_CHOICES:  # the method's own values (cselab.methods.base.fused_adamw)
        raise ConfigError(f"optim.fused={fused!r}: expected auto, true or false")
    if optim.lr > PLAUSIBLE_MAX_LR:
        log.warning("optim.lr=%g is far above the papers' learning rates (1e-5 for full fine-tuning .. 3e-2 for "
                    "soft prompts): training will probably diverge; check the value", optim.lr)


def _check_template_override(cfg: DictConfig) -> None:
    """``prompt.template`` is the template of ``prompt=custom`` only: on another prompt (``template: null`` in
    its file) or on ``prompt=none``, refuse with the overrides to type instead.

    Raises:
        ConfigError: names the prompt, its views and the two ways to use the template.
    """
    prompt = cfg.get("prompt") or {}
    template = prompt.get("template")
    name = prompt.get("name") or "none"
    if template is None or name == "custom":
        return
    views = {family: list(views) for family, views in (prompt.get("templates") or {}).items()}
    one_view = ""
    if views:
        family, names = next(iter(views.items()))
        one_view = (f", or change one view of prompt={name} (its views: "
                    + "; ".join(f"{f}: {', '.join(v)}" for f, v in views.items())
                    + f"): prompt.templates.{family}.{names[0]}='{template}'")
    raise ConfigError(
        f"prompt.template='{template}' is read only by prompt=custom, but prompt={name}. To evaluate or train "
        f"with this template, type: prompt=custom prompt.template='{template}'{one_view}")


def check_templates(cfg: DictConfig) -> None:
    """Parse every template of the run's prompt for the backbone's family (``prompt.templates.<family>.*``) as
    the model will (:meth:`cselab.model.template.Template.parse` with ``prompt.mask_index`` for BERT / RoBERTa,
    :func:`cselab.model.decoder_input.split_prompt` for decoders), and check that the views the prompt names
    (``train_views``, ``sup_view``, ``eval_view``) exist: in :func:`validate`, before any weights load.

    Raises:
        ConfigError: the message names the config key the template comes from (``prompt.template`` for
            ``prompt=custom``, ``prompt.file, prompt.line`` for ``prompt=icl_file``, else
            ``prompt.templates.<family>.<view>``) and why.
    """
    from cselab.model.decoder_input import split_prompt
    from cselab.model.template import Template, TemplateError

    prompt = prompt_config(cfg)
    if prompt is None:
        return
    family = str(cfg.backbone.family)
    templates = prompt.get("templates") or {}
    if family not in templates:
        raise ConfigError(f"prompt={prompt.get('name')} has no templates for backbone.family={family} "
                          f"(prompt.templates has {sorted(templates)})")
    views = templates[family]
    raw = OmegaConf.to_container(views, resolve=False)
    for key, view in [*[("prompt.train_views", v) for v in prompt.get("train_views") or []],
                      ("prompt.sup_view", prompt.get("sup_view")), ("prompt.eval_view", prompt.get("eval_view"))]:
        if view is not None and view not in views:
            raise ConfigError(f"{key} names the view {view!r}, which prompt.templates.{family} lacks "
                              f"(its views: {sorted(views)})")
    mask_index = int(prompt.get("mask_index", -1))
    for view in views:
        source = raw[view]
        # the key the user typed: prompt.template (prompt=custom), prompt.file, prompt.line (prompt=icl_file), ...
        references = re.findall(r"\$\{([\w.]+)\}", source) if isinstance(source, str) else []
        key = ", ".join(references) or f"prompt.templates.{family}.{view}"
        try:
            template = views[view]
        except Exception as err:  # e.g. prompt=icl_file: prompt.file / prompt.line name no line
            raise ConfigError(f"{key}: {err}") from err
        try:
            if family == "decoder":
                split_prompt(template)
            else:
                Template.parse(template, mask_index)
        except TemplateError as err:
            raise ConfigError(f"{key}={template!r} (prompt={prompt.get('name')}, backbone.family={family}): "
                              f"{err}") from err


def resolve_ckpt_path(ckpt_path: str | None, output_dir: str | Path) -> str | None:
    """The checkpoint ``trainer.fit`` resumes from.

    ``auto`` (a requeued or relaunched job in the same run directory): the newest of ``checkpoints/last.ckpt``
    and Lightning's SLURM ``hpc_ckpt_<n>.ckpt`` in ``output_dir``, or ``None`` (start at step 0) when there is
    none.  Anything else (``null``, ``last``, ``best``, a path) is Lightning's own ``ckpt_path``.

    Raises:
        FileNotFoundError: ``ckpt_path`` is a path that does not exist (names the key and the path).
    """
    if ckpt_path in (None, "last", "best", "hpc", "registry"):
        return ckpt_path
    output_dir = Path(output_dir)
    if ckpt_path == "auto":
        found = [p for p in [output_dir / "checkpoints" / "last.ckpt", *output_dir.glob("hpc_ckpt_*.ckpt")]
                 if p.is_file()]
        if not found:
            log.info("ckpt_path=auto: no checkpoint in %s yet, training from step 0", output_dir)
            return None
        newest = max(found, key=lambda p: p.stat().st_mtime)
        log.info("ckpt_path=auto: resuming from %s", newest)
        return str(newest)
    if not Path(ckpt_path).is_file():
        raise FileNotFoundError(f"ckpt_path={ckpt_path}: no such checkpoint file (use a path, last, best or auto)")
    return ckpt_path


def resumable_checkpoint(ckpt_path: str | None, output_dir: str | Path) -> str | None:
    """:func:`resolve_ckpt_path`, with a checkpoint that cannot be read (cut short by a crash during its write, a
    full quota) set aside instead of failing every re-run: ``auto`` and ``last`` rename it to
    ``<name>.unreadable-<time>`` (:func:`cselab.checkpoint_io.set_aside`, never deleted), log a warning naming both
    files, and resume from the next newest checkpoint (a SLURM ``hpc_ckpt_<n>.ckpt``) or train from step 0.

    Raises:
        ConfigError: ``ckpt_path`` names a file that cannot be read (names it and the alternatives).
        FileNotFoundError: as :func:`resolve_ckpt_path`.
    """
    from cselab.checkpoint_io import read_error, set_aside

    while True:
        path = resolve_ckpt_path(ckpt_path, output_dir)
        candidate = Path(output_dir) / "checkpoints" / "last.ckpt" if path == "last" else path
        if candidate in (None, "best", "hpc", "registry") or not Path(candidate).is_file():
            return path
        err = read_error(candidate)
        if err is None:
            return path
        if ckpt_path not in ("auto", "last"):
            raise ConfigError(f"ckpt_path={ckpt_path}: the checkpoint cannot be read ({type(err).__name__}: "
                              f"{str(err).splitlines()[0] if str(err) else ''}); pass another checkpoint, "
                              "ckpt_path=auto, or ckpt_path=null to train from step 0")
        aside = set_aside(candidate)
        log.warning("checkpoint %s cannot be read (%s: %s; a write cut short?): set aside as %s (not deleted); "
                    "resuming from the next checkpoint, if any, else training from step 0", candidate,
                    type(err).__name__, str(err).splitlines()[0] if str(err) else "", aside)


def checkpoint_step(ckpt_path: str | None) -> int | None:
    """The global step stored in the checkpoint file ``ckpt_path`` (memory-mapped: the weights are not read), or
    ``None`` when there is no file to resume from (``None``, or Lightning's ``last`` / ``best`` / ... keywords)."""
    if ckpt_path is None or not Path(ckpt_path).is_file():
        return None
    state = torch.load(ckpt_path, map_location="cpu", mmap=True, weights_only=False)
    return int(state.get("global_step", 0))


def compile_options(cfg: DictConfig) -> CompileOptions:
    """The ``compile`` node as :class:`cselab.methods.compiled.CompileOptions`, its combinations checked
    (``compile.enabled: auto`` is on when the run trains on a CUDA GPU).

    Raises:
        ConfigError: a bad ``compile.*`` value or combination (names the keys).
    """
    options = CompileOptions.from_config(cfg.get("compile"))
    options.check(cuda=trains_on_cuda(cfg), activation_checkpointing=bool(cfg.get("activation_checkpointing", False)),
                  cached_step=OmegaConf.select(cfg, "trainer.cached_step.chunk_size") is not None)
    return options


def trains_on_cuda(cfg: DictConfig) -> bool:
    """The run trains on a CUDA GPU: one is available and ``trainer.accelerator`` is ``auto``, ``gpu`` or ``cuda``."""
    accelerator = str(OmegaConf.select(cfg, "trainer.accelerator", default="auto"))
    return torch.cuda.is_available() and accelerator in ("auto", "gpu", "cuda")


def check_data_files(cfg: DictConfig) -> None:
    """Every input file, checked before the backbone is loaded (:mod:`cselab.data.checks`): the training file
    (``data.path``: exists, readable, not empty, not mostly undecodable or control characters, the NLI header)
    and the STS files of every test task and of the dev task (names known, files parse).

    Raises:
        FileNotFoundError: a file is missing (names the path, the config key and how to get the data).
        PermissionError: the training file is not readable.
        ValueError: an unknown task name (names ``eval.test_tasks`` / ``eval.dev_task``) or a bad training file
            (names it and the counts); ``cselab.data.sts.STSFormatError`` for a malformed STS file.
    """
    from cselab.data.checks import check_corpus, check_nli, check_sts_tasks

    if cfg.method.train:
        path = str(cfg.data.path)
        what = "NLI triplets csv" if cfg.setting.name == "sup" else "unsup corpus"
        found = require(path if path.startswith("/") else data_root(cfg.data_dir) / path, what, "data.path")
        share = float(cfg.data.get("max_undecodable_share", 0.01))
        control = float(cfg.data.get("max_control_share", 0.01))
        (check_nli if cfg.setting.name == "sup" else check_corpus)(found, max_undecodable_share=share,
                                                                   max_control_share=control)
    check_sts_tasks(data_root(cfg.data_dir), list(cfg.eval.test_tasks), cfg.eval.dev_task)
    transfer_protocol(cfg)  # the protocol node and the transfer files (counts), long before they are encoded


def transfer_protocol(cfg: DictConfig, check_files: bool = True):
    """The SentEval transfer protocol of ``eval.transfer_mode`` (``transfer.<mode>``), its files checked; None when
    ``eval.transfer_tasks`` is empty.  ``check_files=False`` skips the files' line counts (the caller's evaluator
    checks them itself).

    Raises:
        ConfigError: ``eval.transfer_mode`` names no ``transfer.<mode>`` node, or a bad protocol key (named).
        ValueError: an unknown task in ``eval.transfer_tasks``; FileNotFoundError / ValueError: a missing or
            truncated transfer file (named, with the expected count).
    """
    tasks = list(cfg.eval.get("transfer_tasks") or [])
    if not tasks:
        return None
    from cselab.data.transfer import check_transfer_files
    from cselab.evaluation.transfer import TransferProtocol

    mode = str(cfg.eval.get("transfer_mode", "test"))
    node = cfg.get("transfer", {}).get(mode)
    if node is None:
        raise ConfigError(f"eval.transfer_mode={mode!r}: no transfer.{mode} node; expected one of "
                          f"{sorted(cfg.get('transfer', {}))} (conf/transfer/<mode>.yaml)")
    try:
        protocol = TransferProtocol.from_config(OmegaConf.to_container(node, resolve=True))
        if check_files:
            check_transfer_files(data_root(cfg.data_dir), tasks)
    except ValueError as err:
        raise ConfigError(f"eval.transfer_tasks / transfer.{mode}: {err}") from err
    return protocol


def run_transfer(cfg: DictConfig, method: SentenceEncoder) -> dict[str, Any]:
    """SentEval's transfer tasks on the method's test encoder (after the STS test, so on the tested weights):
    ``{"transfer": {task: {...}, "avg"}, "transfer_protocol": {...}, "transfer_timings_s": {...}}``, or ``{}``."""
    protocol = transfer_protocol(cfg, check_files=False)  # the evaluator checks the files (and validate did)
    if protocol is None:
        return {}
    from cselab.evaluation.transfer import TransferEvaluator, tqdm_progress

    evaluator = TransferEvaluator(data_root(cfg.data_dir), list(cfg.eval.transfer_tasks), protocol)
    progress = tqdm_progress() if interactive() else None
    scores = evaluator.evaluate(lambda s: method.encode(s, batch_size=cfg.eval.batch_size, encoder="test"), progress)
    return {"transfer": scores, "transfer_protocol": protocol.to_dict(), "transfer_timings_s": evaluator.timings}


def method_target(target: str):
    """The class (or factory, ``method=baseline``) that ``method._target_`` names.

    Raises:
        ConfigError: it cannot be imported (names it).
    """
    from hydra.utils import get_object

    try:
        return get_object(target)
    except Exception as err:
        raise ConfigError(f"method._target_={target!r}: cannot import it ({err})") from err


def build_method(cfg: DictConfig, backbone: dict | None = None):
    """The method's LightningModule: the config's ``module`` node instantiated (``_target_`` = the method's
    class, ``conf/method/*.yaml``; its arguments are read from the other groups by ``conf/config.yaml``);
    ``backbone`` replaces the node's ``backbone`` (:func:`test_backbone`).

    Raises:
        ConfigError: ``method._target_`` cannot be imported (names it); what the method refuses.
    """
    node = OmegaConf.to_container(cfg.module, resolve=True)
    if backbone is not None:
        node["backbone"] = backbone
    cls = method_target(node.pop("_target_"))
    refuse_legacy(node)
    return cls(**node)


def test_backbone(cfg: DictConfig) -> dict:
    """The backbone the test scores: the run's (``module.backbone``: ``name_or_path``, ``family``, ``dtype``,
    ``load_in_4bit``, ``decode_cleanup``) with the keys of ``eval.test_backbone`` over it.  PromptEOL's paper rows
    set ``{dtype: float32, load_in_4bit: false}``: trained in 4-bit, tested on the unquantised fp32 base plus the
    adapter (kongds/scaling_sentemb ``eval_checkpoints.sh:46-49``, ``--load_kbit 16``; ``evaluation.py:104-109``).

    Raises:
        ConfigError: ``eval.test_backbone`` is not a mapping, or names a key the backbone does not have.
    """
    trained = OmegaConf.to_container(cfg.module.backbone, resolve=True)
    over = cfg.eval.get("test_backbone")
    if over is None:
        return trained
    if not isinstance(over, DictConfig):
        raise ConfigError(f"eval.test_backbone={over!r}: expected null or a mapping of backbone keys, e.g. "
                          "{dtype: float32, load_in_4bit: false}")
    over = OmegaConf.to_container(over, resolve=True)
    unknown = sorted(set(over) - set(trained))
    if unknown:
        raise ConfigError(f"eval.test_backbone: unknown key(s) {unknown}; expected some of {sorted(trained)}")
    return {**trained, **over}


def tested_weights(backbone: dict) -> dict:
    """``results.json``'s ``test_backbone``: the tested weights' dtype as loaded on this machine (``auto``
    resolved: ``bfloat16`` on a GPU, ``float32`` on CPU) and whether they were 4-bit."""
    from cselab.model.loading import resolve_dtype

    dtype = resolve_dtype(backbone.get("dtype")) or torch.float32
    return {"dtype": str(dtype).removeprefix("torch."), "load_in_4bit": bool(backbone.get("load_in_4bit"))}


@dataclass
class RunContext:
    """What one run knows before its method is built: its config (and that config resolved, once: the loggers'
    and ``results.json``'s), directory, start time (``perf_counter``), the checkpoint it resumes from (None: from
    scratch), that checkpoint's step and the accepted config changes."""

    cfg: DictConfig
    output_dir: Path
    start: float
    ckpt_path: str | None = None
    resume_step: int | None = None
    changed_on_resume: list[dict[str, Any]] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)


@dataclass
class Outcome:
    """What training left: the best checkpoint and its STS-B dev score (None: nothing trained, or a
    ``fast_dev_run``), the last global step, and whether this process is rank 0 (it writes and prints)."""

    best: str | None = None
    best_dev: float | None = None
    global_step: int = 0
    rank_zero: bool = True


def run(cfg: DictConfig, output_dir: str | Path) -> dict[str, Any]:
    """Train (if ``method.train``) and evaluate one configuration; returns the results dict also written to disk.

    Raises:
        RunFinished: ``output_dir`` holds ``results.json`` and ``overwrite`` is false.
        ConfigError: what :func:`validate` refuses; a ``resume`` directory without a checkpoint.
    """
    ctx = prepare(cfg, output_dir)
    L.seed_everything(cfg.seed, workers=True)
    method = build_run_method(cfg)
    callbacks = build_callbacks(cfg, runtime_arguments(ctx), names=None if cfg.method.train else ("sts",))
    loggers = start_loggers(ctx, method)
    if cfg.method.train:
        outcome = fit_and_test(ctx, method, callbacks, loggers)
    else:  # nothing to train: the evaluator scores the model's encode directly, no Trainer
        callbacks["sts"].evaluate_encoder(method, dev_encoder="test")  # STS-B dev as evaluation.py --mode dev
        _log_scores(loggers, callbacks["sts"], step=0)
        outcome = Outcome()
    return finish(ctx, method, callbacks["sts"], loggers, outcome)


def prepare(cfg: DictConfig, output_dir: str | Path) -> RunContext:
    """Everything checked before the backbone loads: a finished run refused, the config validated, every input
    file present, the checkpoint to resume from, and the new command against that checkpoint's config
    (``resume.allow_changed``).

    Raises:
        RunFinished, ConfigError: as :func:`run`.
    """
    start, output_dir = time.perf_counter(), Path(output_dir)
    if (output_dir / "results.json").exists() and not cfg.get("overwrite", False):
        raise RunFinished(
            f"{output_dir / 'results.json'} exists: this run already finished. Pass overwrite=true to run it "
            "again in the same directory, or name another run with run_name=...",
            _read_json(output_dir / "results.json"),
        )
    resume_dir = OmegaConf.select(cfg, "resume.dir")
    if resume_dir and cfg.method.train and not (
            (output_dir / "checkpoints" / "last.ckpt").is_file() or any(output_dir.glob("hpc_ckpt_*.ckpt"))):
        raise ConfigError(f"resume={resume_dir}: no checkpoints/last.ckpt in that directory to resume from "
                          "(a run writes it at its first validation)")
    validate(cfg)
    check_data_files(cfg)  # every input file, before the backbone loads and long before fit ends
    ckpt_path = None
    if cfg.method.train:
        ckpt_path = cfg.get("ckpt_path")
        if ckpt_path == "auto" and (output_dir / "results.json").exists():  # overwrite=true: a fresh run
            ckpt_path = None
        ckpt_path = resumable_checkpoint(ckpt_path, output_dir)
    resume_step = checkpoint_step(ckpt_path)
    changed = check_resume(cfg, ckpt_path, resume_step)  # before the backbone loads
    return RunContext(cfg, output_dir, start, ckpt_path, resume_step, changed, resolved_config(cfg))


def build_run_method(cfg: DictConfig):
    """The run's method (:func:`build_method`); a run that trains nothing is built on the test backbone
    (``eval.test_backbone``) at once.  An embedding model gets activation checkpointing and a compiled training
    forward as configured (:func:`cselab.methods.compiled.compile_training`; a token representation has no forward
    pass to change)."""
    method = build_method(cfg) if cfg.method.train else build_method(cfg, backbone=test_backbone(cfg))
    if isinstance(method, ContrastiveMethod):
        if cfg.method.train and cfg.get("activation_checkpointing", False):
            method.encoder.enable_activation_checkpointing()
        options = compile_options(cfg)
        quantized = bool(OmegaConf.select(cfg, "backbone.load_in_4bit", default=False))
        if cfg.method.train and options.active(trains_on_cuda(cfg), quantized):
            compile_training(method, options)
            log.info("torch.compile of the training forward: %s", options.kwargs())
    return method


def runtime_arguments(ctx: RunContext) -> dict[str, dict[str, Any]]:
    """The ``???`` arguments of ``conf/callbacks/default.yaml`` that only the run knows, by callback name."""
    checkpoints = ctx.output_dir / "checkpoints"
    return {"sts": {"started": ctx.start, "run_dir": str(ctx.output_dir)},  # run_dir: a whitened baseline's ckpt
            "run_config": {"config": ctx.config, "changes": ctx.changed_on_resume,
                           "resume_step": ctx.resume_step},
            "checkpoint": {"dirpath": checkpoints}, "last_checkpoint": {"dirpath": checkpoints}}


def build_callbacks(cfg: DictConfig, runtime: dict[str, dict[str, Any]],
                    names: tuple[str, ...] | None = None) -> dict[str, L.Callback]:
    """The ``callbacks`` node instantiated in its order (lightning-hydra-template's ``instantiate_callbacks``):
    name -> callback; a null node, or one with ``enabled: false``, is left out; ``runtime`` fills the ``???``
    arguments by name; ``names``: only these (a run without a Trainer builds ``sts`` alone).

    Raises:
        ConfigError: a node without ``_target_``, or a ``???`` argument the run does not fill (names it).
    """
    from hydra.utils import instantiate

    built: dict[str, L.Callback] = {}
    for name, node in (cfg.get("callbacks") or {}).items():
        if node is None or (names is not None and name not in names):
            continue
        if not isinstance(node, DictConfig) or "_target_" not in node:
            raise ConfigError(f"callbacks.{name}: expected a node with a _target_ (a Lightning callback class) or "
                              f"null, got {node!r}")
        given = runtime.get(str(name), {})
        params = {k: v for k, v in OmegaConf.to_container(node, resolve=True).items() if k not in given}
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


def start_loggers(ctx: RunContext, method) -> list:
    """The ``logger`` node instantiated (``conf/logger/*.yaml``: :func:`cselab.loggers.build_loggers`) with the
    run's tags and name; each gets the run's config and, on a fresh run, the trainable-parameter count."""
    from hydra.utils import instantiate

    cfg = ctx.cfg
    backbone = cfg.backbone.get("name", str(cfg.backbone.name_or_path))
    tags = [cfg.method.name, backbone, cfg.setting.name, f"loss={cfg.loss.name}", f"tuning={cfg.tuning.name}"]
    if prompt_config(cfg):
        tags.append(f"prompt={cfg.prompt.name}")
    tags.append(_short_tag(f"variant={cfg.get('variant') or 'default'}"))
    name = run_display_name(cfg.method.name, backbone, cfg.setting.name, cfg.get("variant"), cfg.seed)
    loggers = instantiate(cfg.logger, output_dir=str(ctx.output_dir), tags=tags, name=name,
                          resume_step=ctx.resume_step)
    config = logged_config(ctx.config)
    for logger in loggers:
        logger.log_hyperparams(config)
        if ctx.resume_step is None:  # a resumed run's CSV / W&B run has it already
            logger.log_metrics({"model/trainable_parameters": float(method.num_trainable_parameters())}, step=0)
    return loggers


def build_trainer(cfg: DictConfig, callbacks: list[L.Callback], loggers: list, output_dir: Path) -> L.Trainer:
    """The ``trainer`` node instantiated (``_target_: lightning.Trainer``) with the run's callbacks, loggers,
    directory and atomic checkpoint writes (``trainer.cached_step`` is the module's: left out); validation by steps (``val_check_interval``) across epochs, no
    sanity validation; ``precision: auto`` resolved (:func:`resolve_precision`); bars only in a terminal."""
    from hydra.utils import instantiate

    bars = bool(cfg.trainer.get("enable_progress_bar", True)) and interactive()
    node = OmegaConf.to_container(cfg.trainer, resolve=True)
    node.pop("cached_step", None)  # the module's (ContrastiveMethod(cached_step=...))
    return instantiate(node, precision=resolve_precision(cfg.trainer.get("precision", "auto")),
                       enable_progress_bar=bars, callbacks=callbacks, logger=loggers or False,
                       default_root_dir=str(output_dir), check_val_every_n_epoch=None, num_sanity_val_steps=0,
                       plugins=[AtomicCheckpointIO()])


def build_datamodule(cfg: DictConfig, method) -> L.LightningDataModule:
    """The training DataModule: the ``data.datamodule`` node instantiated (``conf/data/*.yaml``'s ``_target_``)
    with the method's training collate.

    Raises:
        ConfigError: ``data.datamodule`` is missing or has no ``_target_``.
    """
    from hydra.utils import instantiate

    node = cfg.data.get("datamodule")
    if not isinstance(node, DictConfig) or "_target_" not in node:
        raise ConfigError(f"data.datamodule: expected a node with a _target_ (a LightningDataModule class), got "
                          f"{node!r}")
    cuda = trains_on_cuda(cfg)
    given = OmegaConf.to_container(node, resolve=True)
    try:
        workers = resolve_num_workers(given.get("num_workers", 0), cuda)
        multiple = resolve_pad_to_multiple_of(given.get("pad_to_multiple_of"), cuda)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    extra = {"pad_to_multiple_of": multiple} if "pad_to_multiple_of" in given else {}
    return instantiate(node, collate=method.train_collate, pin_memory=torch.cuda.is_available(), num_workers=workers,
                       **extra)


def fit_and_test(ctx: RunContext, method, callbacks: dict[str, L.Callback], loggers: list) -> Outcome:
    """Fit with the callbacks (STS-B dev every ``val_check_interval``, the best checkpoint kept), then test
    the best checkpoint; with ``eval.test_backbone`` its trained tensors on the backbone reloaded with those
    keys (PromptEOL's rows: trained in 4-bit, tested in fp32)."""
    cfg, sts = ctx.cfg, callbacks["sts"]
    trainer = build_trainer(cfg, list(callbacks.values()), loggers, ctx.output_dir)
    datamodule = build_datamodule(cfg, method)
    trainer.fit(method, datamodule=datamodule, ckpt_path=ctx.ckpt_path, weights_only=False)
    best, best_dev = validate_at_end(trainer, method, sts, callbacks.get("checkpoint"), ctx.output_dir)
    from cselab.signals import sigterm_stops

    with sigterm_stops("test"):  # the test phase is one callback call: Lightning alone would ignore SIGTERM
        _test_best(ctx, trainer, method, datamodule, sts, loggers, best)
    return Outcome(best, best_dev, int(trainer.global_step), trainer.is_global_zero)


def _test_best(ctx: RunContext, trainer: L.Trainer, method, datamodule, sts: STSCallback, loggers: list,
               best: str | None) -> None:
    """Score the best checkpoint on the test tasks (:func:`fit_and_test`)."""
    cfg = ctx.cfg
    reload = test_backbone(cfg)
    if reload != OmegaConf.to_container(cfg.module.backbone, resolve=True) and best:
        from cselab.loading import load

        log.info("testing %s on the backbone reloaded with eval.test_backbone=%s", best,
                 OmegaConf.to_container(cfg.eval.test_backbone, resolve=True))
        if trainer.is_global_zero:
            tested = load(best, backbone=reload).to(method.device)
            sts.evaluate_encoder(tested, dev_encoder="dev")
            _log_scores(loggers, sts, step=int(trainer.global_step))
            del tested
    else:
        trainer.test(method, datamodule=datamodule, ckpt_path=best, weights_only=False)


def finish(ctx: RunContext, method, sts: STSCallback, loggers: list, outcome: Outcome) -> dict[str, Any]:
    """``results.json`` (rank 0 writes it, with ``test_pairs.npz``), the papers' table printed, the loggers
    closed; returns the results."""
    cfg = ctx.cfg
    results, transfer, by_bin = collect_results(ctx, method, sts, outcome)
    if not outcome.rank_zero:  # under DDP only rank 0 writes and prints
        close_loggers(loggers)
        return results
    if sts.test_pairs:
        from cselab.evaluation.pair_scores import PAIRS_FILE, write_pair_scores

        write_pair_scores(ctx.output_dir / PAIRS_FILE, sts.test_pairs, sts.test_subsets, cfg.eval.aggregation)
    path = write_results(ctx.output_dir / "results.json", results)
    if cfg.method.train and not OmegaConf.select(cfg, "checkpointing.keep_last", default=True):
        from cselab.checkpoint_io import remove_last

        if freed := remove_last(ctx.output_dir / "checkpoints"):
            log.info("removed checkpoints/last.ckpt (%.0f MB; the run finished: checkpointing.keep_last=false)",
                     freed / 2**20)
    print_results(cfg, results, path)
    if transfer:
        from cselab.evaluation.transfer import TRANSFER_NAMES, format_transfer_table

        print(f"transfer ({transfer['transfer_protocol']['mode']}, accuracy x 100)\n"
              f"{format_transfer_table(transfer['transfer'], list(cfg.eval.transfer_tasks))}")
        log_transfer_table(loggers, transfer["transfer"], TRANSFER_NAMES)
    log_test_charts(loggers, results["test"], by_bin, PAPER_NAMES, results.get("test_ci"))
    close_loggers(loggers)
    return results


def collect_results(ctx: RunContext, method, sts: STSCallback, outcome: Outcome):
    """``(results, transfer, by_bin)``: the results dict (:func:`cselab.evaluation.results.build_results`), the
    SentEval transfer scores (rank 0, ``eval.transfer_tasks``) and STS-B test's cosines by gold-score bin."""
    cfg = ctx.cfg
    bins, by_bin = None, None
    if sts.test_pairs.get("stsb"):
        from cselab.evaluation.gold_bins import cosine_by_gold_bin

        by_bin = cosine_by_gold_bin(*sts.test_pairs["stsb"])
        bins = {b: {"n": int(len(c)), "mean": float(c.mean()) if len(c) else None,
                    "std": float(c.std()) if len(c) else None} for b, c in by_bin.items()}
    transfer = run_transfer(cfg, method) if outcome.rank_zero else {}
    intervals = _test_intervals(cfg, sts) if outcome.rank_zero and sts.test_pairs else None
    results = build_results(
        sts.test_scores,
        sts.dev_scores,
        ctx.config,
        val_curve=sts.history,
        best_checkpoint=outcome.best,
        best_dev=outcome.best_dev,
        dev_encoder=dev_encoder_used(cfg, method),
        test_backbone=tested_weights(test_backbone(cfg)),
        trainable_parameters=method.num_trainable_parameters(),
        global_step=outcome.global_step,
        wall_time_s=round(time.perf_counter() - ctx.start + sts.elapsed_before, 1),  # + earlier processes (resume)
        stsb_test_cosine_by_gold_bin=bins,
        changed_on_resume=ctx.changed_on_resume,
        **(intervals or {}),
        **transfer,
    )
    return results, transfer, by_bin


def print_results(cfg: DictConfig, results: dict[str, Any], path: Path) -> None:
    """The papers' STS table of ``results``, its interval line, and the STS-B dev score with its encoder."""
    table = format_table(results["test"], results.get("test_ci"))
    print(f"\n{cfg.method.name} | {cfg.backbone.name_or_path} | {cfg.setting.name} | STS (Spearman x 100)\n{table}")
    trained = f"   trainable parameters: {results['trainable_parameters']:,}" if cfg.method.train else ""
    if results.get("test_ci_info"):
        info = results["test_ci_info"]
        print(f"interval: {100 * info['level']:g} % {info['method']}, {info['n_resamples']} resamples "
              f"of the {info['resampled']} (seed {info['seed']}); not the variance over training seeds")
    encoder = DEV_ENCODER_WORDS[results["dev_encoder"]]
    print(f"STS-B dev: {results['dev'].get('stsb', float('nan')):.2f} ({encoder}){trained}   results: {path}")


def check_bootstrap(options) -> None:
    """``eval.bootstrap``: ``n_resamples`` an int >= 0 (0: off; else >= 100), ``level`` in (0, 1), ``method``
    ``percentile`` or ``basic``, ``seed`` an int.

    Raises:
        ConfigError: names the key, the value and what was expected.
    """
    from cselab.evaluation.stats import METHODS

    if options is None:
        return
    n = options.get("n_resamples", 1000)
    if isinstance(n, bool) or not isinstance(n, int) or (n != 0 and n < 100):
        raise ConfigError(f"eval.bootstrap.n_resamples={n!r}: expected 0 (no intervals) or an int >= 100 "
                          "(1000 is the default)")
    seed = options.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ConfigError(f"eval.bootstrap.seed={seed!r}: expected an int")
    level = options.get("level", 0.95)
    if isinstance(level, bool) or not isinstance(level, int | float) or not 0 < level < 1:
        raise ConfigError(f"eval.bootstrap.level={level!r}: expected a confidence level in (0, 1), e.g. 0.95")
    if options.get("method", "percentile") not in METHODS:
        raise ConfigError(f"eval.bootstrap.method={options.get('method')!r}: expected one of {', '.join(METHODS)}")


def _test_intervals(cfg: DictConfig, sts: STSCallback) -> dict | None:
    """``results.json``'s ``test_ci`` / ``test_ci_info`` from the test pairs (``eval.bootstrap``), timed."""
    from cselab.evaluation.results import score_intervals

    options = cfg.eval.get("bootstrap") or {}
    started = time.perf_counter()
    out = score_intervals(sts.test_pairs, sts.test_subsets, cfg.eval.aggregation,
                         n_resamples=int(options.get("n_resamples", 1000)), seed=int(options.get("seed", 0)),
                         level=float(options.get("level", 0.95)), method=str(options.get("method", "percentile")))
    if out is not None:
        out["test_ci_info"]["seconds"] = round(time.perf_counter() - started, 2)
        log.info("test intervals: %d bootstrap resamples in %.2f s", out["test_ci_info"]["n_resamples"],
                 out["test_ci_info"]["seconds"])
    return out


#: ``results.json``'s ``dev_encoder`` -> the words the console prints beside the STS-B dev score
DEV_ENCODER_WORDS = {
    "test": "the test encoder",
    "in_training": "the in-training dev encoder that selected the checkpoint, not the test encoder: eval.dev_encoder",
}


def dev_encoder_used(cfg: DictConfig, method) -> str:
    """Which encoder gave the reported STS-B dev score: ``test`` (a run that trains nothing, as the official
    evaluation.py ``--mode dev``; or a method whose dev and test encoders are the same) or ``in_training`` (the
    official trainers' dev batcher that selected the checkpoint, ``eval.dev_encoder=official``: PromptBERT without
    the period rule and with the template bias subtracted, CoT-BERT and OptiPrompt without the period rule)."""
    differs = isinstance(method, ContrastiveMethod) and method.spec.dev_encoder is not None
    return "in_training" if cfg.method.train and differs else "test"


def validate_at_end(trainer: L.Trainer, method, sts: STSCallback, checkpoint, output_dir: Path):
    """The best checkpoint and its STS-B dev score after ``fit``.  A fit that never reached
    ``trainer.val_check_interval`` (a run under 125 steps) is validated now, at its last step, and saved as
    ``checkpoints/best-step<N>.ckpt``, so that every trained run records a best checkpoint.

    Returns:
        (path or None, score or None): None when nothing was trained (no ``checkpoint`` callback) or in a
        ``trainer.fast_dev_run`` (no checkpoints: the weights in memory are tested, as before).
    """
    if checkpoint is None:
        return None, None
    if checkpoint.best_model_path:
        score = checkpoint.best_model_score
        return checkpoint.best_model_path, (float(score) if score is not None else None)
    if trainer.fast_dev_run:  # a plumbing check: Lightning writes no checkpoint; the weights in memory are tested
        return None, None
    if sts.history and sts.history[-1]["step"] == trainer.global_step:  # validated at this step, not saved
        score = float(sts.history[-1]["stsb_dev"])
    else:
        log.info("training ended at step %d before any validation (trainer.val_check_interval=%s): validating now",
                 trainer.global_step, trainer.val_check_interval)
        score = sts.validate(trainer, method)
    path = Path(output_dir) / "checkpoints" / f"best-step{int(trainer.global_step)}.ckpt"
    trainer.save_checkpoint(path, weights_only=bool(getattr(checkpoint, "save_weights_only", False)))
    return str(path), score


def _log_scores(loggers, sts: STSCallback, step: int) -> None:
    """The test scores and the dev score of an evaluation without ``trainer.test`` to the loggers."""
    for logger in loggers:
        logger.log_metrics({**{f"test/{t}": float(v) for t, v in sts.test_scores.items()},
                            **{f"test/{t}_dev": float(v) for t, v in sts.dev_scores.items()}}, step=step)
        logger.save()


def _short_tag(tag: str, limit: int = 64) -> str:
    """W&B refuses tags over 64 characters: a longer one keeps its start and a hash of the whole."""
    if len(tag) <= limit:
        return tag
    import hashlib

    digest = hashlib.sha1(tag.encode()).hexdigest()[:8]
    return f"{tag[: limit - 9]}~{digest}"


def _read_json(path: Path) -> dict:
    """A JSON file's object, or ``{}`` when it cannot be read."""
    import json

    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def disk_full_record(err: BaseException, output_dir: str | Path) -> dict[str, Any]:
    """``{"cause": "disk full", "path", "free_bytes"}`` when ``err`` or an exception in its chain is a full disk
    (:class:`cselab.files.DiskFullError`, or an ``OSError`` ENOSPC / EDQUOT written outside
    :func:`cselab.files.staged`), else ``{}``.  ``path``: the file being written (else ``output_dir``);
    ``free_bytes``: the free space when the write failed (else now)."""
    from cselab.files import DiskFullError, disk_full_error, exception_chain, free_bytes

    chain = exception_chain(err)
    full = next((e for e in chain if isinstance(e, DiskFullError)), None)
    if full is None:
        path = next((e.filename for e in chain if isinstance(e, OSError) and e.filename), None) or output_dir
        full = disk_full_error(err, path, free_bytes(path))
    if full is None:
        return {}
    return {"cause": "disk full", "path": str(full.filename),
            "free_bytes": full.free_bytes if full.free_bytes is not None else free_bytes(full.filename)}


def record_failure(output_dir: str | Path, err: BaseException) -> Path | None:
    """Write ``failed.json`` (error type, message, traceback; for a full disk also ``cause``, ``path`` and
    ``free_bytes``, :func:`disk_full_record`) in a run's directory; the report lists it.

    Never raises: when the file cannot be written (a full disk, a read-only folder), the failure and the reason
    are logged instead and ``None`` is returned, so a sweep's handler goes on with the next job.
    """
    import json
    import traceback

    from cselab.files import atomic_write_text

    try:
        info = {
            "error": type(err).__name__,
            "message": str(err),
            "traceback": "".join(traceback.format_exception(type(err), err, err.__traceback__)),
        }
        info.update(disk_full_record(err, output_dir))
        return atomic_write_text(Path(output_dir) / "failed.json", json.dumps(info, indent=2) + "\n")
    except Exception as write_err:
        log.error("could not write %s (%s: %s); the run failed with %s: %s", Path(output_dir) / "failed.json",
                  type(write_err).__name__, write_err, type(err).__name__, err)
        return None
