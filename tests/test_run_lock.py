"""Two runs into one directory: the second is refused with the holder's pid (446911a: both wrote into it,
interleaving run.log and overwriting each other's checkpoints with no warning)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cselab.run.lock import LOCK_FILE, RunDirInUse, hold_run_dir, mark_run_dir, release_run_dir
from tests import forked

ROOT = Path(__file__).resolve().parents[1]


def _hold_in_another_process(run_dir: Path) -> subprocess.Popen:
    """Another process holding the run directory as hold_run_dir does (a flock on <run dir>/.lock, its pid inside),
    without importing cselab (fast)."""
    lock = run_dir / LOCK_FILE
    code = (f"import fcntl, os, pathlib, time; p = pathlib.Path({str(lock)!r}); p.parent.mkdir(parents=True, "
            "exist_ok=True); f = open(p, 'a+'); fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB); f.truncate(0); "
            "f.write(f'{os.getpid()}\\n'); f.flush(); print('held', flush=True); time.sleep(120)")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_process_is_refused_until_the_first_ends(tmp_path):
    run_dir = tmp_path / "outputs" / "x"
    holder = _hold_in_another_process(run_dir)
    try:
        with pytest.raises(RunDirInUse, match=rf"in use by another run \(pid {holder.pid}\).*run_name="):
            hold_run_dir(run_dir)
    finally:
        holder.kill()
        holder.wait()
    assert hold_run_dir(run_dir) == run_dir / LOCK_FILE  # the lock died with its process: no stale lock
    assert (run_dir / LOCK_FILE).read_text().strip() == str(holder.pid)  # taking it writes nothing (a refusal may follow)
    mark_run_dir(run_dir)  # the run proceeds: its pid, for the next refused process
    assert (run_dir / LOCK_FILE).read_text().strip() == str(os.getpid())
    release_run_dir(run_dir)


def test_other_ranks_take_no_lock(tmp_path, monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert hold_run_dir(tmp_path) is None and not (tmp_path / LOCK_FILE).exists()


def test_run_py_refuses_a_directory_in_use_and_leaves_it_alone(tmp_path):
    run_dir = tmp_path / "outputs" / "mine"
    holder = _hold_in_another_process(run_dir)
    try:
        proc = forked.run([sys.executable, str(ROOT / "run.py"), "run_name=mine", "trainer.max_steps=1"],
                              cwd=tmp_path, capture_output=True, text=True, timeout=300)
    finally:
        holder.kill()
        holder.wait()
    assert proc.returncode == 1 and "is in use by another run" in proc.stderr, proc.stderr[-3000:]
    assert run_dir.is_dir() and not (run_dir / "failed.json").exists()  # the other run's directory, untouched
