"""Fitting BERT-whitening before the test: the corpus of ``eval.whitening.fit_on`` encoded by the model's test
encoder, ``mu`` and ``W`` fitted (:class:`cselab.model.whitening.Whitening`), installed on the embedding model
(:meth:`cselab.model.embedding.EmbeddingModel.set_whitening`) and saved with it: every test embedding (STS, the
transfer tasks, exports) is whitened.  When: :mod:`cselab.evaluation.callback`.

Corpora (``eval.whitening.fit_on``; official ``eng/eval.py``'s ``normalized_by``, ``eval.py:13, 78-98``):

* ``target`` (the default: it needs only the STS files every run reads): the evaluation's own sentences
  (``eval.py:78-81``): every split of every test task (STS12-16 all subsets, STS-B train/dev/test, SICK-R
  train/trial/test), both sentences of each pair, duplicates kept.  The official code fits one transform PER
  TASK; here one transform is fitted on the test tasks pooled (the evaluator encodes all tasks with one model) --
  a documented deviation (docs/fidelity.md).
* ``nli`` (the papers' rows, ``experiment=whitening/...``: PromptBERT Table 5 "use the NLI setting"): both sentences of every NLI pair.  The
  official corpus is MNLI train + SNLI train/dev/test (``eval.py:89-97``); the default file here is SimCSE's
  ``nli_for_simcse.csv`` (SNLI + MNLI sentences, ``python -m cselab data``); MNLI's ``train.tsv`` (columns
  ``sentence1``, ``sentence2``) is read as well.
* ``wiki``: sentences of a text file, one per line (default the embedded wiki1m sample); not in the official code.

``file`` (relative to ``data_dir``) replaces the default corpus of ``nli`` / ``wiki``; ``n_sentences`` keeps the
first N sentences of the corpus (null: all).  The corpus file is checked with the run's other inputs, before any
directory or model (:func:`cselab.run.inputs.check_inputs`).
"""

from __future__ import annotations

import csv
import logging
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from cselab.data.sts import load_task, task_splits
from cselab.io.files import staged
from cselab.model.spec import ConfigError
from cselab.model.whitening import Whitening

log = logging.getLogger(__name__)

FIT_ON = ("nli", "target", "wiki")
#: the default corpus file of each ``fit_on`` (relative to ``data_dir``)
DEFAULT_FILES = {"nli": "nli_for_simcse.csv", "wiki": "wiki1m_sample/wiki1m_for_simcse.head11914.txt"}
#: sentence columns of a CSV / TSV corpus (SimCSE's NLI triplets, MNLI / SNLI, premise-hypothesis files)
SENTENCE_COLUMNS = ("sent0", "sent1", "hard_neg", "sentence1", "sentence2", "premise", "hypothesis")
_KEYS = ("enabled", "fit_on", "file", "n_sentences", "k", "normalize")


@dataclass(frozen=True)
class WhiteningOptions:
    """The ``eval.whitening`` node (conf/eval/sts.yaml), checked.

    Attributes:
        fit_on: ``target`` (default) | ``nli`` | ``wiki`` (module docstring).
        file: the corpus file relative to ``data_dir`` (None: :data:`DEFAULT_FILES`; unused for ``target``).
        n_sentences: the first N sentences of the corpus (None: all).
        k: dimensions kept (None: all, the official ``n_components`` < 0).
        normalize: L2-normalise after the transform (official ``transform_and_normalize``).
    """

    fit_on: str = "target"
    file: str | None = None
    n_sentences: int | None = None
    k: int | None = None
    normalize: bool = True

    @classmethod
    def from_config(cls, node: Mapping[str, Any] | None) -> WhiteningOptions | None:
        """The options of an ``eval.whitening`` node, or None when it is null or ``enabled`` is false.

        Raises:
            ConfigError: an unknown key or a value out of range (names ``eval.whitening.<key>``); ``n_sentences``
                below ``k + 1`` (:meth:`Whitening.fit` would refuse them after training).
        """
        if node is None:
            return None
        if not isinstance(node, Mapping):
            raise ConfigError(f"eval.whitening={node!r}: expected a mapping ({', '.join(_KEYS)}) or null")
        unknown = sorted(set(node) - set(_KEYS))
        if unknown:
            raise ConfigError(f"eval.whitening: unknown key(s) {unknown}; expected some of {list(_KEYS)}")
        if not node.get("enabled", True):
            return None
        fit_on = node.get("fit_on", "target")
        if fit_on not in FIT_ON:
            raise ConfigError(f"eval.whitening.fit_on={fit_on!r}: expected one of {list(FIT_ON)}")
        for key in ("n_sentences", "k"):
            value = node.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ConfigError(f"eval.whitening.{key}={value!r}: expected null or an integer >= 1")
        n, k = node.get("n_sentences"), node.get("k")
        if n is not None and k is not None and n < k + 1:
            raise ConfigError(f"eval.whitening.n_sentences={n} cannot whiten k={k} dimensions (N sentences give a "
                              f"covariance of rank N - 1 at most): n_sentences >= {k + 1}, or k <= {max(n - 1, 1)}")
        if not isinstance(node.get("normalize", True), bool):
            raise ConfigError(f"eval.whitening.normalize={node.get('normalize')!r}: expected true or false")
        file = node.get("file")
        if file is not None and (fit_on == "target" or not isinstance(file, str)):
            raise ConfigError(f"eval.whitening.file={file!r}: expected a path string for fit_on=nli | wiki "
                              "(fit_on=target reads the test tasks)")
        return cls(**{key: value for key, value in node.items() if key != "enabled"})  # checked above

    def corpus_file(self) -> str | None:
        """The corpus file read (relative to ``data_dir`` unless absolute): ``file`` or the default of ``nli`` /
        ``wiki`` (:data:`DEFAULT_FILES`); None for ``target`` (the test tasks' files, checked with them)."""
        return None if self.fit_on == "target" else (self.file or DEFAULT_FILES[self.fit_on])


def read_sentences(path: str | os.PathLike) -> list[str]:
    """The sentences of a corpus file: ``.csv`` / ``.tsv`` with a header -- every cell of the columns of
    :data:`SENTENCE_COLUMNS` it has, row by row --, any other file one sentence per non-empty line (stripped).

    Raises:
        FileNotFoundError: no such file (names it and ``eval.whitening.file``).
        ConfigError: a CSV / TSV without any of :data:`SENTENCE_COLUMNS`.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: the whitening corpus (eval.whitening.file / fit_on) does not exist"
                                + (" (python -m cselab data downloads nli_for_simcse.csv)"
                                   if path.name == DEFAULT_FILES["nli"] else ""))
    if path.suffix.lower() in (".csv", ".tsv"):
        with open(path, encoding="utf-8", newline="") as f:
            tsv = path.suffix.lower() == ".tsv"
            reader = csv.DictReader(f, delimiter="\t" if tsv else ",",
                                    quoting=csv.QUOTE_NONE if tsv else csv.QUOTE_MINIMAL)
            columns = [c for c in SENTENCE_COLUMNS if c in (reader.fieldnames or ())]
            if not columns:
                raise ConfigError(f"{path}: no sentence column; expected some of {list(SENTENCE_COLUMNS)} in the "
                                  f"header, got {reader.fieldnames}")
            return [row[c].strip() for row in reader for c in columns if row.get(c) and row[c].strip()]
    with open(path, encoding="utf-8", errors="replace") as f:
        return [line.strip() for line in f if line.strip()]


def target_sentences(data_dir: str | os.PathLike, tasks: Sequence[str]) -> list[str]:
    """Both sentences of every pair of every split of ``tasks`` (official ``fit_on=target``: STS-B and SICK-R
    train, dev and test; STS12-16 all subsets), in task order, duplicates kept."""
    sentences = []
    for task in tasks:
        for split in task_splits(task):
            for pairs in load_task(data_dir, task, split).values():  # one entry per subset (STS12-16)
                for first, second in zip(pairs.sent1, pairs.sent2, strict=True):
                    sentences += [first, second]
    return sentences


def embedding_model_of(model):
    """The :class:`cselab.model.embedding.EmbeddingModel` of an evaluated object (a method's ``.model``, or the
    embedding model itself).

    Raises:
        ConfigError: the object has none (a token representation of ``method=baseline``, an exported folder).
    """
    from cselab.model.embedding import EmbeddingModel

    inner = model if isinstance(model, EmbeddingModel) else getattr(model, "model", None)
    if not isinstance(inner, EmbeddingModel):
        raise ConfigError(f"eval.whitening needs the embedding model (a pooler of cselab.model.pooling), but "
                          f"{type(model).__name__} has none (method.pooler=static_avg / topk are token "
                          "representations): set eval.whitening.enabled=false or choose another pooler")
    return inner


class WhiteningFit:
    """Fit the whitening transform of ``options`` for a model (``__call__``), on its test encoder.

    Args:
        options: :class:`WhiteningOptions`.
        data_dir: where the corpora and the STS tasks are.
        test_tasks: the test tasks (the corpus of ``fit_on=target``).
    """

    def __init__(self, options: WhiteningOptions, data_dir: str | os.PathLike, test_tasks: Sequence[str]) -> None:
        self.options, self.data_dir, self.test_tasks = options, Path(data_dir), tuple(test_tasks)

    def corpus(self) -> list[str]:
        """The fitting sentences (module docstring), the first ``n_sentences``.

        Raises:
            FileNotFoundError, ConfigError: as :func:`read_sentences`; an empty corpus.
        """
        opts = self.options
        if opts.fit_on == "target":
            sentences = target_sentences(self.data_dir, self.test_tasks)
        else:
            sentences = read_sentences(self.data_dir / opts.corpus_file())
        sentences = sentences[: opts.n_sentences]  # None: all
        if not sentences:
            raise ConfigError(f"eval.whitening: the corpus of fit_on={opts.fit_on} is empty")
        return sentences

    def check(self, model) -> None:
        """What :meth:`__call__` would refuse after training, refused before it (the callback's ``on_fit_start``):
        a model without an embedding model, ``k`` above its embeddings' dimension D, ``n_sentences`` below D + 1
        when ``k`` is null (all D dimensions kept).

        Raises:
            ConfigError: names ``eval.whitening.k`` / ``n_sentences`` and D, or what :func:`embedding_model_of`
                raises.
        """
        dim = embedding_model_of(model).embedding_dim
        k, n = self.options.k, self.options.n_sentences
        if k is not None and k > dim:
            raise ConfigError(f"eval.whitening.k={k}: this model's embeddings are {dim}-d, so k <= {dim} (null keeps "
                              f"all {dim})")
        if k is None and n is not None and n < dim + 1:
            raise ConfigError(f"eval.whitening.n_sentences={n} cannot whiten all {dim} dimensions of this model's "
                              f"embeddings (k null; N sentences give a covariance of rank N - 1 at most): "
                              f"n_sentences >= {dim + 1}, or k <= {max(n - 1, 1)}")

    def __call__(self, model, batch_size: int | None = None) -> Whitening:
        """Encode the corpus with ``model``'s test encoder (without whitening), fit ``mu`` and ``W`` (official
        ``compute_kernel_bias``, ``kernel[:, :k]``) and install the transform on its embedding model.

        Returns:
            the installed :class:`Whitening`.

        Raises:
            ConfigError: ``model`` has no embedding model (:func:`embedding_model_of`); what :meth:`corpus` raises.
            ValueError: too few sentences for k (:meth:`Whitening.fit`; names the keys).
        """
        target = embedding_model_of(model)
        sentences = self.corpus()
        start = time.perf_counter()
        target.set_whitening(None)  # the raw test embeddings
        vecs = target.encode(sentences, batch_size=batch_size, encoder="test")
        whitening = Whitening.fit(vecs, k=self.options.k, normalize=self.options.normalize)
        target.set_whitening(whitening)
        log.info("whitening fitted on %d sentences (fit_on=%s): %d -> %d dimensions (%.1f s)", len(sentences),
                 self.options.fit_on, whitening.in_features, whitening.out_features, time.perf_counter() - start)
        return whitening


def is_whitening_key(name: str) -> bool:
    """A state-dict key of the whitening transform (``[model.]whitening.<buffer>``)."""
    return name.rpartition(".")[0].rpartition(".")[2] == "whitening"


def add_to_checkpoint(path: str | os.PathLike, model) -> None:
    """Write ``model``'s whitening buffers (state-dict names, e.g. ``model.whitening.kernel``, on CPU) into the
    checkpoint at ``path`` (its ``state_dict``, replacing any), atomically: the tested checkpoint then loads
    (``cselab.load``, ``cselab export``) as the whitened encoder that was tested."""
    ckpt = torch.load(path, map_location="cpu", weights_only=False)
    kept = {k: v for k, v in ckpt.get("state_dict", {}).items() if not is_whitening_key(k)}
    ckpt["state_dict"] = kept | {k: v.detach().cpu() for k, v in model.state_dict().items() if is_whitening_key(k)}
    ckpt["cselab_whitening"] = True
    with staged(path) as f:
        torch.save(ckpt, f)


def save_untrained_checkpoint(path: str | os.PathLike, method) -> Path:
    """A checkpoint of a method that trained nothing (``method=baseline`` + whitening), as Lightning writes one
    (``state_dict``, ``hyper_parameters``, the method class), so that ``cselab.load``, ``cselab export`` and
    ``cselab compare`` take the run directory like a trained run's."""
    import lightning as L

    ckpt: dict[str, Any] = {"state_dict": method.state_dict(), "hyper_parameters": dict(method.hparams),
                            "pytorch-lightning_version": L.__version__, "epoch": 0, "global_step": 0,
                            "cselab_whitening": True}
    method.on_save_checkpoint(ckpt)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with staged(path) as f:
        torch.save(ckpt, f)
    return path
