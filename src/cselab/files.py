"""Writing outputs safely: staged in a temporary file beside the target (same filesystem, so the final
``os.replace`` is atomic and nothing is copied across filesystems), removed on any failure (a full disk included),
and created with the process umask (``0666 & ~umask``: readable by collaborators under the usual ``022``).

Used for checkpoints (:class:`cselab.checkpoint_io.AtomicCheckpointIO`), ``results.json`` / ``failed.json``
(:func:`atomic_write_text`) and export folders (:func:`umask`).
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO

_umask_lock = threading.Lock()


def umask() -> int:
    """The process umask (read by setting it and restoring it at once; ``os`` has no getter)."""
    with _umask_lock:
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


def _temporary_name(target: Path) -> Path:
    return target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")


def remove_stale_temporaries(target: str | os.PathLike) -> list[Path]:
    """Remove the temporary files that writers of ``target`` killed mid-write left beside it
    (``.<name>.<pid>.<random>.tmp`` of a process that no longer runs, and the older ``.<name>.tmp``).

    Returns:
        The paths removed.
    """
    target = Path(target)
    pattern = re.compile(rf"^\.{re.escape(target.name)}\.(?:(\d+)\.[0-9a-f]+\.)?tmp$")
    removed = []
    try:
        candidates = list(target.parent.iterdir())
    except OSError:
        return removed
    for path in candidates:
        match = pattern.match(path.name)
        if not match:
            continue
        pid = int(match.group(1)) if match.group(1) else None
        if pid is not None and pid != os.getpid() and _alive(pid):
            continue  # another live process is writing it
        with contextlib.suppress(OSError):
            path.unlink()
            removed.append(path)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def staged(target: str | os.PathLike, mode: str = "wb") -> Iterator[IO]:
    """Open a new temporary file beside ``target`` for writing; when the block ends without error, flush it to
    disk and rename it over ``target``; on any error (``OSError(ENOSPC)`` included) remove it and re-raise.

    The file is created with mode ``0666`` filtered by the process umask (not ``mkstemp``'s ``0600``).

    Args:
        target: the final path (its folder must exist).
        mode: ``"wb"`` or ``"w"`` (text, UTF-8).

    Raises:
        OSError: creating, writing or renaming failed (the temporary file is gone).
    """
    target = Path(target)
    tmp = _temporary_name(target)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` to ``path`` through a temporary file beside it and ``os.replace`` (never a half-written
    file; the temporary file removed on any failure; created with the process umask, see :func:`staged`).

    Raises:
        OSError: the write failed (e.g. ENOSPC); ``path`` keeps its previous content.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with staged(path, "w") as f:
        f.write(text)
    return path
