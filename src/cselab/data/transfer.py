"""The seven SentEval transfer tasks (MR, CR, SUBJ, MPQA, SST-2, TREC, MRPC), read exactly as SentEval reads them.

Files (SentEval's own names, under ``<data_dir>/senteval/downstream/``; ``make data`` links them with the STS
sets, ``cselab data`` fetches them)::

    MR/rt-polarity.{pos,neg}        CR/custrev.{pos,neg}          SUBJ/subj.{objective,subjective}
    MPQA/mpqa.{pos,neg}             SST/binary/sentiment-{train,dev,test}
    TREC/{train_5500,TREC_10}.label MRPC/msr_paraphrase_{train,test}.txt

Each reader transcribes facebookresearch/SentEval @ 5d6dc117 (file:line in docs/fidelity.md, rows T1-T6):

* MR / CR / SUBJ / MPQA (``senteval/binary.py:33-35``): latin-1, ``read().splitlines()``, whitespace tokens,
  empty lines kept as samples; label 1 for the first file (``pos``, SUBJ ``objective``), 0 for the second.
* SST-2 (``senteval/sst.py:42-55``): UTF-8, ``sentence<TAB>label`` per line.
* TREC (``senteval/trec.py:33-44``): latin-1, ``COARSE:fine words...``; the coarse label through
  ``{ABBR: 0, DESC: 1, ENTY: 2, HUM: 3, LOC: 4, NUM: 5}``, the fine label dropped.
* MRPC (``senteval/mrpc.py:41-54``): UTF-8 (the header line, BOM included, dropped), columns 3 and 4 the two
  sentences, column 0 the label.

Every split is then put in SentEval's order: a stable sort by ``(len(tokens), label)`` (``binary.py:26-27``,
``sst.py:64-66``, ``trec.py:50-56``), ``(len(tokens A), len(tokens B), label)`` for MRPC (``mrpc.py:63-66``).
That order matters: ``StratifiedKFold(shuffle=True)`` assigns folds by row position, so the same rows in another
order give other folds.  The sentence handed to ``encode`` is the tokens joined by one space, as the batchers of
SimCSE's and PromptBERT's ``evaluation.py`` do (``' '.join(s)``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cselab.data.paths import data_root

__all__ = ["TRANSFER_TASKS", "PAPER_NAMES", "TASK_FILES", "TransferSplit", "TransferTask", "check_transfer_files",
           "load_transfer_task", "canonical_transfer_task"]

#: the seven tasks of the papers' transfer tables, in column order.
TRANSFER_TASKS: tuple[str, ...] = ("mr", "cr", "subj", "mpqa", "sst2", "trec", "mrpc")

#: task -> column name used in the papers.
PAPER_NAMES: dict[str, str] = {"mr": "MR", "cr": "CR", "subj": "SUBJ", "mpqa": "MPQA", "sst2": "SST-2",
                               "trec": "TREC", "mrpc": "MRPC"}

#: task -> (folder under senteval/downstream, [(file, samples as SentEval reads them)]): the line-count check.
#: CR and MPQA count SentEval's final empty line as one sample each (custrev 2406+1 / 1367+1, mpqa 3311+1 /
#: 7293+1, ../shared/data/PROVENANCE.md); MRPC's counts exclude its header line.
TASK_FILES: dict[str, tuple[str, tuple[tuple[str, int], ...]]] = {
    "mr": ("MR", (("rt-polarity.pos", 5331), ("rt-polarity.neg", 5331))),
    "cr": ("CR", (("custrev.pos", 2407), ("custrev.neg", 1368))),
    "subj": ("SUBJ", (("subj.objective", 5000), ("subj.subjective", 5000))),
    "mpqa": ("MPQA", (("mpqa.pos", 3312), ("mpqa.neg", 7294))),
    "sst2": ("SST/binary", (("sentiment-train", 67349), ("sentiment-dev", 872), ("sentiment-test", 1821))),
    "trec": ("TREC", (("train_5500.label", 5452), ("TREC_10.label", 500))),
    "mrpc": ("MRPC", (("msr_paraphrase_train.txt", 4076), ("msr_paraphrase_test.txt", 1725))),
}

_TREC_LABELS = {"ABBR": 0, "DESC": 1, "ENTY": 2, "HUM": 3, "LOC": 4, "NUM": 5}
_ALIASES = {"sst": "sst2", "sst-2": "sst2", "sst_2": "sst2"}


@dataclass(frozen=True)
class TransferSplit:
    """One split of a task, in SentEval's row order.

    Attributes:
        sentences: N strings (tokens joined by one space); MRPC: the first sentence of each pair.
        labels: int64 array of shape (N,).
        pairs: MRPC only: the second sentence of each pair (N strings), else None.
    """

    sentences: list[str]
    labels: np.ndarray
    pairs: list[str] | None = None

    def __len__(self) -> int:
        return len(self.labels)


@dataclass(frozen=True)
class TransferTask:
    """A transfer task: its splits and the SentEval classifier that scores it.

    Attributes:
        name: one of :data:`TRANSFER_TASKS`.
        splits: ``{"all"}`` (MR, CR, SUBJ, MPQA: nested cross-validation), ``{"train", "test"}`` (TREC, MRPC:
            cross-validation on train), ``{"train", "valid", "test"}`` (SST-2).
        nclasses: 2, or 6 for TREC.
        classifier: ``inner_kfold`` | ``kfold`` | ``split`` (``senteval/tools/validation.py``'s
            ``InnerKFoldClassifier`` / ``KFoldClassifier`` / ``SplitClassifier``).
    """

    name: str
    splits: dict[str, TransferSplit]
    nclasses: int
    classifier: str

    def sentences(self) -> list[str]:
        """Every sentence of every split (with repeats), the set to encode."""
        return [s for split in self.splits.values() for s in split.sentences + (split.pairs or [])]


def canonical_transfer_task(name: str) -> str:
    """``"MR"`` / ``"SST-2"`` / ``"sst2"`` -> the canonical lower-case name.

    Raises:
        ValueError: not one of the seven tasks (the message lists them).
    """
    key = _ALIASES.get(str(name).lower(), str(name).lower())
    if key not in TRANSFER_TASKS:
        raise ValueError(f"unknown transfer task {name!r}: expected some of {list(TRANSFER_TASKS)}")
    return key


def _lines_binary(path: Path) -> list[list[str]]:
    return [line.split() for line in path.read_text(encoding="latin-1").splitlines()]  # binary.py:20-21


def _lines_sst(path: Path) -> tuple[list[list[str]], list[int]]:
    xs, ys = [], []
    with open(path, encoding="utf-8") as f:  # sst.py:44-49
        for line in f:
            sample = line.strip().split("\t")
            ys.append(int(sample[1]))
            xs.append(sample[0].split())
    return xs, ys


def _lines_trec(path: Path) -> tuple[list[list[str]], list[int]]:
    xs, ys = [], []
    with open(path, encoding="latin-1") as f:  # trec.py:37-43
        for number, line in enumerate(f, 1):
            target, sample = line.strip().split(":", 1)
            if target not in _TREC_LABELS:
                raise ValueError(f"{path}:{number}: coarse label {target!r}, expected one of {list(_TREC_LABELS)}")
            xs.append(sample.split(" ", 1)[1].split())
            ys.append(_TREC_LABELS[target])
    return xs, ys


def _lines_mrpc(path: Path) -> tuple[list[list[str]], list[list[str]], list[int]]:
    a, b, ys = [], [], []
    with open(path, encoding="utf-8") as f:  # mrpc.py:41-54 (header dropped)
        for number, line in enumerate(f):
            if number == 0:
                continue
            text = line.strip().split("\t")
            a.append(text[3].split())
            b.append(text[4].split())
            ys.append(int(text[0]))
    return a, b, ys


def _count(task: str, path: Path) -> int:
    """Samples in ``path`` as SentEval's reader for ``task`` counts them."""
    if task in ("mr", "cr", "subj", "mpqa"):
        return len(_lines_binary(path))
    with open(path, encoding="utf-8" if task in ("sst2", "mrpc") else "latin-1") as f:
        n = sum(1 for _ in f)
    return n - 1 if task == "mrpc" else n


def check_transfer_files(data_dir: str | os.PathLike | None, tasks: Sequence[str]) -> dict[str, Path]:
    """Refuse a missing or truncated transfer file before anything is encoded.

    Args:
        data_dir: the data directory (``data.data_dir``; None: ``$CSELAB_DATA_DIR`` or ``./data``).
        tasks: task names (any spelling :func:`canonical_transfer_task` takes).

    Returns:
        ``{task: its folder}``.

    Raises:
        ValueError: an unknown task name.
        FileNotFoundError: a file is missing (names the file and how to get it).
        ValueError: a file does not hold the number of samples SentEval's files hold (names the file, the
            count found and the count expected).
    """
    root = data_root(data_dir) / "senteval" / "downstream"
    folders = {}
    for name in tasks:
        task = canonical_transfer_task(name)
        folder, files = TASK_FILES[task]
        for file, expected in files:
            path = root / folder / file
            if not path.is_file():
                raise FileNotFoundError(
                    f"transfer task {PAPER_NAMES[task]}: {path} not found (expected {expected:,} samples): run "
                    "`make data` (links ../shared/data) or `cselab data --what transfer` (SentEval's files)")
            found = _count(task, path)
            if found != expected:
                raise ValueError(
                    f"transfer task {PAPER_NAMES[task]}: {path} holds {found:,} samples, SentEval's file holds "
                    f"{expected:,} (truncated or another version): fetch it again with `cselab data --what transfer`")
        folders[task] = root / folder
    return folders


def _sorted_split(xs: list[list[str]], ys: list[int]) -> TransferSplit:
    order = sorted(zip(xs, ys, strict=True), key=lambda z: (len(z[0]), z[1]))  # stable, as SentEval's sorted()
    return TransferSplit([" ".join(x) for x, _ in order], np.array([y for _, y in order], dtype=np.int64))


def load_transfer_task(data_dir: str | os.PathLike | None, name: str) -> TransferTask:
    """Read one task as SentEval does (files checked first, :func:`check_transfer_files`).

    Raises:
        FileNotFoundError, ValueError: see :func:`check_transfer_files`; a TREC line with an unknown label.
    """
    task = canonical_transfer_task(name)
    folder = check_transfer_files(data_dir, [task])[task]
    files = [folder / f for f, _ in TASK_FILES[task][1]]
    if task in ("mr", "cr", "subj", "mpqa"):
        pos, neg = _lines_binary(files[0]), _lines_binary(files[1])
        return TransferTask(task, {"all": _sorted_split(pos + neg, [1] * len(pos) + [0] * len(neg))}, 2,
                            "inner_kfold")
    if task == "sst2":
        splits = dict(zip(("train", "valid", "test"), (_sorted_split(*_lines_sst(f)) for f in files), strict=True))
        return TransferTask(task, splits, 2, "split")
    if task == "trec":
        splits = dict(zip(("train", "test"), (_sorted_split(*_lines_trec(f)) for f in files), strict=True))
        return TransferTask(task, splits, 6, "kfold")
    splits = {}
    for key, f in zip(("train", "test"), files, strict=True):
        a, b, ys = _lines_mrpc(f)
        order = sorted(zip(a, b, ys, strict=True), key=lambda z: (len(z[0]), len(z[1]), z[2]))
        splits[key] = TransferSplit([" ".join(x) for x, _, _ in order], np.array([y for *_, y in order], np.int64),
                                    [" ".join(x) for _, x, _ in order])
    return TransferTask(task, splits, 2, "kfold")
