"""The sentence-transformers face of :class:`.embedding.EmbeddingModel`: one input module that tokenizes with the
model's TEST encoder and returns its embeddings, and whose save / load are the model's own; and
:class:`CselabWhitening`, the BERT-whitening transform (:mod:`.whitening`) as a module after pooling, saved as its
own files (``config.json``, ``whitening.safetensors``).

An exported folder (``python -m cselab export``) holds this file beside the other files of ``cselab.model``
(the runtime code itself, imported relatively), so ``SentenceTransformer(folder, trust_remote_code=True)`` runs
exactly what ``cselab.load(ckpt).encode`` runs.  Needs torch, transformers, safetensors, peft and
sentence-transformers, not cselab.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from .embedding import EmbeddingModel
from .whitening import Whitening

try:
    from sentence_transformers.base.modules import InputModule, Module
except ImportError:  # sentence-transformers < 6
    from sentence_transformers.models import InputModule, Module

#: the file of :class:`CselabWhitening`'s buffers in its module folder
WHITENING_WEIGHTS = "whitening.safetensors"


class CselabEmbedding(InputModule):
    """sentence-transformers input module around an :class:`EmbeddingModel`.

    ``preprocess`` = the model's test collate (template, period rule, whole-string tokenization, template-bias
    rows): tensors (N, 1, T); ``forward`` = the model's forward at evaluation, ``sentence_embedding`` (N, D).
    """

    save_in_root = True
    config_keys: list[str] = []

    def __init__(self, model: EmbeddingModel) -> None:
        super().__init__()
        self.model = model

    def preprocess(self, inputs: Sequence[str], prompt: str | None = None, **kwargs) -> dict[str, torch.Tensor]:
        """Sentences -> the test collate's batch (``input_ids`` (N, 1, T), ``attention_mask``, ``rep_index``...)."""
        texts = [str(t) if prompt is None else prompt + str(t) for t in inputs]
        if not texts:
            return {}
        return self.model.collate("test")(texts)

    def tokenize(self, texts: Sequence[str], **kwargs) -> dict[str, torch.Tensor]:
        """sentence-transformers < 6 name of :meth:`preprocess`."""
        return self.preprocess(texts, **kwargs)

    def forward(self, features: dict[str, Any], **kwargs) -> dict[str, Any]:
        """``sentence_embedding`` (N, D): the model's embeddings of the batch's single view."""
        batch = {k: v for k, v in features.items() if isinstance(v, torch.Tensor)}
        features["sentence_embedding"] = self.model(batch)[:, 0]
        return features

    def get_embedding_dimension(self) -> int:
        """D, the backbone's hidden size."""
        return int(self.model.backbone.hidden_size)

    get_sentence_embedding_dimension = get_embedding_dimension

    def save(self, output_path: str, *args, safe_serialization: bool = True, **kwargs) -> None:
        """:meth:`EmbeddingModel.save` into ``output_path``."""
        self.model.save(output_path)

    @classmethod
    def load(cls, model_name_or_path: str, subfolder: str = "", token: bool | str | None = None,
             cache_folder: str | None = None, revision: str | None = None, local_files_only: bool = False,
             **kwargs) -> CselabEmbedding:
        """:meth:`EmbeddingModel.load` from the folder (local, or downloaded from the Hugging Face hub)."""
        if hasattr(cls, "load_dir_path"):
            path = cls.load_dir_path(model_name_or_path, subfolder=subfolder, token=token, cache_folder=cache_folder,
                                     revision=revision, local_files_only=local_files_only)
        else:
            path = model_name_or_path
        return cls(EmbeddingModel.load(path))


class CselabWhitening(Module):
    """sentence-transformers module of BERT-whitening after pooling (and any head): ``sentence_embedding`` (N, D) ->
    :class:`.whitening.Whitening` of it (N, k), L2-normalised as it was fitted.  Saved as ``config.json``
    (``in_features``, ``out_features``, ``normalize``) and ``whitening.safetensors`` (``mean``, ``kernel``,
    ``normalized``)."""

    config_keys: list[str] = ["in_features", "out_features", "normalize"]

    def __init__(self, whitening: Whitening) -> None:
        super().__init__()
        self.whitening = whitening

    in_features = property(lambda self: self.whitening.in_features, doc="D, the input dimension.")
    out_features = property(lambda self: self.whitening.out_features, doc="k, the output dimension.")
    normalize = property(lambda self: self.whitening.normalize, doc="Rows L2-normalised after the transform.")

    def forward(self, features: dict[str, Any], **kwargs) -> dict[str, Any]:
        """``sentence_embedding`` whitened in place of itself."""
        features["sentence_embedding"] = self.whitening(features["sentence_embedding"])
        return features

    def get_embedding_dimension(self) -> int:
        """k."""
        return self.out_features

    get_sentence_embedding_dimension = get_embedding_dimension

    def save(self, output_path: str, *args, safe_serialization: bool = True, **kwargs) -> None:
        """``config.json`` and ``whitening.safetensors`` into ``output_path``."""
        import os

        from safetensors.torch import save_file

        self.save_config(output_path)
        save_file({k: v.detach().cpu().contiguous() for k, v in self.whitening.state_dict().items()},
                  os.path.join(output_path, WHITENING_WEIGHTS))

    @classmethod
    def load(cls, model_name_or_path: str, subfolder: str = "", token: bool | str | None = None,
             cache_folder: str | None = None, revision: str | None = None, local_files_only: bool = False,
             **kwargs) -> CselabWhitening:
        """The module :meth:`save` wrote (local folder, or downloaded from the Hugging Face hub).

        Raises:
            FileNotFoundError: the folder has no ``whitening.safetensors``.
        """
        from safetensors.torch import load_file

        path = cls.load_file_path(model_name_or_path, filename=WHITENING_WEIGHTS, subfolder=subfolder, token=token,
                                  cache_folder=cache_folder, revision=revision, local_files_only=local_files_only)
        if path is None:
            raise FileNotFoundError(f"{model_name_or_path}/{subfolder}: no {WHITENING_WEIGHTS}")
        state = load_file(path)
        return cls(Whitening(state["mean"], state["kernel"], normalize=bool(state["normalized"])))
