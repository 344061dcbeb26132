"""SIGTERM in the test phase stops the run as Ctrl-C does.

Lightning's own SIGTERM handler only records the signal (``trainer.received_sigterm``) and raises at the next
batch boundary of its loops; cselab's test phase scores the seven STS tasks inside one callback call, so a
SIGTERM there was logged and ignored for the whole test (about 75 s on MiniLM).  While :func:`sigterm_stops` is
active, SIGTERM raises :class:`KeyboardInterrupt`, which Lightning handles like Ctrl-C (graceful shutdown, exit
status 1, no ``results.json``); re-running the same command resumes from ``last.ckpt`` and finishes the test.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Iterator

log = logging.getLogger(__name__)


@contextlib.contextmanager
def sigterm_stops(phase: str = "test") -> Iterator[None]:
    """Within the block, SIGTERM raises ``KeyboardInterrupt`` (main thread only; elsewhere a no-op).  The previous
    handler is restored on exit.  Lightning, entering ``trainer.test`` inside the block, composes its own handler
    with this one (it keeps existing handlers)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame) -> None:
        log.warning("SIGTERM in the %s phase: stopping as Ctrl-C does (no results.json); re-run the same command to "
                    "finish it", phase)
        raise KeyboardInterrupt(f"SIGTERM in the {phase} phase")

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
