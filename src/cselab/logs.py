"""Console logging of a run: one line per event, in one format (Hydra's job logging), no advertisements.

Lightning attaches its own console handler (``INFO: ...``) to the ``lightning`` logger at import time, and its
records also propagate to the root logger, where Hydra's job logging prints them again
(``[time][lightning.fabric.utilities.seed][INFO] - Seed set to 42``).  :func:`one_line_per_event` removes
Lightning's handlers so that every record is printed once, by the root handler (and written to the job's
``<job>.log``), drops Lightning's product tips (the litlogger advertisement) and a deprecation warning that
Lightning's own code triggers in torch (nothing a user can act on).
"""

from __future__ import annotations

import logging
import warnings

__all__ = ["ADVERTISEMENTS", "LIGHTNING_LOGGERS", "DropAdvertisements", "one_line_per_event"]

#: loggers to which Lightning (unified and standalone packages) attaches a console handler
LIGHTNING_LOGGERS: tuple[str, ...] = ("lightning", "lightning.pytorch", "lightning.fabric", "pytorch_lightning",
                                      "lightning_fabric")
#: the loggers through which Lightning's ``rank_zero_info`` speaks
_RANK_ZERO_LOGGERS: tuple[str, ...] = ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero",
                                       "pytorch_lightning.utilities.rank_zero", "lightning_fabric.utilities.rank_zero")
#: text of a third-party log record that advertises a product rather than reporting an event
ADVERTISEMENTS: tuple[str, ...] = ("litlogger", "💡 Tip:")
#: warnings raised inside third-party code that say nothing about the run (message regexes)
_IGNORED_WARNINGS: tuple[str, ...] = (r".*isinstance\(treespec, LeafSpec\)` is deprecated",)


class DropAdvertisements(logging.Filter):
    """Drops records whose message contains one of :data:`ADVERTISEMENTS`."""

    def filter(self, record: logging.LogRecord) -> bool:  # noqa: A003 - logging's API
        message = record.getMessage()
        return not any(text in message for text in ADVERTISEMENTS)


def one_line_per_event() -> None:
    """Route Lightning's records to the root handler only and drop advertisements (idempotent).

    Call it once the root logger has its handler (in ``run.py``, inside the Hydra task: Hydra configures the
    job logging before).  Without a root handler (a plain script) Lightning's own handlers are kept, so its
    messages are not lost.
    """
    for name in _RANK_ZERO_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, DropAdvertisements) for f in logger.filters):
            logger.addFilter(DropAdvertisements())
    for pattern in _IGNORED_WARNINGS:
        warnings.filterwarnings("ignore", message=pattern)
    if not logging.getLogger().handlers:
        return
    for name in LIGHTNING_LOGGERS:
        logger = logging.getLogger(name)
        for handler in list(logger.handlers):
            if type(handler) is logging.StreamHandler:  # Lightning's console handlers, not file handlers
                logger.removeHandler(handler)
        logger.propagate = True
