"""What a model target names: the one resolver of every command that takes a model.

``cselab transfer``, ``cselab mteb``, ``cselab export``, ``cselab analysis`` and ``cselab.load`` (so RankCSE's
teachers that exist as paths) take the same targets (:data:`TARGETS`), told apart here, from the file system only
(nothing is loaded):

* a **run directory** (``results.json`` or ``checkpoints/``): its best checkpoint (:func:`cselab.io.targets.
  best_checkpoint`);
* a **checkpoint** (a file, ``.ckpt``);
* an **exported folder** (``modules.json``: a sentence-transformers folder, ``cselab export``'s; or
  ``cselab_model.json``: a saved embedding model);
* a **backbone**: a ``conf/backbone`` name of this repository (``minilm_l6``, ``bert_base`` ...: its
  ``name_or_path`` and ``family``), a model folder (``config.json``), ``package:<module>`` or a Hugging Face id.

A path that does not exist and cannot be a hub id (``.ckpt``, ``/``, ``./``, ``~``, more than one ``/``), a folder
that is none of the above, or a run directory without a best checkpoint raise :class:`TargetError`, whose message
lists :data:`TARGETS` (one message for every command).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

#: sentence-transformers' module list of a folder
MODULES_FILE = "modules.json"
#: the spec of a folder saved by :meth:`cselab.model.embedding.EmbeddingModel.save`
CSELAB_MODEL_FILE = "cselab_model.json"
#: this repository's named backbones (``conf/backbone/<name>.yaml``; absent outside a clone)
CONF_BACKBONES = Path(__file__).resolve().parents[3] / "conf" / "backbone"
#: what a model target may be, as every command's help and error message say it
TARGETS = ("a run directory (results.json or checkpoints/), a checkpoint (.ckpt), an exported folder (modules.json "
           "or cselab_model.json) or a backbone (a conf/backbone name such as minilm_l6, a Hugging Face id, a model "
           "folder or package:<module>)")

Kind = Literal["run_dir", "checkpoint", "exported", "backbone"]


def best_checkpoint(run_dir: str | Path) -> Path:
    """The best checkpoint of a run directory: ``results.json``'s ``best_checkpoint`` when that file exists, else
    the newest ``checkpoints/best-*.ckpt``.

    Raises:
        FileNotFoundError: no best checkpoint (a run with ``method.train=false`` has none: evaluate its backbone
            instead).
    """
    path = Path(run_dir)
    best = None
    if (path / "results.json").is_file():
        best = json.loads((path / "results.json").read_text(encoding="utf-8")).get("best_checkpoint")
    if best and not Path(best).is_file() and (path / "checkpoints" / Path(best).name).is_file():
        best = str(path / "checkpoints" / Path(best).name)  # a run directory moved or copied elsewhere
    ckpts = [Path(best)] if best and Path(best).is_file() else sorted(
        (path / "checkpoints").glob("best-*.ckpt"), key=lambda p: p.stat().st_mtime)
    if not ckpts:
        raise FileNotFoundError(f"{path}: no best checkpoint (results.json best_checkpoint or "
                                "checkpoints/best-*.ckpt); a run with method.train=false has none: pass its "
                                "backbone and --pooler instead")
    return ckpts[-1]


class TargetError(FileNotFoundError):
    """A model target that names none of :data:`TARGETS` (the message says which and lists them)."""


@dataclass(frozen=True)
class ModelTarget:
    """A resolved model target.

    Attributes:
        given: the target as typed.
        kind: ``run_dir`` | ``checkpoint`` | ``exported`` | ``backbone``.
        path: the checkpoint file (``run_dir``: its best checkpoint; ``checkpoint``), the folder (``exported``) or
            the backbone's ``name_or_path`` (a hub id, folder or ``package:<module>``; a ``conf/backbone`` name's
            own ``name_or_path``).
        family: a named backbone's ``family`` (``conf/backbone/<name>.yaml``), else None (read from the model).
    """

    given: str
    kind: Kind
    path: str
    family: str | None = None


def is_exported_folder(path: str | os.PathLike) -> bool:
    """``path`` is a folder with ``modules.json`` (a sentence-transformers folder) or ``cselab_model.json`` (a
    saved cselab embedding model)."""
    path = Path(path)
    return path.is_dir() and ((path / MODULES_FILE).is_file() or (path / CSELAB_MODEL_FILE).is_file())


def named_backbone(name: str) -> tuple[str, str | None] | None:
    """``(name_or_path, family)`` of a ``conf/backbone/<name>.yaml`` of this repository, or None (not a name)."""
    conf = CONF_BACKBONES / f"{name}.yaml"
    if not name or "/" in name or name == "auto" or not conf.is_file():
        return None
    import yaml

    spec = yaml.safe_load(conf.read_text(encoding="utf-8")) or {}
    if not spec.get("name_or_path"):
        return None
    return str(spec["name_or_path"]), spec.get("family")


def resolve_target(target: str | os.PathLike) -> ModelTarget:
    """The model ``target`` names (module docstring); nothing is loaded.

    Raises:
        TargetError: the module docstring's cases (the message names the target and lists :data:`TARGETS`).
    """
    given = str(target)
    path = Path(os.path.expanduser(given))
    if is_exported_folder(path):
        return ModelTarget(given, "exported", str(path))
    if path.is_dir() and ((path / "results.json").is_file() or (path / "checkpoints").is_dir()):  # run dir
        try:
            return ModelTarget(given, "run_dir", str(best_checkpoint(path)))
        except FileNotFoundError as err:
            raise TargetError(f"{err}") from None
    if path.is_file():
        return ModelTarget(given, "checkpoint", str(path))
    if path.is_dir():
        if (path / "config.json").is_file():
            return ModelTarget(given, "backbone", str(path))
        raise TargetError(f"{given} is a folder but not a model: expected {TARGETS}")
    named = named_backbone(given)
    if named is not None:
        return ModelTarget(given, "backbone", named[0], named[1])
    could_be_hub_id = not (given.endswith(".ckpt") or given.startswith(("/", ".", "~")) or given.count("/") > 1
                           or "\\" in given)
    if given.startswith("package:") or could_be_hub_id:
        return ModelTarget(given, "backbone", given)
    raise TargetError(f"{given} does not exist: expected {TARGETS}")
