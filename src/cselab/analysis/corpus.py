"""Corpus sentences for the analyses, read as the official PromptBERT ``--calc_anisotropy`` reads them (PB
``evaluation.py:343-348``: the FIRST 100,000 lines of ``wiki1m_for_simcse.txt``, lower-cased, cut to their first
32 whitespace words), or a uniform random sample of the lines (the paper's "we randomly sample 100,000
sentences", Sec. 3.1)."""

from __future__ import annotations

import random
from pathlib import Path

#: how ``sample`` lines are taken: ``first`` (the official code) or ``random`` (uniform, seeded; the paper's words)
DRAWS = ("first", "random")


def read_corpus(path: str | Path, sample: int | None, seed: int, lower: bool = True,
                max_words: int | None = 32, draw: str = "first") -> list[str]:
    """``sample`` sentences of ``path`` (all its lines when None or >= their number), each lower-cased (``lower``)
    and cut to its first ``max_words`` whitespace words (None / 0: no cut).

    ``draw="first"`` (default, the official code: ``f.readlines()[:100000]``) takes the first ``sample`` lines of the
    file; ``draw="random"`` draws ``sample`` of its non-empty lines uniformly without replacement with
    ``random.Random(seed)`` (file order kept).  Empty lines are left out either way (the official code would
    encode them as empty sentences; wiki1m has none).

    Raises:
        FileNotFoundError: no such file.  ValueError: the file has no non-empty line, or an unknown ``draw``.
    """
    if draw not in DRAWS:
        raise ValueError(f"draw={draw!r}: expected one of {', '.join(DRAWS)}")
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"corpus file not found: {p.resolve()}")
    lines = p.read_text(encoding="utf-8").splitlines()
    if draw == "first" and sample is not None:
        lines = lines[:sample]
    lines = [ln.strip() for ln in lines if ln.strip()]
    if not lines:
        raise ValueError(f"corpus {p} has no non-empty line" + (f" in its first {sample}" if draw == "first" and
                                                                   sample is not None else ""))
    if draw == "random" and sample is not None and sample < len(lines):
        keep = sorted(random.Random(seed).sample(range(len(lines)), sample))
        lines = [lines[i] for i in keep]
    return [" ".join((ln.lower() if lower else ln).split()[: max_words or None]) for ln in lines]
