"""Writing outputs safely: staged in a temporary file beside the target (same filesystem, so the final
``os.replace`` is atomic and nothing is copied across filesystems), removed on any failure (a full disk included),
and created with the process umask (``0666 & ~umask``: readable by collaborators under the usual ``022``).
A write that fails because the disk is full raises :class:`DiskFullError` (errno ENOSPC, the path, the free space),
whatever the writer raised (torch's ``unexpected pos`` included).

Used for checkpoints (:class:`cselab.run.checkpoints.AtomicCheckpointIO`), ``results.json`` / ``failed.json``
(:func:`atomic_write_text`) and export folders (:func:`umask`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import shutil
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
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException as err:
        free = free_bytes(target.parent)  # before the temporary file's space is given back
        with contextlib.suppress(OSError):
            tmp.unlink()
        full = disk_full_error(err, target, free)
        if full is not None:
            raise full from err
        raise


#: errno values of a full disk / an exhausted quota
DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
#: messages of a full disk, and of torch's zip writer when its file write came up short (a full disk, usually:
#: ``[enforce fail at inline_container.cc:672] . unexpected pos``; PyTorch's ``caffe2/serialize``)
DISK_FULL_MESSAGES = ("No space left on device", "Disk quota exceeded")
WRITER_FAILURE_MESSAGES = ("unexpected pos", "PytorchStreamWriter failed writing", "file write failed")
#: below this many free bytes, a writer failure without an errno is read as a full disk
LOW_SPACE_BYTES = 64 * 2**20


class DiskFullError(OSError):
    """A write failed because the disk (or the quota) is full: ``errno`` ENOSPC, ``filename`` the file being
    written, ``free_bytes`` the free space on its filesystem when it failed (``None``: unknown)."""

    def __init__(self, path: str | os.PathLike, free: int | None, detail: str) -> None:
        shown = "unknown" if free is None else _size(free)
        super().__init__(errno.ENOSPC, f"No space left on device: writing {path} failed with {shown} free on its "
                         f"filesystem ({detail}); free some space or write the run elsewhere", str(path))
        self.free_bytes = free

    def __str__(self) -> str:  # the message alone (OSError's adds "[Errno 28]" and repeats the path)
        return str(self.strerror)


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def free_bytes(path: str | os.PathLike) -> int | None:
    """Free bytes (for this user) on the filesystem holding ``path`` or its nearest existing parent; ``None``
    when it cannot be read."""
    path = Path(path)
    for candidate in (path, *path.parents):
        with contextlib.suppress(OSError):
            if candidate.exists():
                return int(shutil.disk_usage(candidate).free)
    return None


def exception_chain(err: BaseException) -> list[BaseException]:
    """``err`` and the exceptions it was raised from or while handling (``__cause__`` / ``__context__``)."""
    chain, seen = [], set()
    while err is not None and id(err) not in seen:
        chain.append(err)
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return chain


def disk_full_error(err: BaseException, path: str | os.PathLike, free: int | None) -> DiskFullError | None:
    """A :class:`DiskFullError` for ``err`` when it (or an exception in its chain) is a full disk: an ``OSError``
    with errno ENOSPC / EDQUOT or such a message, or torch's writer failing (``unexpected pos``) with less than
    :data:`LOW_SPACE_BYTES` free; else ``None`` (also when ``err`` already is one)."""
    chain = exception_chain(err)
    if any(isinstance(e, DiskFullError) for e in chain):
        return None
    for e in chain:
        if (isinstance(e, OSError) and e.errno in DISK_FULL_ERRNOS) or any(m in str(e) for m in DISK_FULL_MESSAGES):
            return DiskFullError(path, free, f"{type(e).__name__}: {e}")
    for e in chain:
        if any(m in str(e) for m in WRITER_FAILURE_MESSAGES) and free is not None and free < LOW_SPACE_BYTES:
            return DiskFullError(path, free, f"{type(e).__name__}: {str(e).strip()[:200]}")
    return None


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


def read_json_object(path: str | os.PathLike) -> dict:
    """A JSON file's object (``results.json``, ``failed.json``), or ``{}`` when it cannot be read or holds no
    object."""
    import json

    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def unwritable_folder(path: str | os.PathLike) -> Path | None:
    """The folder that stops this process from writing ``path`` (a run directory to create or write into): the
    nearest existing one of ``path`` and its parents when it is not writable (or not a folder), else None."""
    folder = Path(path).absolute()
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
        return folder
    return None
