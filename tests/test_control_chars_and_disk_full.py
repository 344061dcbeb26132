"""A corpus of valid UTF-8 control characters is refused before the backbone loads; a write that fails on a full
disk is recorded as such in ``failed.json`` (the path and the free space), torch's ``unexpected pos`` included."""

from __future__ import annotations

import errno
import json
import random
import shutil
from collections import namedtuple
from pathlib import Path

import pytest
import torch

from cselab.data.checks import check_corpus, check_nli, scan_lines
from cselab.io.files import DiskFullError, atomic_write_text

TORCH_WRITER = "[enforce fail at inline_container.cc:672] . unexpected pos 5248 vs 5146"


def _control_corpus(path: Path, lines: int = 200) -> Path:
    rng = random.Random(0)
    text = "".join("".join(chr(rng.choice([0, 1, 2, 3, 7, 8, 0x1b, 0x7f])) for _ in range(rng.randint(5, 40)))
                   + "\n" for _ in range(lines))
    path.write_text(text, encoding="utf-8")
    path.read_bytes().decode("utf-8")  # valid UTF-8 throughout
    return path


def test_a_corpus_of_control_characters_is_refused_naming_the_key_and_counts(tmp_path):
    path = _control_corpus(tmp_path / "nul.txt")
    stats = scan_lines(path)
    assert stats.undecodable == 0 and stats.control == 200
    with pytest.raises(ValueError, match=r"nul.txt \(config key data.path, unsup corpus\): 200 of 200 non-empty "
                                         r"UTF-8 lines are mostly control characters such as NUL \(100.0%, above "
                                         r"data.max_control_share=0.01\)"):
        check_corpus(path)
    check_corpus(path, max_control_share=1.0)  # the threshold is the key's


def test_a_few_control_characters_pass(tmp_path):
    """Sentences with a stray control character are text; one control line in 200 is under 1%."""
    path = tmp_path / "ok.txt"
    lines = [f"sentence {i} has a stray\x07 bell and a NUL\x00 inside" for i in range(199)] + ["\x00\x00\x00\x00"]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    stats = check_corpus(path)
    assert stats.control == 1 and stats.usable == 200


def test_an_nli_csv_of_control_characters_is_refused(tmp_path):
    path = tmp_path / "nli.csv"
    path.write_text("sent0,sent1,hard_neg\n" + "\x00\x01\x02,\x00\x00\x03,\x7f\x7f\x08\n" * 20, encoding="utf-8")
    with pytest.raises(ValueError, match=r"NLI triplets csv\): 20 of 20 non-empty UTF-8 lines are mostly control"):
        check_nli(path)


def test_a_control_character_corpus_stops_the_run_before_the_backbone_loads(tmp_path, sts_data_dir, monkeypatch):
    from hydra import compose, initialize_config_dir

    import cselab.io.config  # noqa: F401
    import cselab.run.assemble
    from tests.conftest import run

    monkeypatch.setattr(cselab.run.assemble, "build_method", lambda *a, **k: pytest.fail("the backbone was loaded"))
    path = _control_corpus(tmp_path / "nul.txt")
    with initialize_config_dir(config_dir=str(Path(__file__).resolve().parents[1] / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=["method=simcse", f"data.path={path}", f"data_dir={sts_data_dir}"])
    with pytest.raises(ValueError, match="data.max_control_share=0.01"):
        run(cfg, tmp_path / "run")


# ------------------------------------------------------------------------------------------------ a full disk


def _enospc() -> OSError:
    return OSError(errno.ENOSPC, "No space left on device")


def _torch_full_disk(obj, f, *args, **kwargs):
    """torch.save on a full disk: the file write raises ENOSPC, then torch's writer raises `unexpected pos`."""
    f.write(b"\0" * 2**16)
    try:
        raise _enospc()
    except OSError:
        raise RuntimeError(TORCH_WRITER)  # noqa: B904  (the OSError stays its __context__, as in torch)


@pytest.mark.integration
def test_a_disk_full_checkpoint_write_is_recorded_with_path_and_free_space(tmp_path, tiny_bert_dir, sts_data_dir,
                                                                          monkeypatch):
    """A real run whose first checkpoint write gets torch's `unexpected pos` (ENOSPC in its context): the run
    fails with DiskFullError and failed.json names the cause, the checkpoint path and the free space."""
    from cselab.run.failure import record_failure
    from tests.conftest import compose_tiny_run, run

    cfg = compose_tiny_run(tmp_path, tiny_bert_dir, sts_data_dir, "eval.test_tasks=[stsb]")
    out = tmp_path / "run"
    monkeypatch.setattr(torch, "save", _torch_full_disk)
    with pytest.raises(DiskFullError) as caught:
        run(cfg, out)
    assert isinstance(caught.value.__cause__, RuntimeError) and "unexpected pos" in str(caught.value.__cause__)
    assert record_failure(out, caught.value) == out / "failed.json"
    failed = json.loads((out / "failed.json").read_text())
    print(json.dumps({k: v for k, v in failed.items() if k != "traceback"}, indent=1))
    assert failed["cause"] == "disk full" and failed["error"] == "DiskFullError"
    assert failed["path"].startswith(str(out / "checkpoints")) and failed["path"].endswith(".ckpt")
    assert isinstance(failed["free_bytes"], int) and failed["free_bytes"] > 0  # this disk is not really full
    assert failed["message"].startswith("No space left on device: writing " + failed["path"])
    assert "free on its filesystem" in failed["message"]


def test_torch_writer_failure_without_errno_is_disk_full_only_when_the_disk_is_nearly_full(tmp_path, monkeypatch):
    import cselab.io.files

    def writer_fails(obj, f, *args, **kwargs):
        f.write(b"\0" * 1024)
        raise RuntimeError(TORCH_WRITER)

    from cselab.run.checkpoints import AtomicCheckpointIO

    monkeypatch.setattr(torch, "save", writer_fails)
    with pytest.raises(RuntimeError, match="unexpected pos") as plain:  # plenty of space: left as it is
        AtomicCheckpointIO().save_checkpoint({"global_step": 1}, tmp_path / "a.ckpt")
    assert not isinstance(plain.value, DiskFullError)
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(cselab.io.files.shutil, "disk_usage", lambda p: usage(10 * 2**30, 10 * 2**30 - 4096, 4096))
    with pytest.raises(DiskFullError, match=r"writing .*b.ckpt failed with 4.0 KiB free") as full:
        AtomicCheckpointIO().save_checkpoint({"global_step": 1}, tmp_path / "b.ckpt")
    assert full.value.errno == errno.ENOSPC and full.value.free_bytes == 4096
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no checkpoint, no temporary file


def test_results_json_on_a_full_disk_is_a_disk_full_record(tmp_path, monkeypatch):
    """A text output (results.json) hitting ENOSPC: DiskFullError names the file; failed.json, written once
    space is back, has the cause, the path and the free space."""
    from cselab.run.failure import record_failure

    real_fsync = __import__("os").fsync

    def full(fd):
        raise _enospc()

    monkeypatch.setattr("os.fsync", full)
    with pytest.raises(DiskFullError) as caught:
        atomic_write_text(tmp_path / "results.json", "{}")
    monkeypatch.setattr("os.fsync", real_fsync)
    record_failure(tmp_path, caught.value)
    failed = json.loads((tmp_path / "failed.json").read_text())
    assert failed["cause"] == "disk full" and failed["path"] == str(tmp_path / "results.json")
    assert isinstance(failed["free_bytes"], int)


def test_an_enospc_outside_the_staged_writers_is_recorded_too(tmp_path):
    from cselab.run.failure import record_failure

    try:
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "csv" / "metrics.csv"))
    except OSError as err:
        record_failure(tmp_path, err)
    failed = json.loads((tmp_path / "failed.json").read_text())
    assert failed["cause"] == "disk full" and failed["path"].endswith("metrics.csv")
    assert abs(failed["free_bytes"] - shutil.disk_usage(tmp_path).free) < 2**30  # measured when recorded
    try:
        raise ValueError("not a disk problem")
    except ValueError as err:
        record_failure(tmp_path, err)
    assert "cause" not in json.loads((tmp_path / "failed.json").read_text())
