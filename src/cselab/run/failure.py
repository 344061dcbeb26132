"""The failure record of a run: ``failed.json`` in its directory (error, message, traceback; for a full disk the
file and the free space), which the sweep summary and the report list."""

from __future__ import annotations

import json
import logging
import traceback
from pathlib import Path

from cselab.io.files import DiskFullError, atomic_write_text, disk_full_error, exception_chain, free_bytes

log = logging.getLogger(__name__)


def record_failure(output_dir: str | Path, err: BaseException) -> Path | None:
    """Write ``failed.json`` (error type, message, traceback) in a run's directory; the report lists it.  When
    ``err`` or an exception in its chain is a full disk (:class:`cselab.io.files.DiskFullError`, or an ``OSError``
    ENOSPC / EDQUOT written outside :func:`cselab.io.files.staged`), also ``"cause": "disk full"``, ``path`` (the
    file being written, else ``output_dir``) and ``free_bytes`` (the free space when the write failed, else now).

    Never raises: when the file cannot be written (a full disk, a read-only folder), the failure and the reason
    are logged instead and ``None`` is returned, so a sweep's handler goes on with the next job.
    """
    try:
        info = {
            "error": type(err).__name__,
            "message": str(err),
            "traceback": "".join(traceback.format_exception(type(err), err, err.__traceback__)),
        }
        chain = exception_chain(err)
        full = next((e for e in chain if isinstance(e, DiskFullError)), None)
        if full is None:
            path = next((e.filename for e in chain if isinstance(e, OSError) and e.filename), None) or output_dir
            full = disk_full_error(err, path, free_bytes(path))
        if full is not None:
            info.update({"cause": "disk full", "path": str(full.filename),
                         "free_bytes": full.free_bytes if full.free_bytes is not None else free_bytes(full.filename)})
        return atomic_write_text(Path(output_dir) / "failed.json", json.dumps(info, indent=2) + "\n")
    except Exception as write_err:
        log.error("could not write %s (%s: %s); the run failed with %s: %s", Path(output_dir) / "failed.json",
                  type(write_err).__name__, write_err, type(err).__name__, err)
        return None
