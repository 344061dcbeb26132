"""Experiment loggers: CSV always, W&B when configured (offline without a key; never blocks a run)."""

from __future__ import annotations

import importlib.util
import logging
import os
from typing import Any

log = logging.getLogger(__name__)


def wandb_mode(requested: str) -> str:
    """``auto`` -> ``online`` when ``WANDB_API_KEY`` is set, else ``offline`` (sync later with ``wandb sync``)."""
    if requested != "auto":
        return requested
    return "online" if os.environ.get("WANDB_API_KEY") else "offline"


def build_loggers(cfg: dict[str, Any], output_dir: str, tags: list[str], group: str | None) -> list:
    """Lightning loggers from the ``logger`` config: ``{"csv": bool, "wandb": {project, mode, ...} | None}``."""
    from lightning.pytorch.loggers import CSVLogger

    loggers: list = []
    if cfg.get("csv", True):
        loggers.append(CSVLogger(save_dir=output_dir, name="csv", version=""))
    wb = cfg.get("wandb")
    if wb and importlib.util.find_spec("wandb") is None:  # an optional extra
        log.warning("logger=wandb but wandb is not installed (pip install 'cselab[wandb]'): logging to CSV only")
        wb = None
    if wb:
        try:
            from lightning.pytorch.loggers import WandbLogger

            mode = wandb_mode(wb.get("mode", "auto"))
            loggers.append(
                WandbLogger(
                    project=wb.get("project", "cselab"),
                    entity=wb.get("entity"),
                    group=wb.get("group") or group,
                    tags=tags,
                    save_dir=output_dir,
                    offline=mode == "offline",
                    mode=mode if mode == "disabled" else None,
                    log_model=False,
                )
            )
        except Exception as err:  # a logger must never kill a run
            log.warning("W&B logger disabled: %s", err)
    return loggers


def close_loggers(loggers: list) -> None:
    """Finish W&B runs so that the next job of a ``-m`` sweep starts a run of its own."""
    for logger in loggers:
        if type(logger).__name__ == "WandbLogger":
            try:
                logger.experiment.finish()
            except Exception as err:  # never lose a finished run to a logger
                log.warning("could not finish the W&B run: %s", err)
