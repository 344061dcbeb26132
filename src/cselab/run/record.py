"""A run's record (``.hydra/``, ``run.log``, the lock's pid) is written only once the run proceeds.

Hydra writes ``<run dir>/.hydra/{config,hydra,overrides}.yaml`` and opens ``<run dir>/run.log`` when the job
starts, before ``run.py`` can tell whether the command is refused (the run finished, the directory is in use,
``resume=`` with changed values, a bad input).  A refused command then rewrote the saved config of a run it never
touched, and ``cselab report`` showed settings that run never used.  So ``conf/config.yaml`` sets
``hydra.output_subdir: null`` (Hydra writes no ``.hydra/``) and ``delay: true`` on the job log's file handler (the
file is opened at its first record), and :class:`RunRecord` keeps the run directory's log records in memory (the
console still prints them): :meth:`RunRecord.claim` (``run.py``, once every refusal has been decided) writes the
record, :meth:`RunRecord.discard` (a refusal) drops them and nothing was written.
"""

from __future__ import annotations

import logging
import logging.handlers
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from cselab.run.lock import mark_run_dir

#: the folder of Hydra's files in a run directory (Hydra's default ``hydra.output_subdir``)
HYDRA_SUBDIR = ".hydra"


class RunRecord:
    """The record of the run in ``output_dir``, held back until the run proceeds.

    Args:
        output_dir: the run directory (Hydra's ``runtime.output_dir``); the root logger's ``FileHandler``s whose
            file lies in it are held back.
    """

    def __init__(self, output_dir: str | Path) -> None:
        self.output_dir = Path(output_dir)
        self.claimed = False
        root = logging.getLogger()
        inside = self.output_dir.resolve()
        self._files = [h for h in root.handlers if isinstance(h, logging.FileHandler)
                       and inside in Path(h.baseFilename).resolve().parents]
        self._buffer = logging.handlers.MemoryHandler(capacity=1 << 30, flushLevel=logging.CRITICAL + 1,
                                                      target=None, flushOnClose=False)
        for handler in self._files:
            root.removeHandler(handler)
        if self._files:
            root.addHandler(self._buffer)

    def claim(self, cfg: DictConfig, hydra_cfg: DictConfig) -> None:
        """The run proceeds: write ``.hydra/config.yaml`` (``cfg``), ``hydra.yaml`` (``{"hydra": hydra_cfg}``)
        and ``overrides.yaml`` (the job's overrides) as Hydra does (``hydra.core.utils.run_job``), the pid into the
        lock file, the file handlers put back and the held log records into ``run.log``; from now on the log goes
        to its file as it is written.  Idempotent.

        Raises:
            OSError: a file cannot be written (a full disk, a read-only directory).
        """
        if self.claimed:
            return
        self.claimed = True
        folder = self.output_dir / HYDRA_SUBDIR
        folder.mkdir(parents=True, exist_ok=True)
        files: dict[str, Any] = {"config.yaml": cfg, "hydra.yaml": OmegaConf.create({"hydra": hydra_cfg}),
                                 "overrides.yaml": hydra_cfg.overrides.task}
        for name, node in files.items():
            (folder / name).write_text(OmegaConf.to_yaml(node), encoding="utf-8")
        mark_run_dir(self.output_dir)
        root = logging.getLogger()
        root.removeHandler(self._buffer)
        for handler in self._files:
            root.addHandler(handler)
            for record in self._buffer.buffer:
                if record.levelno >= handler.level:
                    handler.handle(record)
        self._buffer.buffer.clear()

    def discard(self) -> None:
        """The command is refused: drop the held records and leave the file handlers off (nothing is written
        into the run directory).  A no-op once claimed."""
        if self.claimed:
            return
        logging.getLogger().removeHandler(self._buffer)
        self._buffer.buffer.clear()
        for handler in self._files:
            handler.close()
