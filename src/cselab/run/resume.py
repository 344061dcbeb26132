"""Where a run starts: its directory (a finished run refused, a ``resume`` directory without a checkpoint
refused) and the checkpoint ``fit`` resumes from (``ckpt_path``; an unreadable one set aside), all before the
backbone loads."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from cselab.io.files import read_json_object
from cselab.model.spec import ConfigError

log = logging.getLogger(__name__)


class RunFinished(FileExistsError):
    """The run directory already holds ``results.json``: the run finished, nothing to continue.

    Attributes:
        results: the finished run's parsed ``results.json`` (``{}`` when unreadable).
        config, copies: the new command's resolved config and its copied keys (None, ``()``: not given), for
            :func:`cselab.callbacks.run_config.finished_run_changes` (``run.py`` says what would change).
    """

    def __init__(self, message: str, results: dict | None = None, config: dict[str, Any] | None = None,
                 copies: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.results = results or {}
        self.config, self.copies = config, tuple(copies)


@dataclass(frozen=True)
class ResumeSpec:
    """How a run continues (``conf/config.yaml``): ``ckpt_path`` (``auto``: this run directory's newest
    checkpoint, if any | ``last`` | ``null`` | a path), ``dir`` (``resume=<run dir>``), ``allow_changed`` (keys
    allowed to differ from the checkpoint's config), ``overwrite`` (re-run into a finished run's directory)."""

    ckpt_path: str | None = "auto"
    dir: str | None = None
    allow_changed: tuple[str, ...] = ()
    overwrite: bool = False

    def check_directory(self, output_dir: Path, train: bool, config: dict[str, Any] | None = None,
                        copies: Sequence[str] = ()) -> None:
        """Refuse a finished run (unless ``overwrite``) and a ``resume`` directory with nothing to resume from.
        ``config`` / ``copies``: carried by :class:`RunFinished`.

        Raises:
            RunFinished: ``output_dir`` holds ``results.json`` and ``overwrite`` is false.
            ConfigError: ``resume.dir`` is set, the run trains, and ``output_dir`` holds no checkpoint.
        """
        if (output_dir / "results.json").exists() and not self.overwrite:
            raise RunFinished(
                f"{output_dir / 'results.json'} exists: this run already finished. Pass overwrite=true to run it "
                "again in the same directory, or name another run with run_name=...",
                read_json_object(output_dir / "results.json"), config, copies)
        if self.dir and train and not (
                (output_dir / "checkpoints" / "last.ckpt").is_file() or any(output_dir.glob("hpc_ckpt_*.ckpt"))):
            raise ConfigError(f"resume={self.dir}: no checkpoints/last.ckpt in that directory to resume from "
                              "(a run writes it at its first validation)")

    def checkpoint(self, output_dir: Path, train: bool) -> str | None:
        """The checkpoint ``fit`` resumes from (:func:`resumable_checkpoint`; None: from step 0, or nothing
        trained); ``auto`` in a directory with ``results.json`` (``overwrite=true``) is a fresh run."""
        if not train:
            return None
        ckpt_path = self.ckpt_path
        if ckpt_path == "auto" and (output_dir / "results.json").exists():  # overwrite=true: a fresh run
            ckpt_path = None
        return resumable_checkpoint(ckpt_path, output_dir)


def resolve_ckpt_path(ckpt_path: str | None, output_dir: str | Path) -> str | None:
    """The checkpoint ``trainer.fit`` resumes from.

    ``auto`` (a requeued or relaunched job in the same run directory): the newest of ``checkpoints/last.ckpt``
    and Lightning's SLURM ``hpc_ckpt_<n>.ckpt`` in ``output_dir``, or ``None`` (start at step 0) when there is
    none.  Anything else (``null``, ``last``, ``best``, a path) is Lightning's own ``ckpt_path``.

    Raises:
        FileNotFoundError: ``ckpt_path`` is a path that does not exist (names the key and the path).
    """
    if ckpt_path in (None, "last", "best", "hpc", "registry"):
        return ckpt_path
    output_dir = Path(output_dir)
    if ckpt_path == "auto":
        found = [p for p in [output_dir / "checkpoints" / "last.ckpt", *output_dir.glob("hpc_ckpt_*.ckpt")]
                 if p.is_file()]
        if not found:
            log.info("ckpt_path=auto: no checkpoint in %s yet, training from step 0", output_dir)
            return None
        newest = max(found, key=lambda p: p.stat().st_mtime)
        log.info("ckpt_path=auto: resuming from %s", newest)
        return str(newest)
    if not Path(ckpt_path).is_file():
        raise FileNotFoundError(f"ckpt_path={ckpt_path}: no such checkpoint file (use a path, last, best or auto)")
    return ckpt_path


def resumable_checkpoint(ckpt_path: str | None, output_dir: str | Path) -> str | None:
    """:func:`resolve_ckpt_path`, with a checkpoint that cannot be read (cut short by a crash during its write, a
    full quota) set aside instead of failing every re-run: ``auto`` and ``last`` rename it to
    ``<name>.unreadable-<time>`` (:func:`cselab.run.checkpoints.set_aside`, never deleted), log a warning naming both
    files, and resume from the next newest checkpoint (a SLURM ``hpc_ckpt_<n>.ckpt``) or train from step 0.

    Raises:
        ConfigError: ``ckpt_path`` names a file that cannot be read (names it and the alternatives).
        FileNotFoundError: as :func:`resolve_ckpt_path`.
    """
    from cselab.run.checkpoints import read_error, set_aside

    while True:
        path = resolve_ckpt_path(ckpt_path, output_dir)
        candidate = Path(output_dir) / "checkpoints" / "last.ckpt" if path == "last" else path
        if candidate in (None, "best", "hpc", "registry") or not Path(candidate).is_file():
            return path
        err = read_error(candidate)
        if err is None:
            return path
        if ckpt_path not in ("auto", "last"):
            raise ConfigError(f"ckpt_path={ckpt_path}: the checkpoint cannot be read ({type(err).__name__}: "
                              f"{str(err).splitlines()[0] if str(err) else ''}); pass another checkpoint, "
                              "ckpt_path=auto, or ckpt_path=null to train from step 0")
        aside = set_aside(candidate)
        log.warning("checkpoint %s cannot be read (%s: %s; a write cut short?): set aside as %s (not deleted); "
                    "resuming from the next checkpoint, if any, else training from step 0", candidate,
                    type(err).__name__, str(err).splitlines()[0] if str(err) else "", aside)


def checkpoint_step(ckpt_path: str | None) -> int | None:
    """The global step stored in the checkpoint file ``ckpt_path`` (memory-mapped: the weights are not read), or
    ``None`` when there is no file to resume from (``None``, or Lightning's ``last`` / ``best`` / ... keywords)."""
    if ckpt_path is None or not Path(ckpt_path).is_file():
        return None
    state = torch.load(ckpt_path, map_location="cpu", mmap=True, weights_only=False)
    return int(state.get("global_step") or 0)


@dataclass(frozen=True)
class RunState:
    """Where the run stands before its method is built: its directory, start time (``perf_counter``), the
    checkpoint it resumes from (None: from scratch), that checkpoint's step, the accepted config changes and
    RankCSE's teachers (:func:`cselab.run.teachers.teacher_record`)."""

    output_dir: Path
    start: float
    ckpt_path: str | None = None
    resume_step: int | None = None
    changed_on_resume: tuple[dict[str, Any], ...] = ()
    teachers: tuple[dict[str, Any], ...] = ()  # RankCSE: each teacher's path, weight and the file it loads
