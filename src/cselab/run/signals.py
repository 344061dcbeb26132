"""Signals: SIGTERM / SIGINT during training stop at the end of the step with ``last.ckpt`` saved; SIGTERM in the
test phase stops the run as Ctrl-C does.

Training (:func:`stop_at_step_end`, around ``trainer.fit``): Lightning's SIGTERM handler records the signal and its
loop raises ``SIGTERMException`` (a ``SystemExit`` with no code: exit status 0) at the end of the step;
:class:`cselab.run.checkpoints.LastCheckpoint` writes ``checkpoints/last.ckpt`` on that exception and the run
raises :class:`StoppedBySignal`: exit status 128 + the signal (143 SIGTERM, 130 SIGINT), which a batch
scheduler reads as "not done", and ``run.py`` prints the command that resumes (the same command:
``ckpt_path=auto``).  A first Ctrl-C (SIGINT) does the same -- the step in flight ends, so the checkpoint is the
state between two steps and a requeue resumes bit for bit; a second one interrupts at once.

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
from typing import Any

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


class StoppedBySignal(SystemExit):
    """The run stopped between two training steps on a signal; exit status ``128 + signum``.

    Attributes:
        signal_name: ``SIGTERM`` or ``SIGINT``; step: the global step reached; checkpoint: the ``last.ckpt`` written
        (None: none, ``checkpointing.save_last=false``).
    """

    def __init__(self, signum: int, step: int, checkpoint: str | None) -> None:
        super().__init__(128 + int(signum))
        self.signal_name, self.step, self.checkpoint = signal.Signals(signum).name, int(step), checkpoint


@contextlib.contextmanager
def stop_at_step_end(trainer: Any) -> Iterator[dict[str, int]]:
    """Within the block (``trainer.fit``), SIGTERM and a first SIGINT are recorded in the dict it yields
    (``{"signum": ...}``) and stop the training loop at the end of the step in flight (``trainer.received_sigterm``,
    Lightning's own flag, read at every step end: ``SIGTERMException``); a second SIGINT raises
    ``KeyboardInterrupt`` at once.  Lightning keeps an existing SIGTERM handler beside its own.  The previous
    handlers are restored on exit; a no-op outside the main thread."""
    received: dict[str, int] = {}
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def stop(signum, frame) -> None:
        if signum == signal.SIGINT and received:
            raise KeyboardInterrupt("a second SIGINT")
        if not received:
            log.warning("%s: stopping at the end of this training step, then saving checkpoints/last.ckpt%s",
                        signal.Signals(signum).name, " (Ctrl-C again: at once, unsaved)" if signum == signal.SIGINT
                        else "")
        received.setdefault("signum", signum)
        # Lightning's flag (Trainer.received_sigterm reads it): its loop ends the step and raises SIGTERMException
        trainer._signal_connector.received_sigterm = True

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield received
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
