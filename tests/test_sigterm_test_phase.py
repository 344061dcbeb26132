"""SIGTERM during the test phase stops the run as Ctrl-C does, and the same command then finishes it (446911a:
logged and ignored, the test went on for its whole ~75 s)."""

from __future__ import annotations

import os
import signal

import lightning as L
import pytest


class SigtermAtTest(L.Callback):
    """Sends this process SIGTERM when the test phase starts (once per process)."""

    sent = False

    def on_test_start(self, trainer, pl_module) -> None:
        if not SigtermAtTest.sent:
            SigtermAtTest.sent = True
            os.kill(os.getpid(), signal.SIGTERM)


def test_sigterm_in_the_test_phase_stops_then_the_rerun_finishes(tmp_path, tiny_bert_dir, sts_data_dir):
    from tests.conftest import compose_tiny_run, run

    cfg = compose_tiny_run(tmp_path, tiny_bert_dir, sts_data_dir, "eval.test_tasks=[stsb]", "callbacks.throughput=null",
                           f"+callbacks.sigterm._target_={__name__}.SigtermAtTest")
    sigint, sigterm = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    try:
        with pytest.raises(SystemExit) as stopped:  # Lightning's Ctrl-C path: graceful shutdown, exit 1
            run(cfg, tmp_path / "run")
    finally:
        signal.signal(signal.SIGINT, sigint)  # (Lightning ignores SIGINT after an interrupt)
    assert stopped.value.code == 1 and SigtermAtTest.sent
    assert signal.getsignal(signal.SIGTERM) is sigterm  # the handler is the process's own again
    assert not (tmp_path / "run" / "results.json").exists()
    assert (tmp_path / "run" / "checkpoints" / "last.ckpt").is_file()

    results = run(cfg, tmp_path / "run")  # the same command: resumes at the last step, finishes the test
    assert results["global_step"] == 4 and "stsb" in results["test"]
