"""One process per run directory: two identical commands started together would write into one
``outputs/<run_name>``, interleave its ``run.log`` and overwrite each other's checkpoints.

:func:`hold_run_dir` takes an exclusive, non-blocking ``flock`` on ``<run dir>/.lock`` for the life of the process
(the operating system releases it when the process ends, killed or not: no stale lock to clean up) and refuses a
second process with a message naming the directory and the holder's pid.  Taking the lock writes nothing into an
existing directory (a refused command leaves the run's record as it was, :mod:`cselab.run.record`);
:func:`mark_run_dir` writes the holder's pid once its run proceeds.  Under DDP / SLURM only rank 0 takes it
(the other ranks are the same run).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO

from cselab.model.spec import ConfigError

#: the lock file inside a run directory
LOCK_FILE = ".lock"
_held: dict[str, IO[str]] = {}


class RunDirInUse(ConfigError):
    """Another process holds the run directory: nothing of it may be written or removed."""


def hold_run_dir(output_dir: str | os.PathLike) -> Path | None:
    """Lock ``output_dir`` for this process (kept until it exits; a second call for the same directory is a
    no-op); returns the lock file, or ``None`` on a rank other than 0 or where ``fcntl`` is missing (Windows).

    Raises:
        RunDirInUse: (a ConfigError) another process holds the directory (names it, the pid, and ``run_name=`` to run beside it).
    """
    try:
        import fcntl
    except ImportError:  # (Windows: no flock)
        return None
    if any(os.environ.get(var, "0") != "0" for var in ("RANK", "LOCAL_RANK", "SLURM_PROCID")):  # not rank 0
        return None
    path = Path(output_dir) / LOCK_FILE
    key = str(path.resolve())
    if key in _held:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "a+", encoding="utf-8")  # noqa: SIM115 -- held open until the process exits
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "unknown"
        handle.close()
        raise RunDirInUse(f"{output_dir} is in use by another run (pid {holder}): two processes would interleave its "
                          "run.log and overwrite its checkpoints. Wait for it to end (re-running the same command "
                          "then resumes or skips it), or run beside it with run_name=<another name>") from None
    _held[key] = handle
    return path


def mark_run_dir(output_dir: str | os.PathLike) -> None:
    """Write this process's pid into the lock it holds on ``output_dir`` (named by a refused second process);
    a no-op when it holds none.  Called when the run proceeds: a refused command writes nothing."""
    handle = _held.get(str((Path(output_dir) / LOCK_FILE).resolve()))
    if handle is None:
        return
    handle.seek(0)
    handle.truncate()
    handle.write(f"{os.getpid()}\n")
    handle.flush()


def release_run_dir(output_dir: str | os.PathLike) -> None:
    """Release this process's lock on ``output_dir`` (a no-op when it holds none): for tests and for a -m sweep's
    finished job."""
    handle = _held.pop(str((Path(output_dir) / LOCK_FILE).resolve()), None)
    if handle is not None:
        handle.close()
