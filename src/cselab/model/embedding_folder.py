"""A saved embedding model's folder: ``cselab_model.json`` (the spec), ``backbone/`` (the backbone's Hugging Face
config and tokenizer) and ``cselab_model.safetensors`` (every weight: backbone, prompt module, head, the whitening
transform's buffers; the MLM head of training is not part of the embedding model).
:meth:`.embedding.EmbeddingModel.save` / ``load`` use it."""

from __future__ import annotations

import dataclasses
import json
import os

import torch

from .backbone import Encoder
from .heads import build_head, head_name
from .spec import EmbeddingSpec

CONFIG_FILE = "cselab_model.json"
WEIGHTS_FILE = "cselab_model.safetensors"
BACKBONE_DIR = "backbone"


def save_folder(model, folder: str | os.PathLike) -> None:
    """Write ``model`` (an :class:`.embedding.EmbeddingModel`) into ``folder``: its spec with the backbone's family,
    pooler-layer presence and head (:func:`.heads.head_name`) as built, the backbone's config and tokenizer, every
    weight."""
    from safetensors.torch import save_model

    os.makedirs(folder, exist_ok=True)
    base = model.backbone.base_model
    config = dataclasses.replace(model.spec, family=model.backbone.family, head=head_name(model.head),
                                 has_pooler_layer=getattr(base, "pooler", None) is not None).to_dict()
    with open(os.path.join(folder, CONFIG_FILE), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)
    base.config.save_pretrained(os.path.join(folder, BACKBONE_DIR))
    model.tokenizer.save_pretrained(os.path.join(folder, BACKBONE_DIR))
    mlm = model.backbone.mlm
    model.backbone.mlm = None  # not saved: training only
    try:
        save_model(model, os.path.join(folder, WEIGHTS_FILE))
    finally:
        model.backbone.mlm = mlm


def load_folder(model_cls, folder: str | os.PathLike, device: str | torch.device = "cpu"):
    """The ``model_cls`` (:class:`.embedding.EmbeddingModel`) that :func:`save_folder` wrote into ``folder``
    (local files only), on ``device``, in eval mode.

    Raises:
        FileNotFoundError: ``folder`` lacks ``cselab_model.json`` (not a saved cselab model).
        ConfigError: its ``cselab_model.json`` is not a spec this cselab reads.
    """
    from safetensors.torch import load_model
    from transformers import AutoConfig, AutoModel, AutoTokenizer

    path = os.path.join(folder, CONFIG_FILE)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: not a saved cselab embedding model (no {CONFIG_FILE})")
    with open(path, encoding="utf-8") as f:
        spec = EmbeddingSpec.from_dict(json.load(f))
    hf_dir = os.path.join(folder, BACKBONE_DIR)
    hf_config = AutoConfig.from_pretrained(hf_dir, local_files_only=True)
    try:  # BERT / RoBERTa-like: no pooler layer when the saved backbone had none
        model = AutoModel.from_config(hf_config, add_pooling_layer=spec.has_pooler_layer)
    except TypeError:
        model = AutoModel.from_config(hf_config)
    tokenizer = AutoTokenizer.from_pretrained(hf_dir, local_files_only=True)
    head = build_head(spec.head, int(hf_config.hidden_size), init="pytorch")  # weights: below
    out = model_cls(Encoder(model, spec.family), tokenizer, head, spec)
    load_model(out, os.path.join(folder, WEIGHTS_FILE), strict=True, device=str(device))
    return out.to(device).eval()
