"""A run's ``results.json``: written atomically, with the papers' table printed beside it.

Format (scores are Spearman x 100)::

    {"test": {"sts12", "sts13", "sts14", "sts15", "sts16", "stsb", "sickr", "avg"},
     "dev": {"stsb"}, "config": {...resolved Hydra config...},
     "val_curve": [{"step", "stsb_dev", "seconds"}], "best_checkpoint": str | null, "wall_time_s": float, ...}
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from cselab.evaluation.sts import TEST_TASKS
from cselab.files import staged


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` to ``path`` through a temporary file beside it and ``os.replace`` (never a half-written
    file; the temporary file removed on any failure; created with the process umask, see :mod:`cselab.files`).

    Raises:
        OSError: the write failed (e.g. ENOSPC); ``path`` keeps its previous content.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with staged(path, "w") as f:
        f.write(text)
    return path


def build_results(test: dict[str, float], dev: dict[str, float], config: dict[str, Any], **extra: Any) -> dict:
    """Assemble the results dict; ``test`` gets ``avg`` = plain mean of the 7 tasks when all are present."""
    test = {k: float(v) for k, v in test.items() if k != "avg"}
    if all(t in test for t in TEST_TASKS):
        test["avg"] = sum(test[t] for t in TEST_TASKS) / len(TEST_TASKS)
    return {"test": test, "dev": {k: float(v) for k, v in dev.items()}, "config": config, **extra}


def write_results(path: str | os.PathLike, results: dict) -> Path:
    """Write ``results`` as indented JSON, atomically."""
    return atomic_write_text(path, json.dumps(results, indent=2, sort_keys=False) + "\n")
