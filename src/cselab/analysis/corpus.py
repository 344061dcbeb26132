"""Corpus sentences for the analyses, read as the official PromptBERT ``--calc_anisotropy`` does (a uniform
sample of the lines, lower-cased, cut to the first words)."""

from __future__ import annotations

import random
from pathlib import Path


def read_corpus(path: str | Path, sample: int | None, seed: int, lower: bool = True,
                max_words: int | None = 32) -> list[str]:
    """Non-empty lines of ``path``; ``sample`` of them drawn uniformly without replacement with
    ``random.Random(seed)`` (file order kept; all lines when ``sample`` is None or >= their number); each
    lower-cased (``lower``) and cut to its first ``max_words`` whitespace words (None / 0: no cut).

    Raises:
        FileNotFoundError: no such file.  ValueError: the file has no non-empty line.
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"corpus file not found: {p.resolve()}")
    lines = [ln.strip() for ln in p.read_text(encoding="utf-8").splitlines() if ln.strip()]
    if not lines:
        raise ValueError(f"corpus {p} has no non-empty line")
    if sample is not None and sample < len(lines):
        keep = sorted(random.Random(seed).sample(range(len(lines)), sample))
        lines = [lines[i] for i in keep]
    return [" ".join((ln.lower() if lower else ln).split()[: max_words or None]) for ln in lines]
