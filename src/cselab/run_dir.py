"""A run directory (``outputs/<run_name>``) as a model: its best checkpoint, for the commands that take a run
directory (``cselab transfer``, ``cselab export``, ``cselab.load``)."""

from __future__ import annotations

import json
from pathlib import Path


def best_checkpoint(run_dir: str | Path) -> Path:
    """The best checkpoint of a run directory: ``results.json``'s ``best_checkpoint`` when that file exists, else
    the newest ``checkpoints/best-*.ckpt``.

    Raises:
        FileNotFoundError: no best checkpoint (a run with ``method.train=false`` has none: evaluate its backbone
            instead).
    """
    path = Path(run_dir)
    best = None
    if (path / "results.json").is_file():
        best = json.loads((path / "results.json").read_text(encoding="utf-8")).get("best_checkpoint")
    if best and not Path(best).is_file() and (path / "checkpoints" / Path(best).name).is_file():
        best = str(path / "checkpoints" / Path(best).name)  # a run directory moved or copied elsewhere
    ckpts = [Path(best)] if best and Path(best).is_file() else sorted(
        (path / "checkpoints").glob("best-*.ckpt"), key=lambda p: p.stat().st_mtime)
    if not ckpts:
        raise FileNotFoundError(f"{path}: no best checkpoint (results.json best_checkpoint or "
                                "checkpoints/best-*.ckpt); a run with method.train=false has none: pass its "
                                "backbone and --pooler instead")
    return ckpts[-1]


def is_run_dir(path: str | Path) -> bool:
    """A cselab run directory: ``results.json`` or a ``checkpoints`` folder."""
    path = Path(path)
    return path.is_dir() and ((path / "results.json").is_file() or (path / "checkpoints").is_dir())
