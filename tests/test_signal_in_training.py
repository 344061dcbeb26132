"""SIGTERM (and a first Ctrl-C) during training write ``last.ckpt`` of the step reached and exit with 128 + the
signal, naming the command that resumes; that command ends where an uninterrupted run ends (issue 40, item 3:
Lightning's SIGTERMException is a SystemExit with no code, so the run exited 0 and saved nothing)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import torch
from test_resume import _command, _corpus, _env

ROOT = Path(__file__).resolve().parents[1]
#: the step the signal arrives at (6: the last batch of the first epoch, 6 batches an epoch; validations at 4, 8, 12,
#: 16; CSELAB_SIGNAL_STEP=3 for one mid-epoch)
STEP = int(os.environ.get("CSELAB_SIGNAL_STEP", "6"))


def _env_with_probe(data_dir: Path) -> dict[str, str]:
    env = _env(data_dir)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), str(ROOT / "tests"), env.get("PYTHONPATH")) if p)
    return env


def _probe(step: int, signal_name: str) -> list[str]:
    return ["+callbacks.signal_probe._target_=signal_probe.SignalAt", f"+callbacks.signal_probe.step={step}",
            f"+callbacks.signal_probe.signal_name={signal_name}"]


@pytest.mark.integration
@pytest.mark.parametrize(("signal_name", "status"), [("SIGTERM", 143), ("SIGINT", 130)])
def test_a_signal_in_training_saves_last_ckpt_and_the_same_command_resumes_bit_for_bit(
        tmp_path, tiny_bert_dir, sts_data_dir, signal_name, status):
    corpus = _corpus(tmp_path / "corpus.txt")  # 6 batches an epoch; validations at 4, 8, 12, 16
    env = _env_with_probe(sts_data_dir)
    run_dir = tmp_path / "stopped"
    stopped = subprocess.run(_command(run_dir, tiny_bert_dir, corpus, "checkpointing.save_every_n_steps=null",
                                      *_probe(STEP, signal_name)),
                             cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert stopped.returncode == status, stopped.stderr[-4000:]
    last = run_dir / "checkpoints" / "last.ckpt"
    assert int(torch.load(last, map_location="cpu", weights_only=False)["global_step"]) == STEP  # this step's, not the last validation's
    assert not (run_dir / "results.json").exists() and not (run_dir / "failed.json").exists()
    log = (run_dir / "run.log").read_text()
    assert f"stopped by {signal_name} at step {STEP}" in log and "resume with the same command: python run.py" in log
    if signal_name == "SIGINT":
        return  # the same checkpoint and resume path as SIGTERM's

    resumed = subprocess.run(_command(run_dir, tiny_bert_dir, corpus, "checkpointing.save_every_n_steps=null"),
                             cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    straight = subprocess.run(_command(tmp_path / "straight", tiny_bert_dir, corpus,
                                       "checkpointing.save_every_n_steps=null"),
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert straight.returncode == 0, straight.stderr[-4000:]
    a = json.loads((tmp_path / "straight" / "results.json").read_text())
    b = json.loads((run_dir / "results.json").read_text())
    assert b["global_step"] == a["global_step"] == 16
    assert [p["stsb_dev"] for p in b["val_curve"]] == [p["stsb_dev"] for p in a["val_curve"]]
    assert b["test"] == a["test"]  # bit for bit
