"""A checkpoint that cannot be read (cut short by a crash during its write, a full quota) is set aside, renamed
and named in a warning, and the same command resumes from the next checkpoint or starts again; on 446911a every
re-run died with torch's "failed finding central directory"."""

from __future__ import annotations

import logging
import os
import time

import pytest
import torch

from cselab.model.spec import ConfigError
from cselab.run.checkpoints import read_error, set_aside
from cselab.run.resume import resumable_checkpoint


def _truncated(path) -> None:
    """A real checkpoint cut to half its size."""
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"global_step": 3, "state_dict": {"w": torch.randn(64, 64)}}, path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def test_a_truncated_last_ckpt_is_set_aside_and_named(tmp_path, caplog):
    last = tmp_path / "checkpoints" / "last.ckpt"
    _truncated(last)
    assert read_error(last) is not None
    with caplog.at_level(logging.WARNING, logger="cselab.run"):
        assert resumable_checkpoint("auto", tmp_path) is None  # nothing readable left: from step 0
    [aside] = (tmp_path / "checkpoints").glob("last.ckpt.unreadable-*")
    assert not last.exists() and aside.stat().st_size > 0  # renamed, not deleted
    assert str(last) in caplog.text and str(aside) in caplog.text


def test_the_next_newest_checkpoint_is_resumed(tmp_path):
    hpc = tmp_path / "hpc_ckpt_1.ckpt"
    torch.save({"global_step": 2}, hpc)
    os.utime(hpc, (time.time() - 60, time.time() - 60))
    _truncated(tmp_path / "checkpoints" / "last.ckpt")  # the newer one, unreadable
    assert resumable_checkpoint("auto", tmp_path) == str(hpc)
    _truncated(tmp_path / "checkpoints" / "last.ckpt")
    assert resumable_checkpoint("last", tmp_path) == "last"  # Lightning's keyword: it finds no last.ckpt now
    assert len(list((tmp_path / "checkpoints").glob("last.ckpt.unreadable-*"))) == 2


def test_an_explicit_unreadable_checkpoint_is_refused_by_name(tmp_path):
    bad = tmp_path / "mine.ckpt"
    _truncated(bad)
    with pytest.raises(ConfigError, match=r"ckpt_path=.*mine.ckpt: the checkpoint cannot be read"):
        resumable_checkpoint(str(bad), tmp_path)
    assert bad.exists()  # the user's own file is left where it is
    assert set_aside(bad).name.startswith("mine.ckpt.unreadable-")


def test_the_same_command_restarts_after_a_truncated_last_ckpt(tmp_path, tiny_bert_dir, sts_data_dir, caplog):
    from tests.conftest import compose_tiny_run, run

    cfg = compose_tiny_run(tmp_path, tiny_bert_dir, sts_data_dir, "eval.test_tasks=[stsb]", "trainer.max_steps=2",
                           "callbacks.throughput=null")
    _truncated(tmp_path / "run" / "checkpoints" / "last.ckpt")
    (tmp_path / "run" / "failed.json").write_text('{"error": "RuntimeError", "message": "an earlier attempt"}')
    with caplog.at_level(logging.INFO, logger="cselab.run"):
        results = run(cfg, tmp_path / "run")
    assert results["global_step"] == 2 and (tmp_path / "run" / "results.json").is_file()
    assert "last.ckpt cannot be read" in caplog.text and "set aside as" in caplog.text
    # issue #40: the earlier attempt's failed.json and set-aside checkpoint do not stay beside the success
    assert not (tmp_path / "run" / "failed.json").exists()
    assert not list((tmp_path / "run" / "checkpoints").glob("*.unreadable-*"))
    assert "removed failed.json" in caplog.text and "set aside as unreadable by an earlier attempt" in caplog.text
