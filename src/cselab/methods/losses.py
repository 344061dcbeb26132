"""``loss.name`` -> the loss: the shared losses (:data:`cselab.losses.LOSSES`) and each method folder's own
(``cselab/methods/<name>/loss.py``, its ``LOSSES`` table), so that every loss of ``conf/loss/`` is reachable by its
name alone; :func:`build_loss` builds any of them from its config node."""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
from collections.abc import Callable, Mapping
from typing import Any

from torch import nn

from cselab.losses import LOSSES
from cselab.losses.groups import GroupedLoss


def loss_classes() -> dict[str, Callable[..., nn.Module]]:
    """``loss.name`` -> the loss class (or a ``functools.partial`` of it), over the tables of the module docstring."""
    import cselab.methods

    found = dict(LOSSES)
    for info in pkgutil.iter_modules(cselab.methods.__path__):
        if info.ispkg and importlib.util.find_spec(f"cselab.methods.{info.name}.loss") is not None:
            found.update(importlib.import_module(f"cselab.methods.{info.name}.loss").LOSSES)
    return found


def build_loss(node: Mapping[str, Any]) -> nn.Module:
    """Instantiate a loss from ``{"_target_": "pkg.module.Class", "name": ..., "groups": G, **its arguments}``
    (``_target_`` absent: the loss of that ``name``, :func:`loss_classes`).

    ``groups`` (default 1) > 1 wraps the loss in :class:`~cselab.losses.groups.GroupedLoss` (each group of the
    batch its own negatives, losses averaged: CoT-BERT's official ``DataParallel`` step on one device).

    Raises:
        ValueError: unknown loss name (lists the known ones) or bad arguments (names the key).
    """
    args = dict(node)
    name = args.pop("name", "infonce")
    groups = args.pop("groups", 1)
    target = args.pop("_target_", None)
    if target is not None:
        from hydra.utils import get_class

        try:
            cls = get_class(target)
        except Exception as err:
            raise ValueError(f"loss._target_={target!r}: cannot import it ({err})") from err
    else:
        known = loss_classes()
        if name not in known:
            raise ValueError(f"loss.name={name!r} without loss._target_: expected one of {sorted(known)}")
        cls = known[name]
    try:
        loss = cls(**args)
    except TypeError as err:
        raise ValueError(f"loss={name}: bad arguments {sorted(args)} ({err})") from err
    return loss if int(groups) == 1 else GroupedLoss(loss, int(groups))
