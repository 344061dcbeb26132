"""Fault injection: a training process killed with SIGKILL at a random step and resumed ends where an
uninterrupted run ends (same dev curve, same best checkpoint score, same test table), on CPU in deterministic mode.

Also: the data position of a map-style corpus and of the streamed corpus resumes mid-epoch exactly, and
``ckpt_path=auto`` (a requeued job in the same run directory) finds the checkpoint.
"""

from __future__ import annotations

import csv
import json
import os
import random
import signal
import sys
import time
from pathlib import Path

import pytest
import torch

from cselab.data.resume import DataPosition, ResumableSampler
from cselab.data.unsup import StreamingSentences
from cselab.run.resume import resolve_ckpt_path
from tests import forked

ROOT = Path(__file__).resolve().parents[1]
WORDS = "a man is playing the guitar cat sat on mat two dogs are running in park woman slicing onion".split()


def _corpus(path: Path, n: int = 44) -> Path:
    rng = random.Random(0)
    path.write_text("\n".join(" ".join(rng.choices(WORDS, k=rng.randint(3, 9))) for _ in range(n)) + "\n")
    return path


def _command(run_dir: Path, tiny_bert_dir: Path, corpus: Path, *extra: str) -> list[str]:
    return [
        sys.executable, str(ROOT / "run.py"), "method=simcse", f"backbone.name_or_path={tiny_bert_dir}",
        f"data.path={corpus}", "data.batch_size=8", "trainer.max_epochs=20", "trainer.max_steps=16",
        "trainer.val_check_interval=4", "checkpointing.save_every_n_steps=1", "trainer.deterministic=true",
        "trainer.enable_progress_bar=false", "eval.test_tasks=[stsb,sickr]", f"hydra.run.dir={run_dir}", *extra,
    ]


def _env(data_dir: Path) -> dict[str, str]:
    return {**os.environ, "CSELAB_DATA_DIR": str(data_dir), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}


def _step_of(ckpt: Path) -> int | None:
    try:
        return int(torch.load(ckpt, map_location="cpu", weights_only=False)["global_step"])
    except Exception:  # not written yet (the write itself is atomic, so never half a file)
        return None


@pytest.mark.integration
def test_sigkill_at_a_random_step_then_resume_matches_an_uninterrupted_run(tmp_path, tiny_bert_dir, sts_data_dir):
    corpus = _corpus(tmp_path / "corpus.txt")  # 44 sentences, batch 8: 6 batches an epoch, 16 steps = 3 epochs
    kill_at = int(os.environ.get("CSELAB_KILL_STEP", random.Random().randrange(2, 13)))

    straight = forked.run(_command(tmp_path / "straight", tiny_bert_dir, corpus), cwd=ROOT, env=_env(sts_data_dir),
                              capture_output=True, text=True, timeout=900)
    assert straight.returncode == 0, straight.stderr[-4000:]

    run_dir = tmp_path / "killed"
    last = run_dir / "checkpoints" / "last.ckpt"
    with forked.Popen(_command(run_dir, tiny_bert_dir, corpus), cwd=ROOT, env=_env(sts_data_dir)) as proc:
        deadline = time.time() + 600
        while proc.poll() is None and time.time() < deadline:
            step = _step_of(last) if last.exists() else None
            if step is not None and step >= kill_at:
                os.kill(proc.pid, signal.SIGKILL)
                break
            time.sleep(0.05)
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL, f"the run ended before the kill at step {kill_at}"
    assert not (run_dir / "results.json").exists()
    killed_step = _step_of(last)
    assert killed_step is not None and 1 <= killed_step < 16

    resumed = forked.run(_command(run_dir, tiny_bert_dir, corpus, "ckpt_path=auto"), cwd=ROOT, env=_env(sts_data_dir),
                             capture_output=True, text=True, timeout=900)
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    assert "not resumable" not in resumed.stderr  # Lightning's mid-epoch warning

    a = json.loads((tmp_path / "straight" / "results.json").read_text())
    b = json.loads((run_dir / "results.json").read_text())
    print(f"killed at step {killed_step} (asked {kill_at}); uninterrupted test {a['test']}; resumed {b['test']}")
    assert b["global_step"] == a["global_step"] == 16
    assert [p["step"] for p in b["val_curve"]] == [p["step"] for p in a["val_curve"]] == [4, 8, 12, 16]
    for pa, pb in zip(a["val_curve"], b["val_curve"], strict=True):
        assert pb["stsb_dev"] == pytest.approx(pa["stsb_dev"], abs=1e-6), (killed_step, a["val_curve"], b["val_curve"])
    assert b["best_dev"] == pytest.approx(a["best_dev"], abs=1e-6)
    assert Path(b["best_checkpoint"]).name == Path(a["best_checkpoint"]).name
    for task, value in a["test"].items():
        assert b["test"][task] == pytest.approx(value, abs=1e-6), (killed_step, task)


def _default_command(tiny_bert_dir: Path, corpus: Path) -> list[str]:
    """A run with the default checkpoint settings: no save_every_n_steps, no ckpt_path, no hydra.run.dir."""
    return [
        sys.executable, str(ROOT / "run.py"), "method=simcse", f"backbone.name_or_path={tiny_bert_dir}",
        f"data.path={corpus}", "data.batch_size=8", "trainer.max_epochs=3", "trainer.max_steps=12",
        "trainer.val_check_interval=4",
        "trainer.deterministic=true", "trainer.enable_progress_bar=false", "eval.test_tasks=[stsb,sickr]",
    ]


@pytest.mark.integration
def test_sigkill_after_the_first_validation_and_the_same_command_resumes(tmp_path, tiny_bert_dir, sts_data_dir):
    """Default settings: the first validation writes last.ckpt, and re-running the very same command (same
    working directory, so the same outputs/<run_name>) resumes from it and ends as an uninterrupted run."""
    corpus = _corpus(tmp_path / "corpus.txt")
    command = _default_command(tiny_bert_dir, corpus)
    (tmp_path / "straight").mkdir()
    straight = forked.run(command, cwd=tmp_path / "straight", env=_env(sts_data_dir), capture_output=True,
                              text=True, timeout=900)
    assert straight.returncode == 0, straight.stderr[-4000:]
    [straight_dir] = (tmp_path / "straight" / "outputs").iterdir()

    cwd = tmp_path / "killed"
    cwd.mkdir()
    killed_step = None
    with forked.Popen(command, cwd=cwd, env=_env(sts_data_dir)) as proc:
        deadline = time.time() + 600
        while proc.poll() is None and time.time() < deadline:
            found = list(cwd.glob("outputs/*/checkpoints/last.ckpt"))
            killed_step = _step_of(found[0]) if found else None
            if killed_step is not None:
                os.kill(proc.pid, signal.SIGKILL)
                break
            time.sleep(0.05)
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL, "the run ended before its first validation wrote last.ckpt"
    [run_dir] = (cwd / "outputs").iterdir()
    assert run_dir.name == straight_dir.name  # the name comes from the command, not the time
    assert killed_step == _step_of(run_dir / "checkpoints" / "last.ckpt") == 4  # the first validation's
    assert not (run_dir / "results.json").exists()
    saved = torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    elapsed_at_kill = saved["callbacks"]["STSCallback"]["elapsed_s"]  # the run's time up to that checkpoint
    assert elapsed_at_kill > 0

    resumed = forked.run(command, cwd=cwd, env=_env(sts_data_dir), capture_output=True, text=True, timeout=900)
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    console = resumed.stdout + resumed.stderr
    assert f"ckpt_path=auto: resuming from {run_dir / 'checkpoints' / 'last.ckpt'}" in console
    a = json.loads((straight_dir / "results.json").read_text())
    b = json.loads((run_dir / "results.json").read_text())
    assert b["global_step"] == a["global_step"] == 12
    assert [p["step"] for p in b["val_curve"]] == [p["step"] for p in a["val_curve"]] == [4, 8, 12]
    for pa, pb in zip(a["val_curve"], b["val_curve"], strict=True):
        assert pb["stsb_dev"] == pytest.approx(pa["stsb_dev"], abs=1e-6)
    assert b["best_dev"] == pytest.approx(a["best_dev"], abs=1e-6)
    assert Path(b["best_checkpoint"]).name == Path(a["best_checkpoint"]).name
    assert b["wall_time_s"] > elapsed_at_kill  # the whole run's time, not only the resumed part
    assert b["test"].keys() == a["test"].keys()
    for task, value in a["test"].items():
        assert b["test"][task] == pytest.approx(value, abs=1e-6), task
    # the CSV keeps the killed process's rows up to the checkpoint: the same dev curve as the uninterrupted run
    resumed_curve, straight_curve = _csv_dev_curve(run_dir), _csv_dev_curve(straight_dir)
    assert [step for step, _ in resumed_curve] == [step for step, _ in straight_curve] == [4, 8, 12]
    assert [v for _, v in resumed_curve] == pytest.approx([v for _, v in straight_curve], abs=1e-6)

    again = forked.run(command, cwd=cwd, env=_env(sts_data_dir), capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stderr[-4000:]  # finished: skipped, said once, results untouched
    assert (again.stdout + again.stderr).count("already finished") == 1
    assert json.loads((run_dir / "results.json").read_text()) == b


def _csv_dev_curve(run_dir: Path) -> list[tuple[int, float]]:
    with open(run_dir / "csv" / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    return [(int(r["step"]), float(r["val/stsb_spearman"])) for r in rows if r.get("val/stsb_spearman")]


def test_sampler_resumes_mid_epoch_and_only_in_that_epoch():
    data = list(range(23))
    full = ResumableSampler(data, seed=7)
    full.set_epoch(2)
    order = list(full)
    sampler = ResumableSampler(data, seed=7)
    sampler.resume(DataPosition(epoch=2, batches=3, batch_size=4, world_size=1))
    sampler.set_epoch(2)
    assert list(sampler) == order[12:]
    sampler.set_epoch(3)  # the next epoch is whole again
    assert len(list(sampler)) == 23
    other = ResumableSampler(data, seed=7)
    other.resume(DataPosition(epoch=1, batches=3, batch_size=4, world_size=1))
    other.set_epoch(2)  # Lightning already moved past the saved epoch: nothing skipped
    assert list(other) == order


@pytest.mark.parametrize("num_workers", [0, 2])
def test_streamed_corpus_resumes_mid_epoch(tmp_path, num_workers):
    from torch.utils.data import DataLoader

    path = tmp_path / "c.txt"
    path.write_text("".join(f"sentence {i}\n" for i in range(50)))

    def batches(ds):
        loader = DataLoader(ds, batch_size=4, num_workers=num_workers, collate_fn=lambda r: [x["text"] for x in r])
        return list(loader)

    ds = StreamingSentences(path, seed=3, shuffle_buffer=8)
    ds.set_epoch(1)
    whole = batches(ds)
    resumed = StreamingSentences(path, seed=3, shuffle_buffer=8)
    resumed.set_epoch(1)
    resumed.resume(DataPosition(epoch=1, batches=5, batch_size=4, world_size=1), num_workers=num_workers)
    assert batches(resumed) == whole[5:]


def test_position_from_another_batch_size_is_refused():
    with pytest.raises(ValueError, match="data.batch_size=8 on 1 rank"):
        DataPosition(epoch=0, batches=2, batch_size=8, world_size=1).check(batch_size=16, world_size=1)
    with pytest.raises(ValueError, match="malformed data position"):
        DataPosition.from_dict({"epoch": 0})


def test_ckpt_path_auto(tmp_path):
    assert resolve_ckpt_path("auto", tmp_path) is None  # nothing yet: from scratch
    (tmp_path / "checkpoints").mkdir()
    last = tmp_path / "checkpoints" / "last.ckpt"
    last.write_bytes(b"x")
    assert resolve_ckpt_path("auto", tmp_path) == str(last)
    time.sleep(0.01)
    hpc = tmp_path / "hpc_ckpt_3.ckpt"
    hpc.write_bytes(b"x")
    os.utime(hpc, (time.time() + 5, time.time() + 5))
    assert resolve_ckpt_path("auto", tmp_path) == str(hpc)  # the newer one (a SLURM requeue's)
    assert resolve_ckpt_path("last", tmp_path) == "last"
    with pytest.raises(FileNotFoundError, match="ckpt_path=/nope.ckpt"):
        resolve_ckpt_path("/nope.ckpt", tmp_path)


def test_each_rank_resumes_its_own_shard():
    data = list(range(30))
    for rank in (0, 1):
        full = ResumableSampler(data, num_replicas=2, rank=rank, seed=5)
        full.set_epoch(0)
        order = list(full)
        assert len(order) == 15
        resumed = ResumableSampler(data, num_replicas=2, rank=rank, seed=5)
        resumed.resume(DataPosition(epoch=0, batches=2, batch_size=4, world_size=2))
        resumed.set_epoch(0)
        assert list(resumed) == order[8:]
    a, b = (ResumableSampler(data, num_replicas=2, rank=r, seed=5) for r in (0, 1))
    assert not set(a) & set(b) and set(a) | set(b) == set(data)  # the shards partition the data


def test_csv_rows_after_the_resumed_checkpoint_are_dropped_and_a_fresh_run_starts_empty(tmp_path):
    from cselab.run.loggers import keep_csv_rows

    path = tmp_path / "metrics.csv"
    path.write_text("step,train/loss,val/stsb_spearman\n0,,\n4,1.5,\n4,,60.0\n6,1.2,\n8,,61.0\n")
    assert keep_csv_rows(path, 4) == ["step", "train/loss", "val/stsb_spearman"]
    assert [r["step"] for r in csv.DictReader(path.open())] == ["0", "4", "4"]
    assert keep_csv_rows(path, None) == [] and not path.exists()
    assert keep_csv_rows(tmp_path / "absent.csv", 3) == []


def test_a_resumed_run_continues_its_wandb_run_id_and_a_fresh_run_gets_a_new_one(tmp_path):
    pytest.importorskip("wandb")
    from cselab.run.loggers import WANDB_ID_FILE, wandb_run_id

    first = wandb_run_id(tmp_path, resuming=False)
    assert (tmp_path / WANDB_ID_FILE).read_text().strip() == first
    assert wandb_run_id(tmp_path, resuming=True) == first
    fresh = wandb_run_id(tmp_path, resuming=False)  # overwrite=true / no checkpoint: a new W&B run
    assert fresh != first and wandb_run_id(tmp_path, resuming=True) == fresh
