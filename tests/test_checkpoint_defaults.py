"""Checkpoints by default: the best one without optimizer state (for evaluation and export), ``last.ckpt``
removed once ``results.json`` is written (``checkpointing.keep_last``), and ``last.ckpt`` also written on a
timer (``checkpointing.save_every_minutes``).  On 446911a each run kept both, with optimizer state (273 MB each
for MiniLM)."""

from __future__ import annotations

from datetime import timedelta

import torch

import cselab
from cselab.run.checkpoints import LastCheckpoint


def test_a_finished_run_keeps_a_weights_only_best_and_no_last(tmp_path, tiny_bert_dir, sts_data_dir, caplog):
    from tests.conftest import compose_tiny_run, run

    cfg = compose_tiny_run(tmp_path, tiny_bert_dir, sts_data_dir, "eval.test_tasks=[stsb]",
                           "callbacks.throughput=null")
    with caplog.at_level("INFO", logger="cselab.run"):
        results = run(cfg, tmp_path / "run")
    best = torch.load(results["best_checkpoint"], map_location="cpu", weights_only=False)
    assert "optimizer_states" not in best and "state_dict" in best and best["cselab_method_class"]
    assert not (tmp_path / "run" / "checkpoints" / "last.ckpt").exists()
    assert "removed checkpoints/last.ckpt" in caplog.text
    assert cselab.load(results["best_checkpoint"]).encode(["a test sentence"]).shape[0] == 1  # still loads


def test_last_ckpt_on_a_timer_unless_every_n_steps_is_set(tmp_path):
    assert LastCheckpoint(tmp_path, every_minutes=10)._train_time_interval == timedelta(minutes=10)
    steps = LastCheckpoint(tmp_path, every_n_train_steps=20, every_minutes=10)
    assert steps._every_n_train_steps == 20 and steps._train_time_interval is None
    assert LastCheckpoint(tmp_path)._train_time_interval is None
