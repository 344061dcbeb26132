"""The parts of the no-host-sync contract outside a run: Lightning's SIGTERM broadcast wrapped to the logging steps,
and the probe's counter of ``torch.cuda.synchronize`` calls.  The contract itself -- no host read on a quiet step,
every method, eager and compiled, uncached and cached -- is ``tests/test_contract.py`` (contract 6)."""

from __future__ import annotations

from collections import Counter

from tests.sync_probe import SyncProbe


def test_sigterm_broadcast_on_logging_steps_only() -> None:
    """Lightning's per-batch SIGTERM broadcast (a ``.item()`` under DDP) runs on the logging steps' batches only,
    the same batches on every rank."""
    from types import SimpleNamespace

    from cselab.callbacks.sigterm import SigtermOnLoggingSteps

    calls = []
    loop = SimpleNamespace(_broadcast_sigterm_tensor=lambda: calls.append(trainer.fit_loop.total_batch_idx))
    trainer = SimpleNamespace(log_every_n_steps=3, fit_loop=SimpleNamespace(epoch_loop=loop, total_batch_idx=0))
    callback = SigtermOnLoggingSteps()
    callback.setup(trainer, None, "fit")
    callback.setup(trainer, None, "fit")  # wrapped once
    for idx in range(7):
        trainer.fit_loop.total_batch_idx = idx
        loop._broadcast_sigterm_tensor()
    assert calls == [2, 5]


def test_the_cuda_sync_counter_names_its_callers(monkeypatch) -> None:
    """``count_cuda_syncs``: each ``torch.cuda.synchronize`` call is counted with the line that made it (what a
    failing GPU run must name), and the real one is called only when CUDA is there."""
    import torch

    from tests.sync_probe import count_cuda_syncs

    monkeypatch.setattr(SyncProbe, "cuda_syncs", 0)
    monkeypatch.setattr(SyncProbe, "cuda_where", Counter())
    count_cuda_syncs(monkeypatch)
    for _ in range(2):
        torch.cuda.synchronize()
    assert SyncProbe.cuda_syncs == 2
    ((where, calls),) = SyncProbe.cuda_where.items()
    assert calls == 2 and "tests/test_sync_free.py:" in where, where
