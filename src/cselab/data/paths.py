"""Where the data lives, and the error that says how to get it.

The data directory (``data.data_dir``, default ``./data``, or env ``CSELAB_DATA_DIR``) has the layout of
SimCSE's downloads:

    senteval/downstream/STS/STS12-en-test ... STSBenchmark      (SentEval, processed)
    senteval/downstream/SICK/SICK_test_annotated.txt ...
    wiki1m_for_simcse.txt                                        (unsup corpus, one sentence a line)
    nli_for_simcse.csv                                           (sent0,sent1,hard_neg)
    wiki1m_sample/wiki1m_for_simcse.head11914.txt                (the real sample shipped in ../shared/data)

``make data`` links ``../shared/data`` when it exists; otherwise ``python -m cselab data`` fetches the
public files from the Hugging Face dataset ``princeton-nlp/datasets-for-simcse``.
"""

from __future__ import annotations

import os
from pathlib import Path

HOW_TO_GET = (
    "run `make data` (links ../shared/data when present) or `python -m cselab data` "
    "(fetches princeton-nlp/datasets-for-simcse from the Hugging Face hub)"
)

#: what a byte that is not UTF-8 decodes to with ``errors="replace"``: training rows holding it are skipped
UNDECODABLE = "\ufffd"


def data_root(data_dir: str | os.PathLike | None = None) -> Path:
    """The data directory: the argument, else ``$CSELAB_DATA_DIR``, else ``./data``."""
    return Path(data_dir or os.environ.get("CSELAB_DATA_DIR") or "data").expanduser()


def require(path: str | os.PathLike, what: str, config_key: str | None = None) -> Path:
    """Return ``path`` if it is a readable file (or directory), else raise an error naming it, the config key
    and the fix.

    Raises:
        FileNotFoundError: ``path`` does not exist (with how to get the data).
        PermissionError: it exists but this process cannot read it.
    """
    p = Path(path)
    key = f" (config key {config_key})" if config_key else ""
    if not p.exists():
        raise FileNotFoundError(f"{what} not found at {p.resolve()}{key}: {HOW_TO_GET}")
    if not os.access(p, os.R_OK):
        raise PermissionError(f"{what} at {p.resolve()}{key} exists but is not readable by this user "
                              f"(check its permissions, e.g. `chmod a+r {p}`)")
    return p
