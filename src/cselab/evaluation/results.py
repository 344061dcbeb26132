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
from cselab.files import atomic_write_text


def build_results(test: dict[str, float], dev: dict[str, float], config: dict[str, Any], **extra: Any) -> dict:
    """Assemble the results dict; ``test`` gets ``avg`` = plain mean of the 7 tasks when all are present."""
    test = {k: float(v) for k, v in test.items() if k != "avg"}
    if all(t in test for t in TEST_TASKS):
        test["avg"] = sum(test[t] for t in TEST_TASKS) / len(TEST_TASKS)
    return {"test": test, "dev": {k: float(v) for k, v in dev.items()}, "config": config, **extra}


def write_results(path: str | os.PathLike, results: dict) -> Path:
    """Write ``results`` as indented JSON, atomically."""
    return atomic_write_text(path, json.dumps(results, indent=2, sort_keys=False) + "\n")
