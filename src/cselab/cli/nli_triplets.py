"""Build SimCSE-style NLI triplets (``sent0,sent1,hard_neg``) from labelled NLI pairs.

    python -m cselab nli-convert --from snli snli_1.0_train.jsonl multinli_1.0_train.jsonl --out nli.csv
    python -m cselab nli-convert --from sick data/senteval/downstream/SICK/SICK_train.txt \\
        --out outputs/generated/sick_nli_train.csv

SimCSE (Gao et al. 2021, Sec. 5.1) trains its supervised model on (premise, entailment hypothesis,
contradiction hypothesis) triplets of SNLI + MNLI (``nli_for_simcse.csv``, 275,601 rows); it did not release the
script that made the file. This module rebuilds such a file from the labelled pairs:

Pairing rule (deterministic; :func:`build_triplets`):
    1. Pairs are read in input order (files in the order given, lines in file order). Sentences are
       whitespace-normalised (``" ".join(s.split())``); a pair with an empty sentence is dropped; an exact
       duplicate (premise, hypothesis, label) is kept once.
    2. Pairs are grouped by premise (the normalised text; premises equal across files are merged).
    3. For each premise with at least one entailment AND at least one contradiction hypothesis, with
       entailments E[0..k-1] and contradictions C[0..m-1] in input order, ONE triplet is emitted per
       (premise, entailment) pair: ``(premise, E[i], C[i mod m])`` for i = 0..k-1. In SNLI / MNLI the i-th
       entailment and i-th contradiction of a premise are usually written by the same annotator in the same
       round (SNLI pairIDs ``<captionID>r<round><e|c|n>``), so index pairing keeps them together; surplus
       entailments reuse contradictions cyclically. Premises with no contradiction (or no entailment) give
       nothing; neutral pairs are never used.
    4. Triplets are written premise by premise in order of the premise's first appearance.
    5. Triplets with a sentence that pandas (hence ``datasets.load_dataset("csv")``) would read as a missing
       value (``"NA"``, ``"null"``, ``"None"``, ...) are dropped and counted, so that every row reads back as
       three strings.

Readers:
    * SNLI / MultiNLI ``.jsonl`` (one JSON object a line, fields ``sentence1`` = premise, ``sentence2`` =
      hypothesis, ``gold_label``); ``gold_label == "-"`` (no annotator consensus) is skipped; blank lines are
      ignored. ``--from snli`` and ``--from mnli`` use the same reader, so one run can combine both corpora.
    * SICK (``SICK_{train,trial,test_annotated}.txt``, raw or SentEval-processed): tab-separated, header
      ``pair_ID sentence_A sentence_B relatedness_score entailment_judgment``; labels ENTAILMENT,
      CONTRADICTION, NEUTRAL (the judgment is for A -> B). sentence_A is the premise. SICK is not built
      premise-first like SNLI (pairs come from transformations of one source sentence, a premise rarely has
      both an entailment and a contradiction), so it yields few triplets (148 from SICK_train.txt).
      ``reverse_contradictions=True`` (CLI ``--reverse-contradictions``) also files each contradiction under
      sentence_B as premise (B, A): contradiction is symmetric (A and B cannot both be true), unlike
      entailment, so this adds valid hard negatives (259 triplets from SICK_train.txt); it is off by default
      to keep "sentence_A is the premise".

The csv is written with Python's ``csv`` module (header ``sent0,sent1,hard_neg``, minimal quoting, UTF-8) and
reads back with ``datasets.load_dataset("csv", data_files=...)`` as :class:`cselab.data.nli.NLIDataModule`
does.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["LABELS", "SOURCES", "DEFAULT_OUT", "NLIFormatError", "NLIPair", "ConversionStats", "read_nli_jsonl",
           "read_sick_nli", "read_pairs", "build_triplets", "write_triplets_csv", "convert"]

#: the three NLI labels, lower case
LABELS: tuple[str, ...] = ("entailment", "neutral", "contradiction")

#: ``--from`` choices
SOURCES: tuple[str, ...] = ("snli", "mnli", "sick")

#: the CLI's default output (relative to the current directory; ``data/`` may be a read-only link)
DEFAULT_OUT = "outputs/generated/nli_triplets.csv"

#: column names of SimCSE's ``nli_for_simcse.csv``
CSV_COLUMNS: tuple[str, str, str] = ("sent0", "sent1", "hard_neg")

SICK_HEADER: tuple[str, ...] = ("pair_ID", "sentence_A", "sentence_B", "relatedness_score", "entailment_judgment")

# pandas' default na_values (pandas._libs.parsers.STR_NA_VALUES): such a cell reads back as NaN, not a string
_PANDAS_NA = frozenset(
    {"", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN", "<NA>", "N/A",
     "NA", "NULL", "NaN", "None", "n/a", "nan", "null"}
)  # fmt: skip


class NLIFormatError(ValueError):
    """An NLI input line is malformed (the message names the file, the 1-based line and the expectation)."""


@dataclass(frozen=True)
class NLIPair:
    """One labelled pair.

    Attributes:
        premise: whitespace-normalised premise (SNLI/MNLI ``sentence1``, SICK ``sentence_A``).
        hypothesis: whitespace-normalised hypothesis (``sentence2`` / ``sentence_B``).
        label: ``"entailment"``, ``"neutral"`` or ``"contradiction"``.
        where: ``"<file>:<line>"`` of the pair, for messages.
    """

    premise: str
    hypothesis: str
    label: str
    where: str = ""


@dataclass
class ConversionStats:
    """Counts of one conversion (all ints).

    Attributes:
        pairs: labelled pairs read (after skipping ``-`` labels).
        skipped_no_label: SNLI/MNLI pairs with ``gold_label == "-"``.
        skipped_empty: pairs with an empty sentence.
        duplicates: exact duplicate (premise, hypothesis, label) pairs dropped.
        premises: distinct premises.
        premises_used: premises with >= 1 entailment and >= 1 contradiction.
        triplets: rows written.
        skipped_na_like: triplets dropped because a sentence reads back as a missing value in pandas.
        label_counts: label -> pairs (after de-duplication).
    """

    pairs: int = 0
    skipped_no_label: int = 0
    skipped_empty: int = 0
    duplicates: int = 0
    premises: int = 0
    premises_used: int = 0
    triplets: int = 0
    skipped_na_like: int = 0
    label_counts: dict[str, int] = field(default_factory=dict)


def _norm(text: str) -> str:
    return " ".join(text.split())


def _label(raw: str, path: Path | str, lineno: int) -> str:
    label = raw.strip().lower()
    if label not in LABELS:
        raise NLIFormatError(f"{path}, line {lineno}: unknown NLI label {raw!r}; expected one of "
                             f"{', '.join(LABELS)} (any case) or '-' (SNLI/MNLI: no gold label, skipped)")
    return label


def _require_file(path: str | os.PathLike[str], what: str) -> Path:
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{what} not found: {p.resolve()}")
    return p


def read_nli_jsonl(path: str | os.PathLike[str], stats: ConversionStats | None = None) -> list[NLIPair]:
    """Read an SNLI / MultiNLI ``.jsonl`` file: ``sentence1`` (premise), ``sentence2``, ``gold_label``.

    Args:
        path: the jsonl file (UTF-8, one JSON object a line; blank lines ignored).
        stats: if given, ``skipped_no_label`` is incremented for each ``gold_label == "-"``.

    Returns:
        The labelled pairs in file order, whitespace-normalised (labels lower case; ``-`` skipped).

    Raises:
        FileNotFoundError: the file is missing.
        NLIFormatError: a line is not a JSON object, lacks one of the three fields, has a non-string field, or an
            unknown label (the message names the file and the 1-based line).
    """
    p = _require_file(path, "NLI jsonl file")
    pairs: list[NLIPair] = []
    with open(p, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as err:
                raise NLIFormatError(f"{p}, line {lineno}: not valid JSON ({err.msg})") from None
            if not isinstance(obj, dict):
                raise NLIFormatError(f"{p}, line {lineno}: expected a JSON object, got {type(obj).__name__}")
            missing = [k for k in ("sentence1", "sentence2", "gold_label") if k not in obj]
            if missing:
                raise NLIFormatError(f"{p}, line {lineno}: missing field(s) {missing}; SNLI/MultiNLI jsonl lines "
                                     f"need sentence1, sentence2 and gold_label")
            bad = [k for k in ("sentence1", "sentence2", "gold_label") if not isinstance(obj[k], str)]
            if bad:
                raise NLIFormatError(f"{p}, line {lineno}: field(s) {bad} must be strings")
            if obj["gold_label"].strip() == "-":
                if stats is not None:
                    stats.skipped_no_label += 1
                continue
            label = _label(obj["gold_label"], p, lineno)
            pairs.append(NLIPair(_norm(obj["sentence1"]), _norm(obj["sentence2"]), label, f"{p}:{lineno}"))
    return pairs


def read_sick_nli(path: str | os.PathLike[str]) -> list[NLIPair]:
    """Read a SICK file (``SICK_train.txt`` ...) as NLI pairs: (sentence_A, sentence_B, entailment_judgment).

    The first line must be the header ``pair_ID sentence_A sentence_B relatedness_score entailment_judgment``
    (tab-separated); every other non-blank line must have those 5 tab-separated fields.

    Returns:
        The pairs in file order (premise = sentence_A), whitespace-normalised, labels lower case.

    Raises:
        FileNotFoundError: the file is missing.
        NLIFormatError: wrong header, a line without exactly 5 tab-separated fields, or an unknown label (names
            the file and the 1-based line).
    """
    p = _require_file(path, "SICK file")
    pairs: list[NLIPair] = []
    with open(p, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            fields = line.rstrip("\r\n").split("\t")
            if lineno == 1:
                if tuple(x.strip() for x in fields) != SICK_HEADER:
                    raise NLIFormatError(f"{p}, line 1: expected the SICK header {' '.join(SICK_HEADER)} "
                                         f"(tab-separated), got {fields!r}")
                continue
            if not line.strip():
                continue
            if len(fields) != len(SICK_HEADER):
                raise NLIFormatError(f"{p}, line {lineno}: expected {len(SICK_HEADER)} tab-separated fields "
                                     f"({', '.join(SICK_HEADER)}), got {len(fields)}")
            label = _label(fields[4], p, lineno)
            pairs.append(NLIPair(_norm(fields[1]), _norm(fields[2]), label, f"{p}:{lineno}"))
    return pairs


def read_pairs(source: str, paths: Sequence[str | os.PathLike[str]], stats: ConversionStats | None = None
               ) -> list[NLIPair]:
    """Read and concatenate the pairs of ``paths`` (in order) with the reader of ``source``.

    Args:
        source: ``"snli"`` / ``"mnli"`` (jsonl reader) or ``"sick"``.
        paths: one or more input files.
        stats: updated with ``skipped_no_label`` (jsonl) when given.

    Raises:
        ValueError: unknown source or no paths.
        FileNotFoundError, NLIFormatError: from the readers.
    """
    if source not in SOURCES:
        raise ValueError(f"unknown NLI source {source!r}; expected one of {', '.join(SOURCES)}")
    if not paths:
        raise ValueError("no input files given")
    return [pair for path in paths
            for pair in (read_sick_nli(path) if source == "sick" else read_nli_jsonl(path, stats))]


def build_triplets(pairs: Iterable[NLIPair], reverse_contradictions: bool = False,
                   stats: ConversionStats | None = None) -> list[tuple[str, str, str]]:
    """Group pairs by premise and emit (premise, entailment, contradiction) triplets: ``(premise, E[i], C[i mod m])``
    for each of a premise's k entailments, by the pairing rule of the module docstring (steps 2-5).

    Args:
        pairs: labelled pairs (e.g. from :func:`read_pairs`).
        reverse_contradictions: also register each contradiction (A, B) as (B, A), i.e. B as a premise with
            contradiction A (contradiction is symmetric; entailment is not, so entailments are never
            reversed). Meant for SICK, whose pairs are not grouped by premise.
        stats: filled in (pairs, skipped_empty, duplicates, premises, premises_used, triplets,
            skipped_na_like, label_counts) when given.

    Returns:
        ``[(sent0, sent1, hard_neg), ...]``.
    """
    st = stats if stats is not None else ConversionStats()
    groups: dict[str, dict[str, list[str]]] = {}
    seen: set[tuple[str, str, str]] = set()

    def add(premise: str, hypothesis: str, label: str) -> bool:
        key = (premise, hypothesis, label)
        if key in seen:
            return False
        seen.add(key)
        groups.setdefault(premise, {lab: [] for lab in LABELS})[label].append(hypothesis)
        return True

    for pair in pairs:
        st.pairs += 1
        if not pair.premise or not pair.hypothesis:
            st.skipped_empty += 1
            continue
        if add(pair.premise, pair.hypothesis, pair.label):
            st.label_counts[pair.label] = st.label_counts.get(pair.label, 0) + 1
        else:
            st.duplicates += 1
        if reverse_contradictions and pair.label == "contradiction":
            add(pair.hypothesis, pair.premise, "contradiction")

    triplets: list[tuple[str, str, str]] = []
    st.premises = len(groups)
    for premise, by_label in groups.items():
        ents, cons = by_label["entailment"], by_label["contradiction"]
        if not ents or not cons:
            continue
        st.premises_used += 1
        for i, ent in enumerate(ents):
            row = (premise, ent, cons[i % len(cons)])
            if any(s in _PANDAS_NA for s in row):
                st.skipped_na_like += 1
                continue
            triplets.append(row)
    st.triplets = len(triplets)
    return triplets


def write_triplets_csv(triplets: Iterable[tuple[str, str, str]], out: str | os.PathLike[str]) -> Path:
    """Write ``sent0,sent1,hard_neg`` rows with the ``csv`` module (minimal quoting, UTF-8, ``\\n`` endings).

    The parent folder is created. Returns the output path.

    Raises:
        OSError: the folder or file cannot be created (e.g. a read-only ``data/`` link); the message names it.
    """
    out = Path(out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        with open(out, "w", encoding="utf-8", newline="") as f:
            writer = csv.writer(f, quoting=csv.QUOTE_MINIMAL, lineterminator="\n")
            writer.writerow(CSV_COLUMNS)
            writer.writerows(triplets)
    except OSError as err:
        raise OSError(f"cannot write {out.resolve()} ({err.strerror or err}); the data folder may be read-only, "
                      f"choose a writable --out (default {DEFAULT_OUT})") from err
    return out


def convert(source: str, inputs: Sequence[str | os.PathLike[str]], out: str | os.PathLike[str] = DEFAULT_OUT,
            reverse_contradictions: bool = False) -> ConversionStats:
    """Read ``inputs`` with the ``source`` reader, build the triplets and write them to ``out``.

    Returns:
        The :class:`ConversionStats` of the run.

    Raises:
        ValueError, FileNotFoundError, NLIFormatError, OSError: see :func:`read_pairs` and
        :func:`write_triplets_csv`.
    """
    stats = ConversionStats()
    pairs = read_pairs(source, inputs, stats)
    triplets = build_triplets(pairs, reverse_contradictions=reverse_contradictions, stats=stats)
    write_triplets_csv(triplets, out)
    return stats
