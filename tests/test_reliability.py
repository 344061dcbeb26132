"""Never lose a result: NaN / inf losses stop or skip with the batch saved, writes are atomic, a finished run is
not overwritten, and a failing job leaves ``failed.json``."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader

from cselab.io.files import atomic_write_text
from cselab.methods.nonfinite import NonFiniteLossError
from cselab.run.checkpoints import AtomicCheckpointIO

ROWS = [{"text": s} for s in ["a man is playing a guitar", "the cat sat on the mat", "birds fly", "a cat sat"]]


def _fit(method, tmp_path: Path, steps: int = 2) -> L.Trainer:
    loader = DataLoader(ROWS, batch_size=4, collate_fn=method.train_collate())
    trainer = L.Trainer(max_steps=steps, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, limit_val_batches=0, accelerator="cpu",
                        default_root_dir=str(tmp_path))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(method, loader)
    return trainer


def _nan_loss(method):
    real = method.loss_fn.forward
    method.loss_fn.forward = lambda *args, **kwargs: real(*args, **kwargs) * float("nan")


def test_nan_loss_stops_with_the_step_and_the_batch_saved(make_method, tmp_path):
    method = make_method("simcse", "bert")
    _nan_loss(method)
    with pytest.raises(NonFiniteLossError, match=r"training loss is nan at step 0; the batch's sentences are in "
                                                  r".*nonfinite_step0.json \(set method.on_nonfinite=skip"):
        _fit(method, tmp_path)
    saved = json.loads((tmp_path / "nonfinite_step0.json").read_text())
    assert saved["step"] == 0 and saved["loss"] == "nan"
    assert saved["sentences"] == [r["text"] for r in ROWS]


def test_nan_loss_with_skip_trains_on_without_stepping(make_method, tmp_path):
    method = make_method("simcse", "bert", on_nonfinite="skip")
    before = {n: p.detach().clone() for n, p in method.named_parameters()}
    _nan_loss(method)
    _fit(method, tmp_path, steps=2)
    assert method.skipped_nonfinite >= 2  # every batch skipped (the loop ran on), each saved
    assert list(tmp_path.glob("nonfinite_step*.json"))
    assert all(torch.equal(p, before[n]) for n, p in method.named_parameters())  # never trained on a NaN


def test_atomic_text_write_keeps_the_old_file_when_the_write_fails(tmp_path, monkeypatch):
    path = tmp_path / "results.json"
    atomic_write_text(path, '{"ok": 1}\n')

    def crash(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", crash)  # dies after part of the new text went to the temporary file
    with pytest.raises(OSError, match="disk full"):
        atomic_write_text(path, '{"ok": 2, "half": "')
    assert path.read_text() == '{"ok": 1}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]  # no temporary file left behind


def test_atomic_checkpoint_write_keeps_the_old_checkpoint(tmp_path, monkeypatch):
    io = AtomicCheckpointIO()
    path = tmp_path / "last.ckpt"
    io.save_checkpoint({"global_step": 1}, path)

    real_save = torch.save

    def crash(obj, f, *args, **kwargs):
        real_save({"partial": True}, f)
        raise RuntimeError("killed while saving")

    monkeypatch.setattr(torch, "save", crash)
    with pytest.raises(RuntimeError, match="killed while saving"):
        io.save_checkpoint({"global_step": 2}, path)
    monkeypatch.setattr(torch, "save", real_save)
    assert torch.load(path, weights_only=False)["global_step"] == 1


def test_finished_run_is_not_overwritten_unless_asked(tmp_path):
    from hydra import compose, initialize_config_dir

    import cselab.io.config  # noqa: F401
    from tests.conftest import run

    (tmp_path / "results.json").write_text('{"test": {"avg": 80.0}}')
    conf = str(Path(__file__).resolve().parents[1] / "conf")
    with initialize_config_dir(config_dir=conf, version_base="1.3"):
        cfg = compose("config", overrides=["method=baseline", "method.pooler=avg"])
    with pytest.raises(FileExistsError, match=r"results.json exists: this run already finished. Pass overwrite=true"):
        run(cfg, tmp_path)
    assert json.loads((tmp_path / "results.json").read_text()) == {"test": {"avg": 80.0}}


def test_a_failing_job_leaves_failed_json(tmp_path):
    from cselab.run.failure import record_failure

    try:
        raise ValueError("loss.temperature must be > 0, got 0")
    except ValueError as err:
        path = record_failure(tmp_path, err)
    info = json.loads(path.read_text())
    assert info["error"] == "ValueError" and "temperature" in info["message"] and "Traceback" in info["traceback"]


# ------------------------------------------------------------------ disk full, permissions


def _enospc(*args, **kwargs):
    import errno

    raise OSError(errno.ENOSPC, "No space left on device")


def test_checkpoint_write_on_a_full_disk_leaves_nothing_behind(tmp_path, monkeypatch):
    io = AtomicCheckpointIO()
    path = tmp_path / "checkpoints" / "best-step2.ckpt"
    real_save = torch.save
    staged_in = []

    def full_disk(obj, f, *args, **kwargs):
        staged_in.extend(p.name for p in path.parent.iterdir())  # where the bytes go while writing
        f.write(b"\0" * 2**20)  # a megabyte went out before the disk filled up
        _enospc()

    monkeypatch.setattr(torch, "save", full_disk)
    with pytest.raises(OSError, match="No space left on device"):
        io.save_checkpoint({"global_step": 2}, path)
    monkeypatch.setattr(torch, "save", real_save)
    assert len(staged_in) == 1 and staged_in[0].startswith(".best-step2.ckpt.")  # staged beside the target
    assert staged_in[0].endswith(".tmp")  # (same filesystem, not /tmp)
    assert list(path.parent.iterdir()) == []  # no checkpoint, no temporary file


def test_a_killed_writer_s_temporary_file_is_removed_by_the_next_save(tmp_path):
    stale = tmp_path / ".last.ckpt.999999999.deadbeef.tmp"  # a pid that does not run
    stale.write_bytes(b"half a checkpoint")
    (tmp_path / ".last.ckpt.tmp").write_bytes(b"the old naming")
    AtomicCheckpointIO().save_checkpoint({"global_step": 3}, tmp_path / "last.ckpt")
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]


def test_recording_a_failure_on_a_full_disk_never_raises(tmp_path, monkeypatch, caplog):
    from cselab.run.failure import record_failure

    monkeypatch.setattr(os, "fsync", _enospc)
    try:
        raise _enospc()
    except OSError as err:
        with caplog.at_level("ERROR"):
            assert record_failure(tmp_path, err) is None
    assert "could not write" in caplog.text and "failed.json" in caplog.text and "No space left" in caplog.text
    assert list(tmp_path.iterdir()) == []


def test_outputs_are_created_with_the_process_umask(tmp_path):
    old = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "results.json", "{}\n")
        AtomicCheckpointIO().save_checkpoint({"global_step": 1}, tmp_path / "checkpoints" / "last.ckpt")
    finally:
        os.umask(old)
    assert (tmp_path / "results.json").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "checkpoints" / "last.ckpt").stat().st_mode & 0o777 == 0o644


@pytest.mark.integration
def test_a_run_that_fills_the_disk_leaves_no_checkpoint_or_temporary_file(tmp_path, tiny_bert_dir, sts_data_dir,
                                                                         monkeypatch, caplog):
    """The first checkpoint write of a real run hits ENOSPC: the run fails with that error, the run directory
    holds no checkpoint and no temporary file, and recording the failure (the disk still full) does not raise."""
    from cselab.run.failure import record_failure
    from tests.conftest import compose_tiny_run, run

    cfg = compose_tiny_run(tmp_path, tiny_bert_dir, sts_data_dir, "eval.test_tasks=[stsb]")
    out = tmp_path / "run"

    def full_disk(obj, f, *args, **kwargs):
        f.write(b"\0" * 2**20)
        _enospc()

    monkeypatch.setattr(torch, "save", full_disk)
    with pytest.raises(OSError, match="No space left on device") as caught:
        run(cfg, out)
    monkeypatch.setattr(os, "fsync", _enospc)  # the disk is still full when the failure is recorded
    with caplog.at_level("ERROR"):
        assert record_failure(out, caught.value) is None
    left = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    print(f"ENOSPC: {caught.value!r}; files left in the run directory: {left}")
    assert not [p for p in left if p.endswith((".ckpt", ".tmp")) or "/." in p or p.startswith(".")], left
    assert not (out / "failed.json").exists()
