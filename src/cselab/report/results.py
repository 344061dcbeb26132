"""A run's ``results.json``: written atomically, with the papers' table printed beside it.

Format (scores are Spearman x 100)::

    {"test": {"sts12", "sts13", "sts14", "sts15", "sts16", "stsb", "sickr", "avg"},
     "dev": {"stsb"}, "config": {...resolved Hydra config...},
     "val_curve": [{"step", "stsb_dev", "seconds"}], "best_checkpoint": str | null, "wall_time_s": float, ...}
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from cselab.evaluation.sts import TEST_TASKS


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` to ``path`` through a temporary file and ``os.replace`` (never a half-written file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
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
