"""Crisscrossed Captions (CxC) STS data: the score files joined with MS-COCO caption text.

CxC (Parekh et al. 2021, ``google-research-datasets/Crisscrossed-Captions``) rates caption pairs of the
MS-COCO Karpathy 5k val and test images on a 0-5 STS scale. PromCSE (Jiang et al. 2022, Sec. 4.2) uses the
test split as a domain-shifted STS task. The score files ``sts_{val,test}.csv`` hold ids only:

    caption1,caption2,agg_score,sampling_method
    COCO_val2014:sentid:411553,COCO_val2014:sentid:5142,1.56,c2c_isim

* ``caption1`` / ``caption2``: ``COCO_val2014:sentid:<N>``, N = the ``sentid`` of Karpathy's
  ``dataset_coco.json`` (equal to the MS-COCO caption annotation ``id``);
* ``agg_score``: the aggregated rating (0-5);
* ``sampling_method``: ``c2c_cocaption`` (two captions of the same image) or ``c2c_isim`` (captions of
  different images sampled by image similarity).

Each of the 25,000 captions of a split is ``caption1`` of 1-3 rows (exactly one ``c2c_cocaption`` row plus
0-2 ``c2c_isim`` rows): the ``caption1`` column is the bootstrap's "query" (see
:mod:`cselab.evaluation.cxc`). Sizes: test 44,045 pairs, val 44,009 pairs, 25,000 distinct ids each.

The caption text is not distributed with CxC: it is read from Karpathy's ``dataset_coco.json`` or,
equivalently, MS-COCO's ``captions_val2014.json`` (the layouts: :func:`load_coco_captions`; where to get
them: :data:`CAPTIONS_HINT`).
"""

from __future__ import annotations

import csv
import json
import os
from dataclasses import dataclass, fields
from pathlib import Path

__all__ = ["CXC_SPLITS", "CXC_ID_PREFIX", "CAPTIONS_HINT", "CxCFormatError", "MissingCaptionsError", "CxCScores",
           "CxCPairs", "parse_cxc_id", "read_cxc_scores", "load_coco_captions", "join_captions", "resolve_cxc_dir",
           "load_cxc"]

#: the CxC STS splits (``sts_<split>.csv``)
CXC_SPLITS: tuple[str, ...] = ("val", "test")

#: prefix of every caption id in the STS files
CXC_ID_PREFIX = "COCO_val2014:sentid:"

_HEADER = ("caption1", "caption2", "agg_score", "sampling_method")

#: where to get the caption text
CAPTIONS_HINT = (
    "CxC ships caption ids only; download Andrej Karpathy's MS-COCO split file dataset_coco.json "
    "(in caption_datasets.zip / coco.zip from https://cs.stanford.edu/people/karpathy/deepimagesent/ , the "
    "neuraltalk2 Karpathy splits) and pass its path; MS-COCO's annotations/captions_val2014.json "
    "(https://cocodataset.org) also works"
)


class CxCFormatError(ValueError):
    """A CxC score file or caption file does not have the expected layout (names the file and line)."""


class MissingCaptionsError(KeyError):
    """Caption ids of a CxC score file are missing from the caption map (the message gives the counts)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


@dataclass(frozen=True)
class CxCScores:
    """The rows of one CxC STS score file (ids only).

    Attributes:
        id1: ``caption1`` sentids (the queries), one per row.
        id2: ``caption2`` sentids (the rated items).
        scores: ``agg_score`` (0-5).
        sampling_method: ``c2c_cocaption`` or ``c2c_isim`` per row.
        name: split name (file stem without ``sts_``, e.g. ``"test"``).
    """

    id1: list[int]
    id2: list[int]
    scores: list[float]
    sampling_method: list[str]
    name: str

    def __len__(self) -> int:
        return len(self.scores)


@dataclass(frozen=True)
class CxCPairs(CxCScores):
    """:class:`CxCScores` plus the caption text of both columns.

    Attributes:
        text1: caption of ``id1`` per row (whitespace-normalised).
        text2: caption of ``id2`` per row.
    """

    text1: list[str]
    text2: list[str]


def parse_cxc_id(value: str) -> int:
    """``"COCO_val2014:sentid:411553"`` -> ``411553``.

    Raises:
        ValueError: not of the form ``COCO_val2014:sentid:<non-negative int>``.
    """
    if not value.startswith(CXC_ID_PREFIX) or not value[len(CXC_ID_PREFIX) :].isdigit():
        raise ValueError(f"expected a caption id {CXC_ID_PREFIX}<int>, got {value!r}")
    return int(value[len(CXC_ID_PREFIX) :])


def read_cxc_scores(path: str | os.PathLike[str], name: str | None = None) -> CxCScores:
    """Read a CxC STS score file (``sts_val.csv`` / ``sts_test.csv``).

    Args:
        path: the csv (header ``caption1,caption2,agg_score,sampling_method``).
        name: the split name; default: the file stem without ``sts_``.

    Returns:
        The rows in file order.

    Raises:
        FileNotFoundError: the file is missing.
        CxCFormatError: wrong header, a row without 4 fields, a bad id or a non-numeric score (names the file
            and the 1-based line).
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(
            f"CxC score file not found: {p.resolve()}; get sts_{{val,test}}.csv from "
            f"https://github.com/google-research-datasets/Crisscrossed-Captions (data/)"
        )
    rows: list[tuple[int, int, float, str]] = []
    with open(p, encoding="utf-8", newline="") as f:
        reader = csv.reader(f)
        for row in reader:
            lineno = reader.line_num
            if lineno == 1:
                if tuple(row) != _HEADER:
                    raise CxCFormatError(f"{p}, line 1: expected the header {','.join(_HEADER)}, got {row!r}")
                continue
            if not row:
                continue
            if len(row) != len(_HEADER):
                raise CxCFormatError(f"{p}, line {lineno}: expected {len(_HEADER)} fields, got {len(row)}")
            try:
                a, b = parse_cxc_id(row[0]), parse_cxc_id(row[1])
                y = float(row[2])
            except ValueError as err:
                raise CxCFormatError(f"{p}, line {lineno}: {err}") from None
            rows.append((a, b, y, row[3]))
    name = p.stem.removeprefix("sts_") if name is None else name
    columns = [list(column) for column in zip(*rows, strict=True)] or [[], [], [], []]  # id1, id2, scores, methods
    return CxCScores(*columns, name)


def load_coco_captions(path: str | os.PathLike[str], sentids: set[int] | None = None) -> dict[int, str]:
    """Map caption id -> caption text from ``dataset_coco.json`` (or MS-COCO ``captions_*.json``).

    Args:
        path: Karpathy's ``dataset_coco.json`` (``images[].sentences[]`` with ``sentid`` and ``raw``) or an
            MS-COCO captions file (``annotations[]`` with ``id`` and ``caption``).
        sentids: keep only these ids (saves memory); ``None`` keeps all.

    Returns:
        ``{sentid: whitespace-normalised caption}``.

    Raises:
        FileNotFoundError: the file is missing (the message says where to get ``dataset_coco.json``).
        CxCFormatError: not JSON, or neither layout (names the file and what was found).
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"MS-COCO caption file not found: {p.resolve()}. {CAPTIONS_HINT}")
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise CxCFormatError(f"{p}: not valid JSON (line {err.lineno}: {err.msg})") from None
    out: dict[int, str] = {}

    def keep(sid: object, text: object, where: str) -> None:
        if not isinstance(sid, int) or not isinstance(text, str):
            raise CxCFormatError(
                f"{p}: {where}: expected an int id and a string caption, got {sid!r}, {text!r}"
            )
        if sentids is None or sid in sentids:
            out[sid] = " ".join(text.split())

    if isinstance(data, dict) and isinstance(data.get("images"), list):
        for i, image in enumerate(data["images"]):
            sentences = image.get("sentences") if isinstance(image, dict) else None
            if not isinstance(sentences, list):
                raise CxCFormatError(
                    f"{p}: images[{i}] has no 'sentences' list (Karpathy dataset_coco.json layout)"
                )
            for j, s in enumerate(sentences):
                if not isinstance(s, dict):
                    raise CxCFormatError(f"{p}: images[{i}].sentences[{j}] is not an object")
                keep(s.get("sentid"), s.get("raw"), f"images[{i}].sentences[{j}] (sentid, raw)")
    elif isinstance(data, dict) and isinstance(data.get("annotations"), list):
        for i, a in enumerate(data["annotations"]):
            if not isinstance(a, dict):
                raise CxCFormatError(f"{p}: annotations[{i}] is not an object")
            keep(a.get("id"), a.get("caption"), f"annotations[{i}] (id, caption)")
    else:
        found = sorted(data) if isinstance(data, dict) else type(data).__name__
        raise CxCFormatError(
            f"{p}: expected Karpathy's dataset_coco.json ({{'images': [{{'sentences': [...]}}]}}) or an MS-COCO "
            f"captions file ({{'annotations': [...]}}), found {found}. {CAPTIONS_HINT}"
        )
    return out


def join_captions(scores: CxCScores, captions: dict[int, str], source: str = "the caption map") -> CxCPairs:
    """Attach caption text to every row of ``scores``.

    Args:
        scores: from :func:`read_cxc_scores`.
        captions: ``{sentid: text}`` (e.g. :func:`load_coco_captions`).
        source: how to name the caption map in the error message (e.g. its path).

    Returns:
        :class:`CxCPairs` with the same rows, in the same order.

    Raises:
        MissingCaptionsError: (a KeyError) some ids are missing from ``captions`` (message: how many distinct ids and rows are
            affected, out of how many, and a few examples).
    """
    needed = set(scores.id1) | set(scores.id2)
    missing = sorted(needed - captions.keys())
    if missing:
        missing_set = set(missing)
        rows = sum(a in missing_set or b in missing_set for a, b in zip(scores.id1, scores.id2, strict=True))
        examples = ", ".join(f"{CXC_ID_PREFIX}{i}" for i in missing[:5])
        raise MissingCaptionsError(
            f"CxC {scores.name}: {len(missing)} of {len(needed)} caption ids ({rows} of {len(scores)} pairs) are "
            f"not in {source} (e.g. {examples}); is it the full Karpathy dataset_coco.json (5k val + 5k test "
            f"images of val2014)?"
        )
    columns = {f.name: getattr(scores, f.name) for f in fields(CxCScores)}
    columns = {k: list(v) if isinstance(v, list) else v for k, v in columns.items()}  # fresh lists
    return CxCPairs(**columns, text1=[captions[i] for i in scores.id1], text2=[captions[i] for i in scores.id2])


def resolve_cxc_dir(data_dir: str | os.PathLike[str]) -> Path:
    """The folder holding ``sts_{val,test}.csv``: ``data_dir/cxc`` if it exists, else ``data_dir``."""
    root = Path(data_dir).expanduser()
    return root / "cxc" if (root / "cxc").is_dir() else root


def load_cxc(
    captions_path: str | os.PathLike[str],
    split: str = "test",
    data_dir: str | os.PathLike[str] = "data",
) -> CxCPairs:
    """Read ``sts_<split>.csv`` from ``data_dir`` (or ``data_dir/cxc``) and join the caption text.

    Args:
        captions_path: ``dataset_coco.json`` (see :func:`load_coco_captions`).
        split: ``"test"`` (PromCSE Table 2) or ``"val"``.
        data_dir: the data folder (``data/``, holding ``cxc/``) or the CxC folder itself.

    Raises:
        ValueError: unknown split.
        FileNotFoundError: score or caption file missing.
        CxCFormatError, MissingCaptionsError: see :func:`read_cxc_scores`, :func:`load_coco_captions`,
            :func:`join_captions`.
    """
    if split not in CXC_SPLITS:
        raise ValueError(f"unknown CxC split {split!r}; valid: {', '.join(CXC_SPLITS)}")
    scores = read_cxc_scores(resolve_cxc_dir(data_dir) / f"sts_{split}.csv")
    captions = load_coco_captions(captions_path, set(scores.id1) | set(scores.id2))
    return join_captions(scores, captions, source=str(captions_path))
