"""An exported folder as an encoder: the one loader of every command that takes "an exported folder".

A folder written by ``cselab export`` -- plain sentence-transformers modules (``modules.json``: ``Transformer`` +
``Pooling`` [+ ``Dense``]) or cselab's ``st_module`` (``cselab_model.json`` beside ``modules.json``) -- or any
other sentence-transformers folder is encoded exactly as ``SentenceTransformer(folder)`` encodes it: the folder's
``modules.json`` and pooling config decide the pooler, never a command's ``--pooler`` default.  ``cselab transfer``,
``cselab mteb`` and ``cselab.load`` all go through :func:`load_exported`; :func:`describe_folder` is the line they
print (pooler, head, template).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from cselab.io.targets import CSELAB_MODEL_FILE, MODULES_FILE, is_exported_folder

__all__ = ["ExportedEncoder", "describe_folder", "encoder_line", "load_exported", "uses_shipped_code"]


def _json(path: Path, default: Any) -> Any:
    """The JSON file ``path``, or ``default`` when there is none."""
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else default


def _module_config(folder: Path, module: dict[str, Any]) -> dict[str, Any]:
    """The ``config.json`` of a ``modules.json`` entry (``{}`` when it has none)."""
    return _json(folder / module.get("path", "") / "config.json", {})


def uses_shipped_code(folder: str | os.PathLike) -> bool:
    """The folder's ``modules.json`` names a module of the ``cselab.model`` code it ships (``st_module.*``: the
    cselab encoder, BERT-whitening), which loads only with ``trust_remote_code=True``."""
    return any(str(m.get("type", "")).startswith("st_module.") for m in _json(Path(folder) / MODULES_FILE, []))


def _whitening_of(folder: Path) -> dict[str, Any] | None:
    """``{"dim", "k", "normalize"}`` of the folder's ``CselabWhitening`` module (its config.json), or None."""
    for module in _json(folder / MODULES_FILE, []):
        if str(module.get("type", "")).endswith(".CselabWhitening"):
            config = _module_config(folder, module)
            return {"dim": config.get("in_features"), "k": config.get("out_features"),
                    "normalize": config.get("normalize")}
    return None


def describe_folder(folder: str | os.PathLike) -> dict[str, Any]:
    """What the folder computes, read from its files (no weights loaded): ``{"format", "pooler", "head",
    "template", "normalize", "whitening"}`` (``whitening``: None or ``{"dim", "k", "normalize"}`` of a
    ``st_module.CselabWhitening`` module).

    ``format``: ``sentence-transformers`` (plain modules) or ``cselab st_module``; ``pooler``: the ``Pooling``
    mode (``cls``, ``mean`` ...) or the cselab pooler; ``head``: ``none``, ``Dense(<activation>)`` or the cselab
    head; ``template``: the cselab template or ``none``.

    Raises:
        FileNotFoundError: not an exported folder (:func:`is_exported_folder`).
    """
    folder = Path(folder)
    if not is_exported_folder(folder):
        raise FileNotFoundError(f"{folder}: not an exported folder (no {MODULES_FILE} or {CSELAB_MODEL_FILE})")
    if (folder / CSELAB_MODEL_FILE).is_file():
        spec = _json(folder / CSELAB_MODEL_FILE, {})
        view = spec.get("eval_view") or [None, None]
        use_head = spec.get("head") not in (None, "none") and not spec.get("mlp_only_train", False)
        return {"format": "cselab st_module", "pooler": spec.get("pooler"),
                "head": spec.get("head") if use_head else "none", "template": view[1] or "none",
                "normalize": False, "whitening": _whitening_of(folder)}
    pooler, heads, normalize, whitening = "none", [], False, None
    for module in _json(folder / MODULES_FILE, []):
        kind = str(module.get("type", "")).rpartition(".")[2]
        config = _module_config(folder, module)
        if kind == "Pooling":
            pooler = config.get("pooling_mode") or ",".join(
                k.removeprefix("pooling_mode_").removesuffix("_token") for k, v in config.items()
                if k.startswith("pooling_mode_") and v is True) or "none"
        elif kind == "Dense":
            activation = str(config.get("activation_function", "")).rpartition(".")[2] or "Identity"
            heads.append(f"Dense({config.get('in_features')}->{config.get('out_features')}, {activation})")
        elif kind == "Normalize":
            normalize = True
        elif kind == "CselabWhitening":
            whitening = _whitening_of(folder)
    return {"format": "sentence-transformers", "pooler": pooler, "head": " + ".join(heads) or "none",
            "template": "none", "normalize": normalize, "whitening": whitening}


def encoder_line(info: dict[str, Any]) -> str:
    """One header line from a ``describe()`` dict (a method's, or :func:`describe_folder`'s): ``encoder: pooler=cls,
    head=none, template=none``."""
    head = info.get("head") or "none"
    if info.get("use_head") is False and head != "none":
        head = f"{head} (training only)"
    parts = [f"pooler={info.get('pooler')}", f"head={head}", f"template={info.get('template') or 'none'}"]
    if info.get("format"):
        parts.insert(0, info["format"])
    if info.get("whitening"):
        parts.append(f"whitening={info['whitening'].get('dim')}->{info['whitening'].get('k')}")
    if info.get("normalize"):
        parts.append("normalized")
    return "encoder: " + ", ".join(parts)


class ExportedEncoder:
    """``SentenceTransformer(folder)`` with cselab's ``encode(sentences, batch_size=None) -> Tensor[N, D]``.

    ``trust_remote_code`` is set for a cselab ``st_module`` folder only (its ``cselab_model.json``), as the
    folder's model card says.

    Args:
        folder: the exported folder.
        device: where to run it (default ``cpu``).
    """

    def __init__(self, folder: str | os.PathLike, device: str = "cpu") -> None:
        from sentence_transformers import SentenceTransformer

        self.folder = Path(folder)
        remote = (self.folder / CSELAB_MODEL_FILE).is_file() or uses_shipped_code(self.folder)
        self.model = SentenceTransformer(str(self.folder), device=device, trust_remote_code=remote)
        self.model.eval()

    def encode(self, sentences: Sequence[str], batch_size: int | None = None, **_: Any) -> torch.Tensor:
        """Embeddings (N, D) float32 on the CPU, rows in the order of ``sentences``."""
        sentences = [str(s) for s in sentences]
        out = self.model.encode(sentences, batch_size=batch_size or 32, convert_to_tensor=True,
                                show_progress_bar=False)
        return out.detach().float().cpu().reshape(len(sentences), -1)

    def describe(self) -> dict[str, Any]:
        """:func:`describe_folder` of the folder."""
        return describe_folder(self.folder)

    def parameters(self):
        """The model's parameters (MTEB's parameter count)."""
        return self.model.parameters()

    def eval(self) -> ExportedEncoder:
        """Already in eval mode; returns itself."""
        return self


def load_exported(folder: str | os.PathLike, device: str = "cpu"):
    """The encoder of an exported folder: :class:`ExportedEncoder` when it has ``modules.json``; a bare saved
    embedding model (``cselab_model.json`` only, :meth:`cselab.model.embedding.EmbeddingModel.save`) loads as that
    model.

    Raises:
        FileNotFoundError: not an exported folder.
    """
    folder = Path(folder)
    if (folder / MODULES_FILE).is_file():
        return ExportedEncoder(folder, device=device)
    if (folder / CSELAB_MODEL_FILE).is_file():
        from cselab.model.embedding import EmbeddingModel

        return EmbeddingModel.load(folder, device=device).eval()
    raise FileNotFoundError(f"{folder}: not an exported folder (no {MODULES_FILE} or {CSELAB_MODEL_FILE})")
