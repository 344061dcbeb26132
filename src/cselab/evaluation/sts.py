"""Unsupervised STS evaluation (cosine similarity + Spearman), as SentEval / SimCSE's ``evaluation.py`` run it.

Score of a task = Spearman correlation x 100 between the cosine similarity of the two sentence embeddings of
each pair and the gold score; no regressor. For STS12-16 the subsets of one year are aggregated:

* ``"all"`` (what the papers report): ONE Spearman over the concatenation of all subsets' pairs
  (SentEval ``results['all']['spearman']['all']``),
* ``"mean"``: the plain mean of the per-subset Spearman (``['mean']``),
* ``"wmean"``: the mean weighted by the number of pairs per subset (``['wmean']``).

STS-B and SICK-R use their single split (``test`` for the papers, ``dev`` for model selection).

Unlike SentEval, which calls the batcher per task and per batch of pairs, :class:`STSEvaluator` collects every
distinct (whitespace-normalised) sentence of the requested tasks and encodes each exactly once; the
``encode`` function is responsible for its own batching / length sorting.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from cselab.data.sts import STSPairs, canonical_task, load_task
from cselab.io.tables import Column, Table, text_lines

#: the seven tasks of the papers' STS table, in column order.
TEST_TASKS: tuple[str, ...] = ("sts12", "sts13", "sts14", "sts15", "sts16", "stsb", "sickr")

#: task -> column name used in the papers.
PAPER_NAMES: dict[str, str] = {
    "sts12": "STS12",
    "sts13": "STS13",
    "sts14": "STS14",
    "sts15": "STS15",
    "sts16": "STS16",
    "stsb": "STS-B",
    "sickr": "SICK-R",
}

#: valid values of ``aggregation``.
AGGREGATIONS: tuple[str, ...] = ("all", "mean", "wmean")
#: ``eval.best_on_tie``: which of two checkpoints with the same STS-B dev score is the best (the earlier: the HF
#: Trainer of the encoder methods' official code; the later: PromptEOL's evaluation.py)
BEST_ON_TIE: tuple[str, ...] = ("first", "last")


def check_best_rule(on_tie: str, decimals: int | None) -> None:
    """The checkpoint selection's tie rule (``eval.best_on_tie``, ``eval.best_decimals``;
    :class:`cselab.run.checkpoints.BestCheckpoint`).

    Raises:
        ValueError: an unknown ``on_tie``, or ``decimals`` not null nor an integer >= 0 (names the key).
    """
    if on_tie not in BEST_ON_TIE:
        raise ValueError(f"eval.best_on_tie={on_tie!r}: expected one of {', '.join(BEST_ON_TIE)}")
    if decimals is not None and (isinstance(decimals, bool) or not isinstance(decimals, int) or decimals < 0):
        raise ValueError(f"eval.best_decimals={decimals!r}: expected null or a number of decimals >= 0 (PromptEOL: 2)")

#: ``encode(sentences) -> Tensor[len(sentences), D]``.
EncodeFn = Callable[[list[str]], torch.Tensor]


def spearman(
    x: Sequence[float] | np.ndarray | torch.Tensor, y: Sequence[float] | np.ndarray | torch.Tensor
) -> float:
    """Spearman rank correlation of ``x`` and ``y`` (``scipy.stats.spearmanr``; ties get average ranks).

    Args:
        x, y: 1-D sequences of equal length N >= 2.

    Returns:
        The correlation in [-1, 1] as a python float (NOT x 100); ``nan`` when either input is constant
        (scipy's behaviour, which SentEval inherits).

    Raises:
        ValueError: inputs are not 1-D, differ in length, or have fewer than 2 elements.
    """
    xa, ya = (np.asarray(v.detach().cpu().double().numpy() if isinstance(v, torch.Tensor) else v, dtype=np.float64)
              for v in (x, y))
    for what, a in (("x", xa), ("y", ya)):
        if a.ndim != 1:
            raise ValueError(f"spearman: {what} must be 1-D, got shape {tuple(a.shape)}")
    if xa.shape != ya.shape:
        raise ValueError(f"spearman: x and y must have the same length, got {xa.shape[0]} and {ya.shape[0]}")
    if xa.shape[0] < 2:
        raise ValueError(f"spearman: need at least 2 points, got {xa.shape[0]}")
    # (imported here: the run's config specs import this module, and scipy.stats takes 1.2 s to import)
    from scipy.stats import spearmanr

    return float(spearmanr(xa, ya)[0])


def cosine_scores(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Row-wise cosine similarity of two embedding matrices, in float64, with SentEval's NaN handling.

    SentEval: ``nan_to_num(cosine(nan_to_num(u), nan_to_num(v)))`` with
    ``cosine(u, v) = u.v / (sqrt(u.u) * sqrt(v.v))``; so NaN inputs count as 0 and a zero vector gives 0.

    Args:
        a: Tensor[N, D] (any float dtype, any device).
        b: Tensor[N, D].

    Returns:
        Tensor[N] float64 on CPU, values in [-1, 1] (0 where undefined).

    Raises:
        ValueError: ``a`` and ``b`` are not 2-D tensors of the same shape.
    """
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        raise ValueError("cosine_scores: a and b must be torch.Tensor")
    if a.ndim != 2 or a.shape != b.shape:
        raise ValueError(
            f"cosine_scores: a and b must be 2-D with the same shape [N, D], got {tuple(a.shape)} and {tuple(b.shape)}"
        )
    a64 = torch.nan_to_num(a.detach().to("cpu", torch.float64))
    b64 = torch.nan_to_num(b.detach().to("cpu", torch.float64))
    num = (a64 * b64).sum(dim=1)
    den = torch.sqrt((a64 * a64).sum(dim=1)) * torch.sqrt((b64 * b64).sum(dim=1))
    return torch.nan_to_num(num / den)


@dataclass(frozen=True)
class SubsetScore:
    """Score of one subset (STS12-16) or split (STS-B, SICK-R): Spearman x 100 over ``n`` pairs."""

    name: str
    spearman: float
    n: int


@dataclass(frozen=True)
class TaskScore:
    """Scores of one task, Spearman x 100.

    Attributes:
        task: canonical task name (``"sts12"`` ...).
        split: the split evaluated (``"test"`` for STS12-16).
        subsets: per-subset scores, SentEval order (one entry, keyed by split, for stsb / sickr).
        all: Spearman over the concatenation of all subsets' pairs.
        mean: plain mean of the subsets' Spearman.
        wmean: mean of the subsets' Spearman weighted by their number of pairs.
        n: number of pairs.
        system: the cosine of every pair, subsets concatenated in SentEval order (for plots, e.g. PromCSE Fig. 3).
        gold: the gold score of every pair, same order.
    """

    task: str
    split: str
    subsets: dict[str, SubsetScore]
    all: float
    mean: float
    wmean: float
    n: int
    system: list[float] = field(default_factory=list, repr=False)
    gold: list[float] = field(default_factory=list, repr=False)


@dataclass(frozen=True)
class STSReport:
    """Result of :meth:`STSEvaluator.evaluate_detailed`.

    Attributes:
        tasks: task -> :class:`TaskScore`, in the requested order.
        aggregation: the aggregation used for :attr:`scores`.
        n_sentences: number of distinct sentences passed to ``encode``.
    """

    tasks: dict[str, TaskScore]
    aggregation: str
    n_sentences: int
    scores: dict[str, float] = field(init=False)

    def __post_init__(self) -> None:
        scores = {t: float(getattr(ts, self.aggregation)) for t, ts in self.tasks.items()}  # all | mean | wmean
        scores["avg"] = float(np.mean(list(scores.values())))  # STSEvaluator.load refuses no tasks
        object.__setattr__(self, "scores", scores)


class STSEvaluator:
    """SentEval-style STS evaluator that only needs an ``encode`` function.

    Args:
        data_dir: folder containing ``senteval/downstream`` (or the ``downstream`` folder's parent); see
            :func:`cselab.data.sts.load_task`. Files are read lazily and cached by the reader.
        batch_size: ``None`` (default): ``encode`` is called ONCE with all distinct sentences and does its own
            batching. An int: the distinct sentences are passed to ``encode`` in consecutive chunks of this
            size (each sentence still encoded exactly once).

    Example::

        ev = STSEvaluator("data")
        scores = ev.evaluate(encode)          # {"sts12": 72.37, ..., "sickr": ..., "avg": ...}
        print(format_table(scores))
    """

    def __init__(self, data_dir: str | os.PathLike[str], batch_size: int | None = None) -> None:
        if batch_size is not None and (not isinstance(batch_size, int) or batch_size < 1):
            raise ValueError(f"batch_size must be None or a positive int, got {batch_size!r}")
        self.data_dir = data_dir
        self.batch_size = batch_size

    # ------------------------------------------------------------------ data
    def load(self, tasks: Iterable[str] = TEST_TASKS, split: str = "test") -> dict[str, dict[str, STSPairs]]:
        """Load the requested tasks: ``{task: {subset_or_split: STSPairs}}``.

        ``split`` applies to stsb / sickr; STS12-16 only have ``"test"``.

        Raises:
            ValueError: unknown / duplicated task, no tasks, or a task without ``split`` (that one from
                :func:`cselab.data.sts.load_task`, which lists the task's splits).
            FileNotFoundError, cselab.data.sts.STSFormatError: from the readers.
        """
        if isinstance(tasks, str):
            tasks = (tasks,)
        names = [canonical_task(t) for t in tasks]
        if not names:
            raise ValueError(f"no tasks requested; valid tasks: {', '.join(TEST_TASKS)}")
        if len(set(names)) != len(names):
            raise ValueError(f"duplicated task in {names}")
        return {t: load_task(self.data_dir, t, split) for t in names}

    # ------------------------------------------------------------------ encoding
    #: sentences per ``encode`` call when progress is reported (and no ``batch_size`` is set): a progress update
    #: every few seconds on a CPU (a chunk is sorted by length inside ``encode``, so larger chunks pad less)
    PROGRESS_CHUNK: int = 1024

    # ------------------------------------------------------------------ evaluation
    def evaluate_detailed(
        self,
        encode: EncodeFn,
        tasks: Iterable[str] = TEST_TASKS,
        split: str = "test",
        aggregation: str = "all",
        progress: Callable[[str, int, int], None] | None = None,
    ) -> STSReport:
        """Evaluate ``encode`` on ``tasks``; per-task, per-subset scores and pair counts.

        Args:
            encode: ``encode(sentences: list[str]) -> Tensor[len(sentences), D]`` (float, any device; also
                accepts a numpy array). Sentences arrive whitespace-normalised, deduplicated, sorted.
            tasks: task names (see :data:`TEST_TASKS`).
            split: ``"test"`` (papers) or ``"dev"`` / ``"train"`` (stsb / sickr only).
            aggregation: STS12-16 aggregation for :attr:`STSReport.scores`: ``"all"``, ``"mean"``, ``"wmean"``
                (all three are always computed in :attr:`STSReport.tasks`).
            progress: ``progress(task, done, total)``, called as each task's sentences are encoded (``done`` of
                ``total`` sentences new to this evaluation, after each call to ``encode`` of at most
                :attr:`PROGRESS_CHUNK` sentences).  With it the sentences are encoded task by task, each distinct
                sentence still once; without it, all in one call (or ``batch_size`` chunks).

        Returns:
            :class:`STSReport`; all scores are Spearman x 100 (python floats, unrounded).

        Raises:
            ValueError: unknown task / split / aggregation, or ``encode`` does not return a 2-D tensor with one
                row per sentence.
            FileNotFoundError, cselab.data.sts.STSFormatError: from the readers.
        """
        if aggregation not in AGGREGATIONS:
            raise ValueError(f"unknown aggregation {aggregation!r}; valid: {', '.join(AGGREGATIONS)}")
        data = self.load(tasks, split)

        if progress is None:
            sentences = sorted({s for subsets in data.values() for pairs in subsets.values()
                                for s in (*pairs.sent1, *pairs.sent2)})
            if not sentences:
                raise ValueError("no sentences to encode")
            emb = encode_sentences(encode, sentences, self.batch_size)
        else:  # task by task, so that the progress is per task; a sentence seen in an earlier task is not redone
            sentences, parts = [], []
            for task, subsets in data.items():
                seen = set(sentences)
                new = sorted({s for pairs in subsets.values() for s in (*pairs.sent1, *pairs.sent2)} - seen)
                progress(task, 0, len(new))
                if new:
                    parts.append(encode_sentences(encode, new, self.batch_size or self.PROGRESS_CHUNK,
                                                  lambda done, total, t=task: progress(t, done, total)))
                    sentences.extend(new)
            emb = torch.cat(parts)
        row = {s: i for i, s in enumerate(sentences)}

        results: dict[str, TaskScore] = {}
        for task, subsets in data.items():
            per: dict[str, SubsetScore] = {}
            all_sys: list[torch.Tensor] = []
            all_gold: list[float] = []
            for name, pairs in subsets.items():
                i1 = torch.tensor([row[s] for s in pairs.sent1], dtype=torch.long)
                i2 = torch.tensor([row[s] for s in pairs.sent2], dtype=torch.long)
                sys = cosine_scores(emb[i1], emb[i2])
                per[name] = SubsetScore(name, 100.0 * spearman(sys, pairs.scores), len(pairs))
                all_sys.append(sys)
                all_gold.extend(pairs.scores)
            sp = np.array([s.spearman for s in per.values()], dtype=np.float64)
            w = np.array([s.n for s in per.values()], dtype=np.float64)
            results[task] = TaskScore(
                task=task,
                split=split,
                subsets=per,
                all=100.0 * spearman(torch.cat(all_sys), all_gold),
                mean=float(np.average(sp)),
                wmean=float(np.average(sp, weights=w)),
                n=int(w.sum()),
                system=torch.cat(all_sys).tolist(),
                gold=[float(g) for g in all_gold],
            )
        return STSReport(tasks=results, aggregation=aggregation, n_sentences=len(sentences))

    def evaluate(self, encode: EncodeFn, *args: Any, **kwargs: Any) -> dict[str, float]:
        """Evaluate ``encode``: ``{task: Spearman x 100, ..., "avg": mean over the requested tasks}``.

        Takes :meth:`evaluate_detailed`'s arguments (``tasks``, ``split``, ``aggregation``, ``progress``) and
        raises its errors; returns its ``scores`` dict (tasks in requested order, then ``"avg"``; python floats,
        unrounded).
        """
        return dict(self.evaluate_detailed(encode, *args, **kwargs).scores)


def encode_sentences(encode: EncodeFn, sentences: list[str], size: int | None = None,
                     progress: Callable[[int, int], None] | None = None,
                     dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """``encode`` of ``sentences`` in consecutive calls of ``size`` sentences, checked and concatenated (the one
    encoding loop of the STS, CxC and transfer evaluators).

    Args:
        encode: ``encode(list[str]) -> Tensor[n, D]`` (or a numpy array) of floats, rows in the order given.
        sentences: each passed to ``encode`` once, in this order.
        size: sentences per call (None: all in one call).
        progress: ``progress(done, total)`` after each call.
        dtype: the result's dtype.

    Returns:
        Tensor[len(sentences), D] of ``dtype`` on CPU (``(0, 0)`` for no sentences).

    Raises:
        ValueError: ``encode`` does not return a 2-D float tensor with one row per sentence, or its D differs
            between calls.
    """
    size = size or max(len(sentences), 1)
    what = ("encode(sentences) must return a 2-D torch.Tensor [len(sentences), D] of floats, one row per sentence "
            "in the order given")
    chunks = []
    for start in range(0, len(sentences), size):
        batch = sentences[start : start + size]
        out = encode(batch)
        if isinstance(out, np.ndarray):
            out = torch.from_numpy(out)
        if not isinstance(out, torch.Tensor):
            raise ValueError(f"{what}; got {type(out).__name__}")
        if out.ndim != 2 or out.shape[0] != len(batch):
            raise ValueError(f"{what}; got shape {tuple(out.shape)} for {len(batch)} sentences")
        if not out.is_floating_point():
            raise ValueError(f"{what}; got dtype {out.dtype}")
        chunks.append(out.detach().to("cpu", dtype))
        if progress is not None:
            progress(start + len(batch), len(sentences))
    dims = {c.shape[1] for c in chunks}
    if len(dims) > 1:
        raise ValueError(f"encode returned embeddings of different sizes across calls: {sorted(dims)}")
    return torch.cat(chunks, dim=0) if chunks else torch.zeros(0, 0, dtype=dtype)


def encode_pairs(
    encode: EncodeFn, text1: Sequence[str], text2: Sequence[str], batch_size: int | None = None
) -> torch.Tensor:
    """Cosine of the embeddings of ``text1[i]`` and ``text2[i]``; each distinct text is encoded once (the pairs of
    CxC-STS, :mod:`cselab.evaluation.cxc`, and of the STS figures, :func:`cselab.analysis.plots_data.pair_cosines`).

    Args:
        encode: ``encode(list[str]) -> Tensor[n, D]`` (or a numpy array); receives the distinct texts sorted.
        text1, text2: the two sides, length N.
        batch_size: ``None``: one ``encode`` call with all distinct texts; else chunks of this size.

    Returns:
        Tensor[N] float64 (CPU), cosine per row (0 where undefined, as SentEval).

    Raises:
        ValueError: lengths differ, no texts, or ``encode`` does not return one 2-D float row per text.
    """
    if len(text1) != len(text2):
        raise ValueError(f"text1 and text2 differ in length: {len(text1)} vs {len(text2)}")
    if batch_size is not None and (not isinstance(batch_size, int) or batch_size < 1):
        raise ValueError(f"batch_size must be None or a positive int, got {batch_size!r}")
    texts = sorted(set(text1) | set(text2))
    if not texts:
        raise ValueError("no texts to encode")
    emb = encode_sentences(encode, texts, batch_size)
    row = {t: i for i, t in enumerate(texts)}
    i1 = torch.tensor([row[t] for t in text1], dtype=torch.long)
    i2 = torch.tensor([row[t] for t in text2], dtype=torch.long)
    return cosine_scores(emb[i1], emb[i2])


def format_table(scores: Mapping[str, float], intervals: Mapping[str, Sequence[float]] | None = None) -> str:
    """Plain-text table in the papers' column order: STS12 STS13 STS14 STS15 STS16 STS-B SICK-R Avg.

    Args:
        scores: ``{task: Spearman x 100}`` as returned by :meth:`STSEvaluator.evaluate` (keys may also be the
            paper names, e.g. ``"STS-B"``); ``"avg"`` is shown when present, else computed when all seven
            tasks are present, else ``"-"``.
        intervals: ``{task: [low, high]}`` (``results.json``'s ``test_ci``), shown as two more lines, the lower
            and the upper bounds under each score (marked ``<- interval low`` / ``high``); ``None``: none.

    Returns:
        Two lines (header, values with 2 decimals; missing tasks shown as ``"-"``), columns right-aligned; four
        with ``intervals`` (the first two unchanged).
    """
    lookup = {}
    for k, v in scores.items():
        key = k.lower()
        try:
            key = canonical_task(k)
        except ValueError:
            pass
        lookup[key] = v
    values: list[float | None] = [lookup.get(t) for t in TEST_TASKS]
    avg = lookup.get("avg")
    if avg is None and all(v is not None for v in values):
        avg = float(np.mean(values))
    values.append(avg)
    columns = [Column(name, "right", lambda v: "-" if v is None else f"{float(v):.2f}")
               for name in [*(PAPER_NAMES[t] for t in TEST_TASKS), "Avg"]]
    table = Table(columns, [values])
    lines = text_lines(table)
    if intervals:  # under the scores, in their columns' widths
        ci = {(canonical_task(k) if k.lower() != "avg" else "avg"): v for k, v in intervals.items()}
        bounds = Table(columns, [[ci[k][side] if ci.get(k) else None for k in (*TEST_TASKS, "avg")] for side in (0, 1)])
        lines += [f"{line}   <- interval {label}" for line, label in
                  zip(text_lines(bounds, widths=table.widths(), header=False), ("low", "high"), strict=True)]
    return "\n".join(lines)
