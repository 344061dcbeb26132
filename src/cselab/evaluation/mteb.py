"""MTEB for cselab models: an encoder that follows MTEB's model protocol, and MTEB tasks built from local files.

    import mteb, cselab
    from cselab.evaluation.mteb import CselabMTEBEncoder, local_sts_task
    model = CselabMTEBEncoder(cselab.load("outputs/.../checkpoints/best-step500.ckpt"), name="me/promptbert")
    mteb.evaluate(model, mteb.get_tasks(tasks=["STSBenchmark", "SICK-R"]))     # MTEB's own data (the hub)
    mteb.evaluate(model, local_sts_task("stsb", "data"), cache=None)           # the local SentEval STS-B test

:class:`CselabMTEBEncoder` embeds with the method's own ``encode`` -- the template, the prompt (prefixes, soft
template), the pooling, the head and sup PromptBERT's template bias exactly as at test -- so MTEB sees the model
the STS table scored.  MTEB hands it a DataLoader of text batches; it gathers the texts and calls ``encode`` once
(the method sorts by length and batches itself).  Similarity: cosine (MTEB's STS main score, ``cosine_spearman``).

:func:`local_sts_task` turns the SentEval files of ``cselab.data.sts`` into an MTEB ``AbsTaskSTS`` (no download):
the same pairs, sentences and gold scores our evaluator reads, so MTEB's ``cosine_spearman`` x 100 equals our
Spearman for STS-B and SICK-R, and STS12-16's ``all`` aggregation (one Spearman over the concatenated subsets).

Protocol differences from MTEB's published tasks (its hub datasets), to keep in mind when comparing numbers:

* **SICK-R**: MTEB's ``SICK-R`` (``mteb/sickr-sts``) scores all 9,927 SICK pairs; SentEval (the papers) scores the
  4,927-pair test split (``SICK_test_annotated.txt``).  Not comparable.
* **STS-B**: MTEB's ``STSBenchmark`` test is the same 1,379 pairs; its sentences are not whitespace-normalised
  (SentEval splits and re-joins them), which can move a score by a few hundredths.
* **STS12-16**: MTEB's tasks score one Spearman over all pairs of the year (SentEval's ``all``, the papers'
  aggregation); pair counts may differ where SentEval drops unscored pairs.
* MTEB normalises gold scores to [0, 1] (no effect on Spearman) and reports correlations in [-1, 1].
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from mteb.abstasks.sts import AbsTaskSTS
from mteb.abstasks.task_metadata import TaskMetadata
from mteb.models.abs_encoder import AbsEncoder
from mteb.models.model_meta import ModelMeta, ScoringFunction

from cselab.data.sts import STS_SUBSETS, canonical_task, load_task

#: cselab task -> the name of the local MTEB task (MTEB's own task name with a ``SentEval`` prefix)
LOCAL_TASK_NAMES: dict[str, str] = {
    "sts12": "SentEval-STS12", "sts13": "SentEval-STS13", "sts14": "SentEval-STS14", "sts15": "SentEval-STS15",
    "sts16": "SentEval-STS16", "stsb": "SentEval-STSBenchmark", "sickr": "SentEval-SICK-R",
}


class CselabMTEBEncoder(AbsEncoder):
    """MTEB encoder (``mteb.models.EncoderProtocol``) around anything with cselab's ``encode(list[str])``.

    Args:
        model: a cselab method (``cselab.load(ckpt)``) or any object whose ``encode(sentences)`` returns a
            Tensor[N, D] (or an array) in input order.
        name: the model name MTEB records in its results (``"org/name"``; default ``"cselab/<class name>"``).
        revision: the revision MTEB records (default: ``"local"``).
        batch_size: passed to ``model.encode`` when it accepts it (``None``: the method's own default).

    MTEB's ``prompt_type`` / task prompts are ignored: the method's own template (if any) is its prompt.
    """

    def __init__(self, model, name: str | None = None, revision: str | None = None,
                 batch_size: int | None = None, **kwargs: Any) -> None:
        if not callable(getattr(model, "encode", None)):
            raise TypeError(f"CselabMTEBEncoder needs an object with encode(sentences); got {type(model).__name__}")
        self.model = model
        self.batch_size = batch_size
        encoder = getattr(model, "encoder", None)
        n_params = sum(p.numel() for p in model.parameters()) if hasattr(model, "parameters") else None
        self.mteb_model_meta = ModelMeta.create_empty({
            "name": name or f"cselab/{type(model).__name__}",
            "revision": revision or "local",
            "similarity_fn_name": ScoringFunction.COSINE,  # (model_copy does not convert strings)
            "framework": ["PyTorch"],
            "embed_dim": getattr(encoder, "hidden_size", None),
            "n_parameters": n_params,
            "languages": ["eng-Latn"],
        })

    def encode(self, inputs, *, task_metadata=None, hf_split: str = "", hf_subset: str = "",
               prompt_type=None, **kwargs: Any) -> np.ndarray:
        """Embed every text of ``inputs`` (a DataLoader of ``{"text": [...]}`` batches, or a list of strings).

        Returns:
            float32 array (N, D), rows in the order of the texts.

        Raises:
            ValueError: a batch has no ``text`` column (a non-text task).
        """
        if isinstance(inputs, str):
            texts = [inputs]
        elif isinstance(inputs, Sequence) and all(isinstance(t, str) for t in inputs):
            texts = list(inputs)
        else:
            texts = []
            for batch in inputs:
                if not isinstance(batch, dict) or "text" not in batch:
                    keys = sorted(batch) if isinstance(batch, dict) else type(batch).__name__
                    raise ValueError(f"CselabMTEBEncoder encodes text only; got a batch with {keys}")
                texts.extend(str(t) for t in batch["text"])
        if not texts:
            return np.zeros((0, self.mteb_model_meta.embed_dim or 0), dtype=np.float32)
        try:
            out = self.model.encode(texts, batch_size=self.batch_size)
        except TypeError:  # an encode without batch_size
            out = self.model.encode(texts)
        if isinstance(out, torch.Tensor):
            out = out.detach().float().cpu().numpy()
        return np.asarray(out, dtype=np.float32)


def local_sts_task(task: str, data_dir: str | os.PathLike, split: str = "test") -> AbsTaskSTS:
    """An MTEB STS task over cselab's local SentEval files (``cselab.data.sts``: the evaluator's pairs).

    Args:
        task: ``sts12`` ... ``sts16``, ``stsb``, ``sickr`` (or an alias: ``STSBenchmark``, ``SICK-R``, ``STS-B``).
        data_dir: the folder holding ``senteval/downstream`` (``data_dir`` of the config).
        split: ``test`` (or ``dev`` / ``train`` for stsb and sickr).

    Returns:
        A loaded ``AbsTaskSTS`` named :data:`LOCAL_TASK_NAMES` [task] (main score ``cosine_spearman``); STS12-16
        subsets concatenated (SentEval's ``all``).

    Raises:
        ValueError: unknown task or split.  FileNotFoundError: the data is missing (names the file and
        ``make data``).
    """
    from datasets import Dataset, DatasetDict

    name = canonical_task(task)
    subsets = load_task(data_dir, name, split)
    columns = {column: [x for pairs in subsets.values() for x in getattr(pairs, field)]
               for column, field in (("sentence1", "sent1"), ("sentence2", "sent2"), ("score", "scores"))}
    dataset = DatasetDict({split: Dataset.from_dict(columns)})
    low, high = (1.0, 5.0) if name == "sickr" else (0.0, 5.0)
    subset_note = f" (subsets {', '.join(STS_SUBSETS[name])} concatenated)" if name in STS_SUBSETS else ""
    metadata = TaskMetadata(
        name=LOCAL_TASK_NAMES[name],
        description=f"SentEval's {name} {split} split read from local files by cselab{subset_note}.",
        reference="https://github.com/facebookresearch/SentEval",
        dataset={"path": f"local/senteval-{name}", "revision": "local"},
        type="STS",
        category="t2t",
        modalities=["text"],
        eval_splits=[split],
        eval_langs=["eng-Latn"],
        main_score="cosine_spearman",
        date=("2012-01-01", "2017-12-31"),
        domains=["Written"],
        task_subtypes=[],
        license="not specified",
        annotations_creators="human-annotated",
        dialect=[],
        sample_creation="found",
        bibtex_citation="",
    )

    def load_data(self, num_proc: int | None = None, **kwargs: Any) -> None:
        self.dataset = dataset
        self.data_loaded = True

    cls = type(f"Local{name.upper()}STS", (AbsTaskSTS,), {
        "metadata": metadata, "min_score": low, "max_score": high, "load_data": load_data})
    task_obj = cls()
    task_obj.load_data()
    return task_obj
