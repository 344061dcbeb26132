"""RankCSE's teachers (``method.teachers``) as the run sees them: each path checked before a run directory is
written or a model loads (:func:`check_teacher`), and what each one resolves to -- the checkpoint a run directory
gives -- logged and saved in ``results.json`` (``teachers``, :func:`teacher_record`).  How a teacher encodes is
:mod:`cselab.methods.rankcse.teachers`' (loaded when training starts)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cselab.io.targets import TargetError, resolve_target
from cselab.model.spec import ConfigError

log = logging.getLogger(__name__)

def check_teacher(index: int, path: str) -> Path:
    """``method.teachers[index].path`` checked; returns the file or folder the teacher loads from, as every command
    resolves a model target (:func:`cselab.io.targets.resolve_target`): a run directory's best checkpoint, else
    the checkpoint file or the exported folder itself.  A teacher is a trained model, so a backbone name is no
    teacher.

    Raises:
        ConfigError: names ``method.teachers[index].path``, what is wrong (nothing at ``path``; a run directory
            without a best checkpoint; a backbone, or a folder that is no model) and what it expects.
    """
    try:
        target = resolve_target(path)
        if target.kind == "backbone":
            raise TargetError(f"{path} is not a trained model (a run directory, a .ckpt or an exported folder)"
                              + ("" if Path(path).exists() else ": it does not exist"))
    except FileNotFoundError as err:
        raise ConfigError(f"method.teachers[{index}].path={path!r}: {err}; expected a cselab run directory with a "
                          "best checkpoint (train the teacher first, e.g. python run.py method=simcse), a .ckpt or "
                          "an exported folder") from None
    return Path(target.path)


def teacher_record(teachers: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The teachers of a run, each ``{"path", "weight", "loads"}`` (``loads``: the checkpoint or folder, absolute),
    each logged once; ``teachers``: the ``module`` node's ``teachers`` list, checked
    (:func:`cselab.methods.rankcse.teachers.teacher_specs`)."""
    record = []
    for i, node in enumerate(teachers):
        loads = check_teacher(i, str(node["path"])).resolve()
        weight = float(node.get("weight", 1.0))
        log.info("RankCSE teacher %d: %s (weight %g), loaded from %s", i, node["path"], weight, loads)
        record.append({"path": str(node["path"]), "weight": weight, "loads": str(loads)})
    return record
