"""Readers for the SentEval STS data (STS12-16, STS-B, SICK-R), following SentEval's conventions.

The conventions are those of SentEval's ``senteval/sts.py`` as used by SimCSE's fork
(``princeton-nlp/SimCSE/SentEval``) together with SimCSE's ``evaluation.py`` batcher:

* STS12-16 (``STSEval.loadFile``): ``STS.input.<subset>.txt`` is read as UTF-8 with ``.read().splitlines()``,
  each line is ``split("\\t")`` into the two sentences; ``STS.gs.<subset>.txt`` likewise, one gold score a
  line. An EMPTY gold line means the pair was not scored: the pair is dropped.
* STS-B (``STSBenchmarkEval.loadFile``): no header; each line ``line.strip().split("\\t")``; the gold score is
  column 4, the sentences are columns 5 and 6 (0-based); extra columns (the raw distribution's source
  columns) are ignored (no csv quote parsing).
* SICK-R (``SICKRelatednessEval.loadFile``): the first line is a header; columns pair_ID, sentence_A,
  sentence_B, relatedness_score (0-3), entailment_judgment (4, ignored).
* Every sentence is whitespace-split and re-joined with single spaces (SentEval stores ``s.split()``,
  SimCSE's batcher does ``' '.join(s)``), so ``' '.join(s.split())`` is what the encoder sees.

Files are parsed once per (path, size, mtime) and cached, because the trainer re-reads STS-B dev at every
validation.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

__all__ = ["STS_SUBSETS", "STSB_FILES", "SICK_FILES", "TASKS", "STSFormatError", "STSPairs", "read_sts_year",
           "read_stsb", "read_sick", "resolve_downstream_dir", "canonical_task", "task_splits", "load_task"]

#: task -> subsets, in SentEval's order (``senteval/sts.py``). STS13 has no SMT subset (LDC licence).
STS_SUBSETS: dict[str, tuple[str, ...]] = {
    "sts12": ("MSRpar", "MSRvid", "SMTeuroparl", "surprise.OnWN", "surprise.SMTnews"),
    "sts13": ("FNWN", "headlines", "OnWN"),
    "sts14": ("deft-forum", "deft-news", "headlines", "images", "OnWN", "tweet-news"),
    "sts15": ("answers-forums", "answers-students", "belief", "headlines", "images"),
    "sts16": ("answer-answer", "headlines", "plagiarism", "postediting", "question-question"),
}

#: split -> file under ``downstream/STS/STSBenchmark``.
STSB_FILES: dict[str, str] = {"train": "sts-train.csv", "dev": "sts-dev.csv", "test": "sts-test.csv"}

#: split -> file under ``downstream/SICK`` (SentEval uses the trial set as dev).
SICK_FILES: dict[str, str] = {
    "train": "SICK_train.txt",
    "dev": "SICK_trial.txt",
    "test": "SICK_test_annotated.txt",
}

#: every task name :func:`load_task` accepts (canonical, lower case).
TASKS: tuple[str, ...] = (*STS_SUBSETS, "stsb", "sickr")

_ALIASES: dict[str, str] = {
    "sts-b": "stsb",
    "stsbenchmark": "stsb",
    "sick-r": "sickr",
    "sickrelatedness": "sickr",
}

_MISSING_HINT = (
    "run `make data` (links ../shared/data when present) or `python -m cselab data` "
    "to fetch SimCSE's SentEval archive"
)


class STSFormatError(ValueError):
    """A data file does not have the layout SentEval expects (the message names file, 1-based line, expectation)."""


@dataclass(frozen=True)
class STSPairs:
    """Scored sentence pairs of one STS subset or split.

    Attributes:
        sent1: first sentences, whitespace-normalised (``' '.join(s.split())``).
        sent2: second sentences, same length as ``sent1``.
        scores: gold similarity scores (STS: 0-5, SICK: 1-5), same length.
        name: subset name (e.g. ``"MSRpar"``) or split name (``"test"``) for STS-B / SICK-R.

    Each reader call returns fresh lists, so mutating them does not affect the reader cache.
    """

    sent1: list[str]
    sent2: list[str]
    scores: list[float]
    name: str

    def __len__(self) -> int:
        return len(self.scores)


def _norm(sentence: str) -> str:
    """SimCSE's batcher input: whitespace-split (SentEval) and re-joined with single spaces."""
    return " ".join(sentence.split())


def _stat_key(path: str | os.PathLike[str]) -> tuple[str, int, int]:
    p = Path(path).resolve()
    if not p.is_file():
        raise FileNotFoundError(f"STS data file not found: {p}; {_MISSING_HINT}")
    st = p.stat()
    return str(p), st.st_size, st.st_mtime_ns


def _to_pairs(rows: tuple[tuple[str, str, float], ...], name: str) -> STSPairs:
    return STSPairs([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows], name)


@lru_cache(maxsize=256)
def _parse_sts_year(
    input_key: tuple[str, int, int], gold_key: tuple[str, int, int]
) -> tuple[tuple[str, str, float], ...]:
    input_path, gold_path = input_key[0], gold_key[0]
    # SentEval: io.open(..., encoding='utf8').read().splitlines() on both files.
    input_lines = Path(input_path).read_text(encoding="utf-8").splitlines()
    gold_lines = Path(gold_path).read_text(encoding="utf-8").splitlines()
    if len(input_lines) != len(gold_lines):
        raise STSFormatError(
            f"{input_path} has {len(input_lines)} lines but {gold_path} has {len(gold_lines)}; "
            f"expected one gold-score line (possibly empty) per sentence pair"
        )
    rows: list[tuple[str, str, float]] = []
    for lineno, (line, gold) in enumerate(zip(input_lines, gold_lines, strict=True), start=1):
        fields = line.split("\t")
        if len(fields) != 2:
            raise STSFormatError(
                f"{input_path}, line {lineno}: expected exactly 2 tab-separated sentences, "
                f"got {len(fields)} field(s)"
            )
        if gold == "":  # SentEval: raw_scores != '' -> unscored pair, dropped
            continue
        try:
            y = float(gold)
        except ValueError:
            raise STSFormatError(
                f"{gold_path}, line {lineno}: expected a gold score (a number) or an empty line, got {gold!r}"
            ) from None
        rows.append((_norm(fields[0]), _norm(fields[1]), y))
    return tuple(rows)


def read_sts_year(task_dir: str | os.PathLike[str], subset: str) -> STSPairs:
    """Read one STS12-16 subset: ``STS.input.<subset>.txt`` + ``STS.gs.<subset>.txt`` (SentEval ``STSEval``).

    Args:
        task_dir: a year folder, e.g. ``.../downstream/STS/STS12-en-test``.
        subset: subset name, e.g. ``"MSRpar"`` (see :data:`STS_SUBSETS`).

    Returns:
        The scored pairs (unscored pairs, i.e. empty gold lines, dropped), in file order, ``name=subset``.

    Raises:
        FileNotFoundError: either file is missing (the message names the path and how to get the data).
        STSFormatError: line counts of the two files differ, an input line does not have exactly two
            tab-separated fields, or a non-empty gold line is not a number.
    """
    task_dir = Path(task_dir)
    input_key = _stat_key(task_dir / f"STS.input.{subset}.txt")
    gold_key = _stat_key(task_dir / f"STS.gs.{subset}.txt")
    return _to_pairs(_parse_sts_year(input_key, gold_key), subset)


@lru_cache(maxsize=64)
def _parse_columns(
    key: tuple[str, int, int], skip_header: bool, score_col: int, a_col: int, b_col: int
) -> tuple[tuple[str, str, float], ...]:
    path = key[0]
    need = max(score_col, a_col, b_col) + 1
    rows: list[tuple[str, str, float]] = []
    # SentEval: `for line in io.open(fpath, 'r', encoding='utf-8')` then line.strip().split('\t').
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if skip_header and lineno == 1:
                continue
            text = line.strip().split("\t")
            if len(text) < need:
                raise STSFormatError(
                    f"{path}, line {lineno}: expected at least {need} tab-separated columns "
                    f"(score in column {score_col}, sentences in columns {a_col} and {b_col}, 0-based), "
                    f"got {len(text)}"
                )
            try:
                y = float(text[score_col])
            except ValueError:
                raise STSFormatError(
                    f"{path}, line {lineno}: expected a number in column {score_col}, got {text[score_col]!r}"
                ) from None
            rows.append((_norm(text[a_col]), _norm(text[b_col]), y))
    return tuple(rows)


def read_stsb(path: str | os.PathLike[str], name: str | None = None) -> STSPairs:
    """Read an STS-B file (``sts-{train,dev,test}.csv``) the way SentEval's ``STSBenchmarkEval`` does (the
    layout: module docstring).

    Args:
        path: the csv file.
        name: the ``STSPairs.name``; default: the split taken from the file name (``sts-test.csv`` -> ``test``).

    Raises:
        FileNotFoundError: the file is missing.
        STSFormatError: a line has fewer than 7 columns or a non-numeric score (message names file and line).
    """
    key = _stat_key(path)
    name = Path(path).stem.removeprefix("sts-") if name is None else name
    return _to_pairs(_parse_columns(key, False, 4, 5, 6), name)


def read_sick(path: str | os.PathLike[str], name: str | None = None) -> STSPairs:
    """Read a SICK file (``SICK_{train,trial,test_annotated}.txt``) like SentEval's ``SICKRelatednessEval``
    (the layout: module docstring).

    Args:
        path: the SICK file.
        name: the ``STSPairs.name``; default: the file stem.

    Raises:
        FileNotFoundError: the file is missing.
        STSFormatError: a data line has fewer than 4 columns or a non-numeric score.
    """
    key = _stat_key(path)
    return _to_pairs(_parse_columns(key, True, 3, 1, 2), name if name is not None else Path(path).stem)


def canonical_task(task: str) -> str:
    """Canonical lower-case task name (``"STS-B"``/``"STSBenchmark"`` -> ``"stsb"``, ``"SICK-R"`` -> ``"sickr"``).

    Raises:
        ValueError: unknown task (the message lists the valid ones).
    """
    t = task.strip().lower()
    t = _ALIASES.get(t, t)
    if t not in TASKS:
        raise ValueError(f"unknown STS task {task!r}; valid tasks: {', '.join(TASKS)}")
    return t


def task_splits(task: str) -> tuple[str, ...]:
    """The splits a task has: ``("test",)`` for STS12-16, ``("train", "dev", "test")`` for stsb / sickr."""
    t = canonical_task(task)
    return ("test",) if t in STS_SUBSETS else ("train", "dev", "test")


def resolve_downstream_dir(data_dir: str | os.PathLike[str]) -> Path:
    """Find SentEval's ``downstream`` folder from ``data_dir``.

    Accepted, in this order: ``data_dir/senteval/downstream``, ``data_dir/downstream`` (``data_dir`` is the
    ``downstream`` folder's parent), and ``data_dir`` itself when it holds ``STS/`` or ``SICK/``. If none
    exists, ``data_dir/senteval/downstream`` is returned so the later "file not found" error names the
    expected layout.
    """
    root = Path(data_dir).expanduser().resolve()
    for cand in (root / "senteval" / "downstream", root / "downstream"):
        if cand.is_dir():
            return cand
    if (root / "STS").is_dir() or (root / "SICK").is_dir():
        return root
    return root / "senteval" / "downstream"


def load_task(data_dir: str | os.PathLike[str], task: str, split: str = "test") -> dict[str, STSPairs]:
    """Load one STS task as SentEval does.

    Args:
        data_dir: the folder containing ``senteval/downstream`` (e.g. ``data/`` or ``../shared/data``), or the
            ``downstream`` folder's parent (see :func:`resolve_downstream_dir`).
        task: ``"sts12"`` ... ``"sts16"``, ``"stsb"``, ``"sickr"`` (case-insensitive; ``"STS-B"``,
            ``"STSBenchmark"``, ``"SICK-R"``, ``"SICKRelatedness"`` also accepted).
        split: ``"test"`` for STS12-16 (their only split); ``"train"``/``"dev"``/``"test"`` for stsb / sickr
            (sickr dev = ``SICK_trial.txt``).

    Returns:
        STS12-16: ``{subset: STSPairs}`` in SentEval's subset order (:data:`STS_SUBSETS`);
        stsb / sickr: ``{split: STSPairs}``.

    Raises:
        ValueError: unknown task or split (the message lists the valid ones).
        FileNotFoundError: a data file is missing (names the full path and how to get the data).
        STSFormatError: a file is malformed.
    """
    t = canonical_task(task)
    splits = task_splits(t)
    if split not in splits:
        raise ValueError(f"task {t!r} has no split {split!r}; valid splits: {', '.join(splits)}")
    down = resolve_downstream_dir(data_dir)
    if t in STS_SUBSETS:
        year_dir = down / "STS" / f"{t.upper()}-en-test"  # SentEval's folder: STS12-en-test ...
        return {s: read_sts_year(year_dir, s) for s in STS_SUBSETS[t]}
    if t == "stsb":
        return {split: read_stsb(down / "STS" / "STSBenchmark" / STSB_FILES[split], name=split)}
    return {split: read_sick(down / "SICK" / SICK_FILES[split], name=split)}

