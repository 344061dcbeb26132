"""SentEval's transfer protocol (MR, CR, SUBJ, MPQA, SST-2, TREC, MRPC) on a model's ``encode``.

The protocol is transcribed from facebookresearch/SentEval @ :data:`SENTEVAL_COMMIT` (file:line per rule in
docs/fidelity.md, rows T1-T12); what changes is only how the work is scheduled:

* the sentences of the requested tasks are collected, deduplicated, sorted by length and encoded once each
  through ``encode`` (SentEval calls the batcher per task, per split and per batch, in file order);
* the classifiers of one task are trained together (:func:`cselab.evaluation.logreg.fit_grid`): every cell of
  the grid (folds x L2 values) is an independent problem, and each gets the weights, batches, updates and
  early stopping the sequential SentEval classifier gives it;
* SST-2's final classifier is the grid cell of the chosen L2 value: SentEval trains it again from the same seed
  on the same data (``validation.py:232-239``), which gives the same weights.

Classifiers (``senteval/tools/validation.py``): MR / CR / SUBJ / MPQA ``InnerKFoldClassifier`` (outer k folds; in
each, the L2 value with the best mean accuracy over inner k folds, then a classifier on the outer training part
with a 5 % validation split, scored on the outer test fold); TREC / MRPC ``KFoldClassifier`` (k folds of train
choose the L2 value, then train with a 5 % validation split, scored on test; MRPC also F1); SST-2
``SplitClassifier`` (the L2 value by the dev accuracy, scored on test).  Folds come from scikit-learn's
``StratifiedKFold(n_splits=k, shuffle=True, random_state=1111)`` on the rows in SentEval's order.  The L2 grid is
``10**t for t in range(-5, -1)``.  Accuracies are x 100 and rounded to 2 decimals where SentEval rounds them.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from cselab.data.transfer import (
    PAPER_NAMES,
    TRANSFER_TASKS,
    TransferTask,
    canonical_transfer_task,
    check_transfer_files,
    load_transfer_task,
)
from cselab.evaluation.logreg import ClassifierConfig, Problem, fit_grid, predict
from cselab.evaluation.stats import binomial_interval
from cselab.evaluation.sts import EncodeFn, encode_sentences
from cselab.io.tables import Column, Table, text_lines

log = logging.getLogger(__name__)

#: the SentEval commit whose protocol is transcribed (recorded in results.json)
SENTEVAL_COMMIT = "5d6dc117d1ac30357ddaeb7347fb5684e9b87015"


@dataclass(frozen=True)
class TransferProtocol:
    """SentEval's ``params`` for the transfer tasks (``conf/transfer/<mode>.yaml``).

    Attributes:
        mode: ``test`` | ``fasttest`` (the names of SimCSE's / PromptBERT's ``evaluation.py --mode``).
        kfold: folds of the cross-validations (10 / 5).
        classifier: the logistic regression's settings (:class:`ClassifierConfig`).
        l2_grid: the L2 penalties tried (``validation.py:61``: ``10**t for t in range(-5, -1)``).
        seed: SentEval's seed (``engine.py:31``: 1111): classifier seeds and the k-fold of TREC / MRPC.
        validation_split: the share held out when the final classifier trains on a whole training part (0.05).
    """

    mode: str = "test"
    kfold: int = 10
    classifier: ClassifierConfig = field(default_factory=ClassifierConfig)
    l2_grid: tuple[float, ...] = tuple(10 ** t for t in range(-5, -1))
    seed: int = 1111
    validation_split: float = 0.05

    @classmethod
    def from_config(cls, node: Mapping) -> TransferProtocol:
        """Build from a config mapping (``conf/transfer/*.yaml``).

        Raises:
            ValueError: an unknown key or a bad value, named by its ``transfer.`` key.
        """
        node = dict(node)
        known = {"mode", "kfold", "classifier", "l2_grid", "seed", "validation_split"}
        unknown = sorted(set(node) - known)
        if unknown:
            raise ValueError(f"transfer.{unknown[0]}: unknown key (expected some of {sorted(known)})")
        classifier = dict(node.pop("classifier", {}) or {})
        seed = int(node.get("seed", 1111))
        classifier.setdefault("seed", seed)
        grid = tuple(float(x) for x in node.pop("l2_grid", cls.l2_grid))
        if int(node.get("kfold", 10)) < 2:
            raise ValueError(f"transfer.kfold={node.get('kfold')}: expected an integer >= 2")
        return cls(**{**node, "seed": seed}, classifier=ClassifierConfig(**classifier), l2_grid=grid)

    def to_dict(self) -> dict:
        """The protocol as recorded in results.json (with the SentEval commit)."""
        return {**asdict(self), "l2_grid": list(self.l2_grid), "senteval_commit": SENTEVAL_COMMIT}


#: SimCSE / PromptBERT ``evaluation.py``: ``test`` (kfold 10, adam, batch 64, tenacity 5, epoch size 4) and
#: ``fasttest`` (kfold 5, rmsprop, batch 128, tenacity 3, epoch size 2)
PROTOCOLS: dict[str, TransferProtocol] = {
    "test": TransferProtocol("test", 10, ClassifierConfig("adam", 64, 5, 4)),
    "fasttest": TransferProtocol("fasttest", 5, ClassifierConfig("rmsprop", 128, 3, 2)),
}


def _folds(labels: np.ndarray, k: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """``StratifiedKFold(n_splits=k, shuffle=True, random_state=seed).split`` on the rows in order."""
    from sklearn.model_selection import StratifiedKFold  # (here: scikit-learn is 2.5 s of start-up)

    skf = StratifiedKFold(n_splits=k, shuffle=True, random_state=seed)
    return list(skf.split(np.zeros((len(labels), 1)), labels))


def run_classifier(task: TransferTask, features: dict[str, torch.Tensor], protocol: TransferProtocol,
                   progress: Callable[[int, int], None] | None = None, threads: int | None = 1) -> dict:
    """Score one task's features with its SentEval classifier.

    Args:
        task: the task (its labels and classifier kind).
        features: split -> (N_split, F) features in the split's row order (MRPC: ``[|u - v|, u * v]``).
        protocol: the protocol.
        progress: ``progress(done, total)`` over the classifiers of the task's grid.
        threads: torch intra-op threads while the classifiers train (:func:`~cselab.evaluation.logreg.fit_grid`).

    Returns:
        ``{"devacc", "acc", "ndev", "ntest", "l2", "correct"}`` (accuracies x 100; MRPC also ``"f1"``), as
        SentEval's ``run`` returns them (``binary.py:45``, ``trec.py:88``, ``mrpc.py:96``, ``sst.py:94``); ``l2``:
        the chosen penalty (a list, one per outer fold, for the nested cross-validation); ``correct``: correctly
        classified test examples (the nested CV tests every row once, so out of ``ntest`` = all rows).
    """
    grid, k, cfg = protocol.l2_grid, protocol.kfold, protocol.classifier
    names = list(features)
    offsets = np.cumsum([0] + [len(features[n]) for n in names])
    X = torch.cat([features[n] for n in names]).to(torch.float32)
    y_np = np.concatenate([task.splits[n].labels for n in names])
    y = torch.from_numpy(y_np)
    rows = {n: np.arange(offsets[i], offsets[i + 1]) for i, n in enumerate(names)}

    if task.classifier == "inner_kfold":  # validation.py:57-107
        data = rows["all"]
        outer = _folds(y_np[data], k, 1111)  # validation.py:63-65: random_state=1111 (not the seed)
        problems = []
        for tr, _ in outer:  # each outer fold: every L2 value on the k inner folds of its training part
            inner = _folds(y_np[data][tr], k, 1111)
            problems += [Problem(data[tr][itr], reg, dev=data[tr][ite]) for reg in grid for itr, ite in inner]
        total = len(problems) + len(outer)
        fitted = fit_grid(X, y, task.nclasses, problems, cfg, _offset(progress, 0, total), threads=threads)
        accuracy = np.array([p.best_accuracy for p in fitted]).reshape(len(outer), len(grid), k)  # fold, L2, inner
        dev_results, chosen = [], []
        for f in range(len(outer)):
            scores = [round(100 * np.mean(accuracy[f, r]), 2) for r in range(len(grid))]
            chosen.append(grid[int(np.argmax(scores))])
            dev_results.append(np.max(scores))
        finals = [Problem(data[tr], chosen[f], validation_split=protocol.validation_split)
                  for f, (tr, _) in enumerate(outer)]
        final = fit_grid(X, y, task.nclasses, finals, cfg, _offset(progress, len(problems), total), threads=threads)
        hits = [int((predict(final[f], X[data[te]]) == y_np[data[te]]).sum()) for f, (_, te) in enumerate(outer)]
        test_results = [round(100 * (1.0 * h / len(te)), 2) for h, (_, te) in zip(hits, outer, strict=True)]
        return {"devacc": float(round(np.mean(dev_results), 2)), "acc": float(round(np.mean(test_results), 2)),
                "ndev": len(data), "ntest": len(data), "l2": chosen, "correct": sum(hits)}

    if task.classifier == "kfold":  # validation.py:126-181
        train, test = rows["train"], rows["test"]
        folds = _folds(y_np[train], k, protocol.seed)
        problems = [Problem(train[tr], reg, dev=train[te]) for reg in grid for tr, te in folds]
        total = len(problems) + 1
        fitted = fit_grid(X, y, task.nclasses, problems, cfg, _offset(progress, 0, total), threads=threads)
        scores = [round(100 * np.mean([fitted[r * k + f].best_accuracy for f in range(k)]), 2)
                  for r in range(len(grid))]
        l2 = grid[int(np.argmax(scores))]
        final = fit_grid(X, y, task.nclasses, [Problem(train, l2, validation_split=protocol.validation_split)], cfg,
                         _offset(progress, len(problems), total), threads=threads)[0]
        yhat = predict(final, X[test])
        out = {"devacc": float(np.max(scores)), "acc": float(round(100 * float((yhat == y_np[test]).mean()), 2)),
               "ndev": len(train), "ntest": len(test), "l2": l2, "correct": int((yhat == y_np[test]).sum())}
        if task.name == "mrpc":
            from sklearn.metrics import f1_score

            out["f1"] = float(round(100 * f1_score(y_np[test], yhat), 2))  # mrpc.py:91
        return out

    train, valid, test = rows["train"], rows["valid"], rows["test"]  # validation.py:202-246
    fitted = fit_grid(X, y, task.nclasses, [Problem(train, reg, dev=valid) for reg in grid], cfg, progress,
                      threads=threads)
    scores = [round(100 * f.best_accuracy, 2) for f in fitted]
    best = int(np.argmax(scores))
    correct = int((predict(fitted[best], X[test]) == y_np[test]).sum())
    return {"devacc": float(np.max(scores)), "acc": float(round(100 * (1.0 * correct / len(test)), 2)),
            "ndev": len(valid), "ntest": len(test), "l2": grid[best], "correct": correct}


def _offset(progress, start: int, total: int):
    if progress is None:
        return None
    return lambda done, _n: progress(start + done, total)


def _features(task: TransferTask, embed: Callable[[list[str]], torch.Tensor]) -> dict[str, torch.Tensor]:
    """split -> features: the embeddings, or MRPC's ``np.c_[|u - v|, u * v]`` (``mrpc.py:78-87``)."""
    out = {}
    for name, split in task.splits.items():
        u = embed(split.sentences)
        if split.pairs is None:
            out[name] = u
        else:
            v = embed(split.pairs)
            out[name] = torch.cat([(u - v).abs(), u * v], dim=1)
    return out


class TransferEvaluator:
    """The seven transfer tasks on a model's ``encode``, with SentEval's protocol.

    Args:
        data_dir: the data directory (``data.data_dir``; files under ``senteval/downstream``).
        tasks: task names (default: the seven, :data:`~cselab.data.transfer.TRANSFER_TASKS`).
        protocol: a :class:`TransferProtocol` or a mode name (``test`` | ``fasttest``).
        chunk: distinct sentences per ``encode`` call (progress granularity).

    Raises:
        ValueError: an unknown task or mode; FileNotFoundError / ValueError: a missing or truncated file (checked
            here, before any encoding: :func:`cselab.data.transfer.check_transfer_files`).

    Example::

        results = TransferEvaluator("data", ["mr", "trec"], "fasttest").evaluate(model.encode)
        results["mr"]["acc"]   # accuracy x 100
    """

    def __init__(self, data_dir: str | os.PathLike | None, tasks: Iterable[str] = TRANSFER_TASKS,
                 protocol: TransferProtocol | str = "test", chunk: int = 2048) -> None:
        self.tasks = [canonical_transfer_task(t) for t in tasks]
        if isinstance(protocol, str):
            if protocol not in PROTOCOLS:
                raise ValueError(f"transfer mode {protocol!r}: expected one of {sorted(PROTOCOLS)}")
            protocol = PROTOCOLS[protocol]
        self.protocol = protocol
        self.data_dir = data_dir
        self.chunk = int(chunk)
        check_transfer_files(data_dir, self.tasks)
        self.timings: dict[str, dict[str, float]] = {}

    def encode_distinct(self, tasks: Mapping[str, TransferTask], encode: EncodeFn,
                        progress: Callable[[str, int, int], None] | None = None) -> tuple[list[str], torch.Tensor]:
        """Every distinct sentence of ``tasks`` once, sorted by length, through ``encode`` in chunks of
        :attr:`chunk`: ``(sentences, Tensor[len(sentences), D] float32 on CPU)``, rows in that order.

        Raises:
            ValueError: as :func:`cselab.evaluation.sts.encode_sentences`.
        """
        distinct = sorted({s for task in tasks.values() for s in task.sentences()}, key=lambda s: (len(s), s))
        cb = None if progress is None else (lambda done, total: progress("encoding", done, total))
        return distinct, encode_sentences(encode, distinct, self.chunk, cb, torch.float32)

    def evaluate(self, encode: EncodeFn, progress: Callable[[str, int, int], None] | None = None) -> dict:
        """Encode every distinct sentence once, then score each task.

        Args:
            encode: ``encode(sentences) -> Tensor[N, D]``.
            progress: ``progress(label, done, total)``: ``"encoding"`` over distinct sentences, then
                ``"<TASK> classifiers"`` over the classifiers of each task.

        Returns:
            ``{task: {"devacc", "acc", "ndev", "ntest", "l2", "correct", "ci"[, "f1"]}, ..., "avg": mean acc}``
            (``avg`` when all seven tasks ran; ``ci``: the 95 % Wilson interval of the test accuracy x 100,
            :func:`cselab.evaluation.stats.binomial_interval`); per-task wall times are in :attr:`timings` (s).
        """
        tasks = {t: load_transfer_task(self.data_dir, t) for t in self.tasks}
        start = time.perf_counter()
        distinct, table = self.encode_distinct(tasks, encode, progress)
        index = {s: i for i, s in enumerate(distinct)}
        encode_s = time.perf_counter() - start
        log.info("transfer: %s distinct sentences encoded in %.1f s", f"{len(distinct):,}", encode_s)

        def embed(sentences: list[str]) -> torch.Tensor:
            return table[torch.tensor([index[s] for s in sentences], dtype=torch.long)]

        results: dict = {}
        self.timings = {"encoding": {"seconds": round(encode_s, 1), "sentences": len(distinct)}}
        for name, task in tasks.items():
            t0 = time.perf_counter()
            label = f"{PAPER_NAMES[name]} classifiers"
            cb = (lambda done, total, lab=label: progress(lab, done, total)) if progress is not None else None
            results[name] = run_classifier(task, _features(task, embed), self.protocol, cb)
            ci = binomial_interval(results[name]["correct"], results[name]["ntest"])
            results[name]["ci"] = [round(ci.low, 2), round(ci.high, 2)]  # 95 % Wilson interval of the test accuracy
            self.timings[name] = {"seconds": round(time.perf_counter() - t0, 1)}
            log.info("transfer %s (%s): acc %.2f (dev %.2f) in %.1f s", PAPER_NAMES[name], self.protocol.mode,
                     results[name]["acc"], results[name]["devacc"], time.perf_counter() - t0)
        if all(t in results for t in TRANSFER_TASKS):
            results["avg"] = float(np.mean([results[t]["acc"] for t in TRANSFER_TASKS]))
        return results


def format_transfer_table(results: Mapping, tasks: Sequence[str] = TRANSFER_TASKS) -> str:
    """The papers' transfer table (accuracy x 100, two decimals), header and one row; tasks not run are ``-``."""
    names = [PAPER_NAMES[t] for t in tasks] + ["Avg"]
    values = [results.get(t, {}).get("acc") if isinstance(results.get(t), Mapping) else None for t in tasks]
    values.append(results.get("avg"))
    columns = [Column(n, "right", lambda v: f"{v:.2f}" if isinstance(v, (int, float)) else "-") for n in names]
    width = max(8, *(len(n) for n in names))
    return "\n".join(text_lines(Table(columns, [values]), sep="", widths=[width] * len(names)))


def tqdm_progress() -> Callable[[str, int, int], None]:
    """A ``progress(label, done, total)`` drawing one tqdm bar per label on stderr (rate and ETA; ``tqdm.auto``:
    a notebook widget in Jupyter)."""
    from tqdm.auto import tqdm

    bars: dict[str, tqdm] = {}

    def update(label: str, done: int, total: int) -> None:
        bar = bars.get(label)
        if bar is None:
            for other in bars.values():
                other.close()
            bar = bars[label] = tqdm(total=total, desc=label, unit="sent" if label == "encoding" else "clf",
                                     mininterval=1.0)
        bar.update(done - bar.n)
        if done >= total:
            bar.close()

    return update
