"""Console logging of a run: one line per event, in one format (Hydra's job logging), no advertisements.

Lightning attaches its own console handler (``INFO: ...``) to the ``lightning`` logger at import time, and its
records also propagate to the root logger, where Hydra's job logging prints them again
(``[time][lightning.fabric.utilities.seed][INFO] - Seed set to 42``).  :func:`one_line_per_event` removes
Lightning's handlers so that every record is printed once, by the root handler (and written to the job's
``<job>.log``), drops Lightning's product tips (the litlogger advertisement) and a deprecation warning that
Lightning's own code triggers in torch (nothing a user can act on).

:func:`quiet_third_party` (called by :func:`one_line_per_event` and by every ``cselab`` command) keeps third-party
output out of log files: when stderr is not a terminal, transformers' and huggingface_hub's progress bars
(``Loading weights: 100%|...``, ``Writing model shards``) are off, and transformers' multi-line ``LOAD REPORT``
table (the keys a checkpoint has that the model does not, and the reverse) becomes one line
(:class:`OneLineLoadReport`), in a terminal too.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import warnings

__all__ = ["ADVERTISEMENTS", "LIGHTNING_LOGGERS", "DropAdvertisements", "OneLineLoadReport", "interactive",
           "one_line_per_event", "quiet_third_party"]

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


def interactive() -> bool:
    """Whether stderr (where progress bars draw) is a terminal."""
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


#: the transformers logger that writes the LOAD REPORT (``modeling_utils.py``: ``log_state_dict_report``)
LOAD_REPORT_LOGGER = "transformers.modeling_utils"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class OneLineLoadReport(logging.Filter):
    """Rewrites transformers' ``LOAD REPORT`` (a table of keys and notes, ~15 lines) as one line: ``BertModel
    loaded from <path>: 5 UNEXPECTED (cls.predictions.bias, ...), 2 MISSING (pooler.dense.weight, ...)``."""

    def filter(self, record: logging.LogRecord) -> bool:  # noqa: A003 - logging's API
        message = _ANSI.sub("", record.getMessage())
        if "LOAD REPORT" not in message:
            return True
        head, _, body = message.partition("\n")
        keys: dict[str, list[str]] = {}
        for line in body.splitlines():
            cells = [c.strip() for c in line.split("|")]
            if len(cells) >= 2 and cells[1].isupper() and cells[0] and cells[0] != "Key":
                keys.setdefault(cells[1], []).append(cells[0])
        parts = [f"{len(names)} {status} ({', '.join(names[:3])}{', ...' if len(names) > 3 else ''})"
                 for status, names in keys.items()]
        record.msg, record.args = f"{head.replace(' LOAD REPORT from:', ' loaded from')}: {'; '.join(parts)}", None
        return True


def quiet_third_party() -> None:
    """Third-party output fit for a log file, as the module docstring says (idempotent)."""
    logger = logging.getLogger(LOAD_REPORT_LOGGER)
    if not any(isinstance(f, OneLineLoadReport) for f in logger.filters):
        logger.addFilter(OneLineLoadReport())
    if interactive():
        return
    # not imported here (transformers takes about 1 s, and a refused command answers before it loads): the
    # variable switches the bars off when huggingface_hub is imported, and transformers' follow hub's at its import
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    if "huggingface_hub" in sys.modules:  # imported already: off now
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()
    if "transformers" in sys.modules:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()


def one_line_per_event() -> None:
    """Route Lightning's records to the root handler only, drop advertisements and quiet third-party output
    (:func:`quiet_third_party`) (idempotent).

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
    quiet_third_party()
    if not logging.getLogger().handlers:
        return
    for name in LIGHTNING_LOGGERS:
        logger = logging.getLogger(name)
        for handler in list(logger.handlers):
            if type(handler) is logging.StreamHandler:  # Lightning's console handlers, not file handlers
                logger.removeHandler(handler)
        logger.propagate = True
