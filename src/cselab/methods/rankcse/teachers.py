"""RankCSE's teachers: frozen cselab models whose similarity matrices are the ranking targets.

Official code (perceptiveshawty/RankCSE ``rankcse/trainers.py:406-530``, ``rankcse/teachers.py``): one or two
teachers, loaded once before training (``AutoModel.from_pretrained``: eval mode), encode every training batch under
``torch.no_grad`` (trainers.py:473, teachers.py:35) with their own pooler (``cls_before_pooler`` for SimCSE /
DiffCSE models, else ``avg``: trainers.py:409-415), i.e. as those models are evaluated; the batch's first view
gives the teacher's rows (trainers.py:500-501, 514-517: ``z1T`` and ``z2T`` are the same sentences, the teacher
has no dropout in eval mode), and the targets are

    T = sum_k w_k * cos(t_k_i, t_k_j) / tau2        (trainers.py:508, 526-528: w = (alpha, 1 - alpha))

Here a teacher is any cselab run directory, ``.ckpt`` or exported folder, loaded by :func:`cselab.load` (the
project's one loading path) and encoded by its own ``encode`` (its template, pooler and head as at test), in
float32 (the official teachers run in float32; its fp16 cast of the embeddings, trainers.py:503-505, is not kept).

What a teacher reads (:attr:`TeacherScores.feeds`, decided once when loaded):

* ``ids`` (the official rule, the default whenever it applies): the student's token ids and attention mask of the
  batch's first view, as they are (trainers.py:476-499: ``teacher_inputs`` is the student's batch, flattened), so
  the teacher sees the same truncated sequence, ``[UNK]`` included.  It applies to a teacher whose vocabulary
  equals the student's and that reads the plain sentence: a cselab model without a template or prompt (its
  forward: pooler, head as at test, whitening; prefixes included), or an exported folder of plain sentence-transformers modules
  (its forward on the ids).
* ``text`` (an extension, for a teacher the ids do not fit: another vocabulary, a template, a decoder,
  an exported folder with cselab's own module): the first view decoded with the student's tokenizer, the
  sequence's special tokens dropped but ``[UNK]`` kept as its token text (:func:`decode_view`), then the teacher's
  own ``encode``.  Such a teacher cannot see the student's ids; its sentence is the closest string.

Under DDP every teacher's embeddings are gathered like the student's, so that
the targets cover the same global batch (the official gathers the student only, so its (B, B) targets would not
match its (B * W, B * W) student logits: the official RankCSE runs on one GPU, run_rankcse.sh:2).

The teachers are not submodules of the student: not in its checkpoint, optimizer, or export; they are loaded when
training starts (:meth:`TeacherScores.load`), so a trained student loads and exports without them.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch

from cselab.losses.infonce import cosine_matrix
from cselab.model.spec import ConfigError


@dataclass(frozen=True)
class TeacherSpec:
    """One teacher: ``path`` (a run directory, checkpoint or exported folder) and its ``weight`` in the targets."""

    path: str
    weight: float


def teacher_specs(teachers: Sequence[Mapping[str, Any]] | None, temperature: float) -> tuple[TeacherSpec, ...]:
    """The ``method.teachers`` list checked: at least one ``{path, weight}``; weights >= 0 that sum to 1 (official
    ``alpha_`` and ``1 - alpha_``, trainers.py:528; a single teacher's weight defaults to 1); ``method.
    teacher_temperature`` (official ``tau2``) > 0.  Nothing is loaded.

    Raises:
        ConfigError: names ``method.teachers[i].<key>`` or ``method.teacher_temperature`` and what was expected.
    """
    if not isinstance(temperature, (int, float)) or isinstance(temperature, bool) or temperature <= 0:
        raise ConfigError(f"method.teacher_temperature={temperature!r}: expected a number > 0 (official tau2 0.05)")
    if not teachers or isinstance(teachers, (str, Mapping)):
        raise ConfigError(f"method.teachers={teachers!r}: expected a list of {{path: <run directory or exported "
                          "folder>, weight: <float>}} (RankCSE distils the ranking of one or more teachers)")
    specs = []
    for i, node in enumerate(teachers):
        if not isinstance(node, Mapping) or not node.get("path"):
            raise ConfigError(f"method.teachers[{i}]={node!r}: expected {{path: <run directory or exported folder>, "
                              "weight: <float>}}")
        unknown = sorted(set(node) - {"path", "weight"})
        if unknown:
            raise ConfigError(f"method.teachers[{i}]: unknown keys {unknown} (expected path, weight)")
        weight = node.get("weight", 1.0 if len(teachers) == 1 else None)
        if not isinstance(weight, (int, float)) or isinstance(weight, bool) or weight < 0:
            raise ConfigError(f"method.teachers[{i}].weight={weight!r}: expected a number >= 0 (the teachers' "
                              "weights sum to 1, official alpha and 1 - alpha)")
        specs.append(TeacherSpec(str(node["path"]), float(weight)))
    total = sum(s.weight for s in specs)
    if not math.isclose(total, 1.0, abs_tol=1e-6):
        raise ConfigError(f"method.teachers[*].weight sum to {total:g}: expected 1 (official alpha * teacher_1 + "
                          "(1 - alpha) * teacher_2)")
    return tuple(specs)


def decode_view(tokenizer, ids: torch.Tensor, mask: torch.Tensor) -> list[str]:
    """The sentences of token ids ``ids`` (N, T) with attention ``mask`` (N, T), decoded with ``tokenizer``: the
    special tokens that frame a sequence ([CLS], [SEP], <s>, padding) dropped, the unknown token kept as its text
    (``[UNK]``; ``skip_special_tokens=True`` would drop it and shorten the sentence).  For a ``text`` teacher."""
    drop = set(tokenizer.all_special_ids) - {tokenizer.unk_token_id}
    return [tokenizer.decode([t for t in i[m.bool()].tolist() if t not in drop])
            for i, m in zip(ids.cpu(), mask.cpu(), strict=True)]


def _embedding_model_of(teacher):
    """The :class:`~cselab.model.embedding.EmbeddingModel` of a loaded teacher (a method's ``model``, or the model
    itself), or None (an exported folder's ``SentenceTransformer``)."""
    from cselab.model.embedding import EmbeddingModel

    if isinstance(teacher, EmbeddingModel):
        return teacher
    model = getattr(teacher, "model", None)
    return model if isinstance(model, EmbeddingModel) else None


def teacher_feed(teacher, student_tokenizer) -> tuple[Literal["ids", "text"], str]:
    """What ``teacher`` reads, and why: ``("ids", ...)`` when the student's token ids are its input as they are
    (the official rule: its vocabulary equals the student's and it reads the plain sentence), else
    ``("text", <the reason>)`` (see the module docstring)."""
    model = _embedding_model_of(teacher)
    if model is not None:
        tokenizer = model.tokenizer
        if model.spec.family == "decoder":
            return "text", "a decoder LLM reads a prompt"
        if model.spec.eval_view[1] is not None:
            return "text", "it wraps the sentence in a template"
    else:
        from cselab.methods.exported import uses_shipped_code

        folder = getattr(teacher, "folder", None)
        if folder is None or uses_shipped_code(folder) or not hasattr(teacher.model, "tokenizer"):
            return "text", "an exported folder with cselab's own module encodes strings"
        tokenizer = teacher.model.tokenizer
    if tokenizer.get_vocab() != student_tokenizer.get_vocab():
        return "text", "its vocabulary differs from the student's"
    return "ids", "the student's token ids (official trainers.py:476-499)"


def _module_of(teacher) -> torch.nn.Module:
    """The ``nn.Module`` that holds a loaded teacher's weights (a method, an embedding model, or an exported
    folder's SentenceTransformer)."""
    return teacher if isinstance(teacher, torch.nn.Module) else teacher.model


class TeacherScores:
    """The ranking targets of a batch from frozen teachers (a plain object: never a submodule of the student).

    Args:
        specs: the checked teachers (:func:`teacher_specs`).
        temperature: tau2 > 0 (official default 0.05, train.py:107).
    """

    def __init__(self, specs: Sequence[TeacherSpec], temperature: float) -> None:
        self.specs = tuple(specs)
        self.temperature = float(temperature)
        self.teachers: list | None = None
        #: per teacher, what it reads: ``ids`` (the student's token ids) or ``text`` (:func:`teacher_feed`)
        self.feeds: list[Literal["ids", "text"]] = []
        self.device: torch.device | None = None

    @property
    def loaded(self) -> bool:
        """Whether :meth:`load` ran."""
        return self.teachers is not None

    def load(self, device: torch.device | str = "cpu", student_tokenizer=None) -> None:
        """Load every teacher with :func:`cselab.load` (a run directory, ``.ckpt`` or exported folder) on
        ``device``: eval mode, every parameter frozen, float32 encoding.  Loaded once; later calls only move them.
        The CPU generator's state is restored after loading (the student's dropout draws do not depend on it).
        With ``student_tokenizer``, each teacher's :attr:`feeds` entry is decided (:func:`teacher_feed`); without
        it, every teacher reads ``text``.

        Raises:
            ConfigError: a path that does not exist, or is neither a run directory / checkpoint nor an exported
                folder (names ``method.teachers[i].path``).
        """
        from cselab.methods.loading import load

        device = torch.device(device)
        if self.teachers is None:
            teachers = []
            for i, spec in enumerate(self.specs):
                if not os.path.exists(spec.path):
                    raise ConfigError(f"method.teachers[{i}].path={spec.path!r} does not exist: expected a cselab run "
                                      "directory, checkpoint (.ckpt) or exported folder (train or export the teacher "
                                      "first)")
                try:  # building the modules draws initial weights: the student's generator is left as it was
                    with torch.random.fork_rng(devices=[]):
                        teacher = load(spec.path, map_location="cpu")
                except (FileNotFoundError, ValueError) as err:
                    raise ConfigError(f"method.teachers[{i}].path={spec.path!r} is not a teacher cselab can load: "
                                      f"{err}") from err
                module, model = _module_of(teacher), _embedding_model_of(teacher)
                module.eval()
                module.requires_grad_(False)
                if model is not None:  # (an exported folder's encoder has no precision setting)
                    model.respec(eval_precision="32")
                teachers.append(teacher)
            self.teachers = teachers
            self.feeds = [teacher_feed(t, student_tokenizer)[0] if student_tokenizer is not None else "text"
                          for t in teachers]
        if self.device != device:
            for teacher in self.teachers:
                _module_of(teacher).to(device)
            self.device = device

    def embeddings(self, ids: torch.Tensor, mask: torch.Tensor, tokenizer) -> list[torch.Tensor]:
        """Each teacher's embeddings (N, D_k) float32, on the teachers' device, of the student's sequences ``ids``
        (N, T) with attention ``mask`` (N, T), computed as that teacher is evaluated (eval mode, no gradient), in
        one batch: an ``ids`` teacher runs its forward on them (official trainers.py:491-499), a ``text`` teacher
        its ``encode`` of :func:`decode_view` (``tokenizer``: the student's).

        Raises:
            RuntimeError: :meth:`load` has not run.
        """
        if self.teachers is None:
            raise RuntimeError("TeacherScores.embeddings before load(): call load(device) first")
        out, sentences = [], None
        with torch.no_grad(), torch.autocast(self.device.type, enabled=False):  # float32 inside mixed precision
            for teacher, feed in zip(self.teachers, self.feeds or ["text"] * len(self.teachers), strict=True):
                if feed == "ids":
                    e = _forward_ids(teacher, ids.to(self.device), mask.to(self.device))
                else:
                    sentences = decode_view(tokenizer, ids, mask) if sentences is None else sentences
                    e = teacher.encode(sentences, batch_size=max(1, len(sentences)))
                out.append(e.to(self.device).float().clone())  # a normal tensor (encode returns inference tensors)
        return out

    def logits(self, embeddings: Sequence[torch.Tensor]) -> torch.Tensor:
        """The targets (N, N): ``sum_k w_k cos(e_k_i, e_k_j) / tau2`` (official trainers.py:508, 526-528) of one
        (N, D_k) matrix per teacher (:meth:`embeddings`, gathered)."""
        return sum(spec.weight * (cosine_matrix(e, e) / self.temperature)
                   for spec, e in zip(self.specs, embeddings, strict=True))


def _forward_ids(teacher, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """An ``ids`` teacher's embeddings (N, D) of token ids (N, T): a cselab model's forward as at test (pooler at
    position 0 or over the mask, head when used at test, whitening), or an exported folder's sentence-transformers
    modules run on the features (``sentence_embedding``)."""
    model = _embedding_model_of(teacher)
    if model is None:
        features = {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}
        return teacher.model(features)["sentence_embedding"]
    batch = {"input_ids": ids[:, None], "attention_mask": mask[:, None],
             "rep_index": torch.zeros(ids.shape[0], 1, dtype=torch.long, device=ids.device)}
    z = model(batch)[:, 0].float()
    return z if model.whitening is None else model.whitening(z)
