"""SNCSE's training rows: each corpus sentence with its soft negative (the negated sentence).

The corpus is read as :class:`cselab.data.unsup.UnsupDataModule` reads it (memory-mapped or streamed); the soft
negatives come from a file in the official format (one JSON list ``[sentence, negation]`` a line:
``cselab data soft-negatives`` writes it, or the official ``Files/soft_negative_samples.txt``).  Each batch's rows
become ``{"text": sentence', "soft_neg": negation'}`` as the official ``prepare_features`` builds them
(``train_SNCSE.py:510-516``, :func:`cselab.methods.sncse.negation.soft_negative_pair`): the period rule, the lookup by the
ruled sentence, ``"Not " + sentence`` when absent.  The mapping happens in the collate (:class:`SoftNegativeCollate`),
so the streamed and the memory-mapped corpus, resume and DDP sharding are the unsup corpus's own.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from cselab.data.unsup import UnsupDataModule
from cselab.methods.sncse.negation import official_period, read_soft_negatives, soft_negative_rows

log = logging.getLogger(__name__)


def default_soft_negatives(corpus: str | Path) -> Path:
    """Where the soft negatives of ``corpus`` go by default: ``soft_negatives/<corpus file name>.jsonl`` in the
    working directory (``cselab data soft-negatives`` and ``data.soft_negatives: null``)."""
    return Path("soft_negatives") / f"{Path(corpus).name}.jsonl"


class SoftNegativeCollate:
    """A collate wrapper: raw rows -> rows with ``soft_neg`` (:func:`soft_negative_rows`) -> the method's collate
    (``inner``, built with the run's seed and pad width)."""

    def __init__(self, collate: Callable, negations: Mapping[str, str]) -> None:
        self.inner = collate
        self.negations = negations

    def __call__(self, rows: Sequence[Mapping[str, str] | str]) -> Any:
        rows = [{"text": r} if isinstance(r, str) else r for r in rows]
        return self.inner(soft_negative_rows(rows, self.negations))


class SoftNegativeDataModule(UnsupDataModule):
    """The unsup corpus with SNCSE's soft negatives; rows ``{"text": s', "soft_neg": n'}``.

    Args:
        soft_negatives: the soft-negative file (official format), a path relative to the working directory
            (``data.soft_negatives``); None: :func:`default_soft_negatives` of the corpus, where ``cselab data
            soft-negatives`` writes by default (the data directory may be a read-only link).
        **kwargs: :class:`UnsupDataModule` arguments (collate, path, data_dir, batch_size, streaming ...).

    Raises:
        FileNotFoundError: (setup) the soft-negative file is missing; the message names ``data.soft_negatives``
            and the command that writes it.
        ValueError: (setup) a malformed line (:func:`read_soft_negatives`), or a file that negates none of the
            corpus's first 1000 sentences (the wrong file for this corpus).
    """

    def __init__(self, collate: Callable, soft_negatives: str | None = None, **kwargs) -> None:
        super().__init__(collate, **kwargs)
        self.soft_negatives = str(soft_negatives or default_soft_negatives(self.path))
        self.negations: dict[str, str] | None = None

    def setup(self, stage: str | None = None) -> None:
        super().setup(stage)
        if stage not in (None, "fit") or self.negations is not None:
            return
        if not Path(self.soft_negatives).is_file():
            raise FileNotFoundError(
                f"SNCSE's soft negatives {self.soft_negatives} (data.soft_negatives) are missing: write them with "
                f"`cselab data soft-negatives --corpus {self.path}` (--out {self.soft_negatives}; offline rule-based "
                f"negation; --parser spacy for the official spaCy rules), or point data.soft_negatives at the "
                f"official Files/soft_negative_samples.txt")
        self.negations = read_soft_negatives(self.soft_negatives)
        self._check_coverage()
        self.collate = SoftNegativeCollate(self.collate, self.negations)

    def _check_coverage(self) -> None:
        """Refuse a file that knows none of the corpus's first sentences (the official lookup would silently
        fall back to ``"Not " + s`` for every one); log the share found."""
        from itertools import islice

        with open(self.path, encoding="utf-8", errors="replace") as f:
            head = [line.strip("\n") for line in islice(f, 1000) if line.strip()]
        found = sum(official_period(s) in self.negations for s in head)
        raw = sum(s.strip() in self.negations for s in head)
        if head and raw == 0 and found == 0:
            raise ValueError(f"{self.soft_negatives} (data.soft_negatives) negates none of the first {len(head)} "
                             f"sentences of {self.path}: a file for another corpus?")
        log.info("soft negatives: %d / %d of the corpus's first sentences are in %s, %d found by the official "
                 "lookup (the others get 'Not ' + sentence, as the official run)", raw, len(head),
                 self.soft_negatives, found)
