"""No host sync on a non-logging training step (issue "Training bound by the GPU") with what a GPU changes in the
run stood in for on the CPU: from one batch start to the next, a ``TorchDispatchMode`` counts no
``_local_scalar_dense`` (``.item()``, ``if tensor:``), ``nonzero`` or ``masked_select`` outside the optimizer's own
host calls, and ``torch.cuda.synchronize`` is not called.  The same check of every method, uncached and cached,
with the CPU defaults: ``tests/test_contract.py`` (contract 6)."""

from __future__ import annotations

import warnings

import pytest

from tests.sync_probe import SyncProbe, count_cuda_syncs

METHODS = {  # name -> overrides
    "simcse": ["method=simcse"],
    "simcse_sup": ["method=simcse", "setting=sup"],
    "promptbert": ["method=promptbert"],
}


def _windows(tmp_path, backbone_dir, family, data_dir, overrides, monkeypatch):
    from tests.conftest import SENTENCES, compose_tiny_run, run

    count_cuda_syncs(monkeypatch)
    import torch._dynamo

    torch._dynamo.reset()  # compiled in this test, whatever this worker compiled before (the windows' `compiled`)
    probes: list[SyncProbe] = []
    monkeypatch.setattr(SyncProbe, "__init__", lambda self, init=SyncProbe.__init__: (init(self), probes.append(self))[0])
    nli = tmp_path / "nli.csv"
    nli.write_text("sent0,sent1,hard_neg\n" + "".join(f"{s},{s} today,birds fly\n" for s in SENTENCES * 3))
    cfg = compose_tiny_run(tmp_path, backbone_dir, data_dir, "eval.test_tasks=[stsb]", "trainer.max_steps=6",
                           "trainer.val_check_interval=6", "trainer.log_every_n_steps=3", "data.batch_size=4",
                           f"backbone.name_or_path={backbone_dir}", f"backbone.family={family}",
                           "+callbacks.sync_probe._target_=tests.sync_probe.SyncProbe", *overrides)
    if cfg.setting.name == "sup":
        from omegaconf import open_dict

        with open_dict(cfg):
            cfg.data.path = str(nli)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run(cfg, tmp_path / "run")
    assert len(probes) == 1, len(probes)
    return probes[0].windows


#: what a CUDA machine changes in the run, stood in for on the CPU (issue #41): bf16 autocast (``precision: auto``),
#: widths padded to a multiple of 8 (``data.pad_to_multiple_of: auto``), a loader worker (``data.num_workers: auto``),
#: the compiled step (``compile.enabled: auto``; the ``eager`` backend: dynamo's tracing), the fused AdamW (on CPU
#: too).  Not stood in for: pinned memory and its copy stream, the CUDA generator's state (read at checkpoints only),
#: inductor's Triton kernels, the throughput callback's ``torch.cuda.synchronize`` (logging steps only:
#: tests/test_throughput.py) and the SDPA CUDA kernels (flash / memory-efficient attention).
GPU_SETTINGS = ["trainer.precision=bf16-mixed", "data.pad_to_multiple_of=8", "data.num_workers=1",
                "compile.enabled=true", "compile.backend=eager"]
GPU_CASES = [(name, chunk) for name in ("simcse", "simcse_sup", "promptbert") for chunk in (None, 3)]


@pytest.mark.parametrize(("name", "chunk"), GPU_CASES,
                         ids=[f"{n}-{'cached' if c else 'uncached'}" for n, c in GPU_CASES])
def test_no_host_sync_between_logging_steps_with_the_gpu_settings(name, chunk, tmp_path, tiny_mlm_dir,
                                                                  tiny_decoder_dirs, sts_data_dir, monkeypatch):
    """The SimCSE cases that failed on an H100 (and PromptBERT's), with what a GPU changes stood in for on the CPU
    (:data:`GPU_SETTINGS`): no host read on a quiet step."""
    overrides = METHODS[name]
    cached = [f"trainer.cached_step.chunk_size={chunk}"] if chunk else []
    windows = _windows(tmp_path, tiny_mlm_dir, "bert", sts_data_dir, [*overrides, *cached, *GPU_SETTINGS],
                       monkeypatch)
    quiet = [w for w in windows if not w["logging"] and not w["validated"]]
    assert len(windows) == 6 and len(quiet) >= 3, windows
    for w in quiet:
        assert w["syncs"] == {} and w["cuda_syncs"] == 0, (name, chunk, w)
    # the probe watched the compiled step, not an eager fallback: the layer (and loss) compiled on the first
    # step run as configured (step 1: step 0 is the FLOP counter's, run eagerly), and no later quiet step
    # recompiled (on CUDA inductor tunes its Triton kernels in a compiling window; `compiled` names it)
    compiled = [w["compiled"] for w in windows]
    assert compiled[1] > 0 and all(w["compiled"] == 0 for w in quiet if w["step"] > 1), compiled


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
    monkeypatch.setattr(SyncProbe, "cuda_where", __import__("collections").Counter())
    count_cuda_syncs(monkeypatch)
    for _ in range(2):
        torch.cuda.synchronize()
    assert SyncProbe.cuda_syncs == 2
    ((where, calls),) = SyncProbe.cuda_where.items()
    assert calls == 2 and "tests/test_sync_free.py:" in where, where
