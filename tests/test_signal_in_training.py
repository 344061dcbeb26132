"""SIGTERM (and a first Ctrl-C) during training write ``last.ckpt`` of the step reached and exit ``run.py`` with
128 + the signal, naming the command that resumes (issue 40, item 3: Lightning's SIGTERMException is a SystemExit
with no code, so the run exited 0 and saved nothing).  That the same command then ends bit for bit where an
uninterrupted run ends is checked for every method in process: ``tests/test_contract.py`` (contract 4)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from test_resume import _command, _corpus, _env

from tests import forked

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
def test_a_signal_in_training_saves_last_ckpt_and_names_the_command_that_resumes(
        tmp_path, tiny_bert_dir, sts_data_dir, signal_name, status):
    corpus = _corpus(tmp_path / "corpus.txt")  # 6 batches an epoch; validations at 4, 8, 12, 16
    env = _env_with_probe(sts_data_dir)
    run_dir = tmp_path / "stopped"
    stopped = forked.run(_command(run_dir, tiny_bert_dir, corpus, "checkpointing.save_every_n_steps=null",
                                      *_probe(STEP, signal_name)),
                             cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert stopped.returncode == status, stopped.stderr[-4000:]
    last = run_dir / "checkpoints" / "last.ckpt"
    assert int(torch.load(last, map_location="cpu", weights_only=False)["global_step"]) == STEP  # this step's, not the last validation's
    assert not (run_dir / "results.json").exists() and not (run_dir / "failed.json").exists()
    log = (run_dir / "run.log").read_text()
    assert f"stopped by {signal_name} at step {STEP}" in log and "resume with the same command: python run.py" in log
