"""Where the data lives, and the error that says how to get it.

The data directory (``data.data_dir``, default ``./data``, or env ``CSELAB_DATA_DIR``) has the layout of
SimCSE's downloads:

    senteval/downstream/STS/STS12-en-test ... STSBenchmark      (SentEval, processed)
    senteval/downstream/SICK/SICK_test_annotated.txt ...
    wiki1m_for_simcse.txt                                        (unsup corpus, one sentence a line)
    nli_for_simcse.csv                                           (sent0,sent1,hard_neg)
    wiki1m_sample/wiki1m_for_simcse.head11914.txt                (the real sample shipped in ../shared/data)

``make data`` links ``../shared/data`` when it exists; otherwise ``python -m cselab.data.download`` fetches the
public files from the Hugging Face dataset ``princeton-nlp/datasets-for-simcse``.
"""

from __future__ import annotations

import os
from pathlib import Path

HOW_TO_GET = (
    "run `make data` (links ../shared/data when present) or `python -m cselab.data.download` "
    "(fetches princeton-nlp/datasets-for-simcse from the Hugging Face hub)"
)


def data_root(data_dir: str | os.PathLike | None = None) -> Path:
    """The data directory: the argument, else ``$CSELAB_DATA_DIR``, else ``./data``."""
    return Path(data_dir or os.environ.get("CSELAB_DATA_DIR") or "data").expanduser()


def require(path: str | os.PathLike, what: str, config_key: str | None = None) -> Path:
    """Return ``path`` if it exists, else raise FileNotFoundError naming it, the config key and the fix."""
    p = Path(path)
    if not p.exists():
        key = f" (config key {config_key})" if config_key else ""
        raise FileNotFoundError(f"{what} not found at {p.resolve()}{key}: {HOW_TO_GET}")
    return p
