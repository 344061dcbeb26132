"""A refused or skipped command leaves the run directory byte for byte as it was (issue 40, item 1: the "already
finished", "in use" and ``resume=`` refusals rewrote ``.hydra/config.yaml`` and ``overrides.yaml``, appended to
``run.log``, and ``cselab report`` showed settings the run never used)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir
from test_run_lock import _hold_in_another_process

import cselab.io.config  # noqa: F401  (resolvers)
from cselab.callbacks.run_config import STATE_KEY
from cselab.run.spec import resolved_config
from tests import forked

ROOT = Path(__file__).resolve().parents[1]
#: the command the saved run was made with (the data of the clone, STS-B only: nothing loads before the refusal)
COMMAND = ["method=simcse", "trainer.max_steps=4", f"data_dir={ROOT / 'data'}", "eval.test_tasks=[stsb]",
           "run_name=mine"]


def _digest(run_dir: Path) -> dict[str, str]:
    """Every file under ``run_dir`` (the lock file included) -> the sha1 of its bytes."""
    return {str(p.relative_to(run_dir)): hashlib.sha1(p.read_bytes()).hexdigest()
            for p in sorted(run_dir.rglob("*")) if p.is_file()}


def _saved_run(tmp_path: Path, finished: bool) -> Path:
    """outputs/mine as a run leaves it: .hydra/, run.log, the lock with its pid, a last.ckpt holding the run's
    config (RunConfig's state) and, when finished, results.json."""
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=COMMAND)
    saved = resolved_config(cfg)
    run_dir = tmp_path / "outputs" / "mine"
    (run_dir / ".hydra").mkdir(parents=True)
    (run_dir / ".hydra" / "config.yaml").write_text("optim:\n  lr: 3.0e-05\n")
    (run_dir / ".hydra" / "overrides.yaml").write_text("- method=simcse\n- trainer.max_steps=4\n")
    (run_dir / ".hydra" / "hydra.yaml").write_text("hydra: {}\n")
    (run_dir / "run.log").write_text("[the run's own log]\n")
    (run_dir / ".lock").write_text("12345\n")
    (run_dir / "checkpoints").mkdir()
    torch.save({"global_step": 3, "callbacks": {STATE_KEY: {"config": saved, "changes": []}}},
               run_dir / "checkpoints" / "last.ckpt")
    if finished:
        (run_dir / "results.json").write_text(json.dumps({"config": saved, "test": {"avg": 50.0}}))
    return run_dir


def _run(tmp_path: Path, *overrides: str) -> subprocess.CompletedProcess:
    return forked.run([sys.executable, str(ROOT / "run.py"), *COMMAND, *overrides], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)


def test_a_finished_run_refused_or_skipped_keeps_its_record(tmp_path):
    run_dir = _saved_run(tmp_path, finished=True)
    before = _digest(run_dir)
    refused = _run(tmp_path, "optim.lr=1e-4")  # "already finished ... with other values": exit 1
    assert refused.returncode == 1 and "already finished" in refused.stderr, refused.stderr[-3000:]
    assert _digest(run_dir) == before
    skipped = _run(tmp_path)  # the same command: skipped, exit 0
    assert skipped.returncode == 0 and "already finished" in skipped.stdout + skipped.stderr, skipped.stderr[-3000:]
    assert _digest(run_dir) == before
    resumed = _run(tmp_path, f"resume={run_dir}", "method=esimcse")  # resume=<finished run> with another method
    assert resumed.returncode == 1, resumed.stderr[-3000:]
    assert _digest(run_dir) == before


def test_a_refused_resume_keeps_the_record_of_the_interrupted_run(tmp_path):
    run_dir = _saved_run(tmp_path, finished=False)
    before = _digest(run_dir)
    proc = _run(tmp_path, f"resume={run_dir}", "optim.lr=1e-4")  # a value that changes the result
    assert proc.returncode == 1 and "resume.allow_changed=[optim.lr]" in proc.stderr, proc.stderr[-3000:]
    assert _digest(run_dir) == before
    (run_dir / "checkpoints" / "last.ckpt").unlink()
    before = _digest(run_dir)
    proc = _run(tmp_path, f"resume={run_dir}")  # nothing to resume from
    assert proc.returncode == 1 and "no checkpoints/last.ckpt" in proc.stderr, proc.stderr[-3000:]
    assert _digest(run_dir) == before


def test_a_directory_in_use_keeps_its_record(tmp_path):
    run_dir = _saved_run(tmp_path, finished=False)
    holder = _hold_in_another_process(run_dir)
    try:
        before = _digest(run_dir)
        proc = _run(tmp_path)
        assert proc.returncode == 1 and "is in use by another run" in proc.stderr, proc.stderr[-3000:]
        assert _digest(run_dir) == before
    finally:
        holder.kill()
        holder.wait()
