"""``cselab data``'s fetch decides from the transfer tasks' own folders whether senteval.tar must be fetched again
(no network: the hub download is replaced)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cselab.data import download
from cselab.data.transfer import TASK_FILES


class _WouldDownload(Exception):
    pass


@pytest.fixture
def no_hub(monkeypatch):
    calls: list[str] = []

    def fake(repo, name, repo_type):
        calls.append(name)
        raise _WouldDownload(name)

    monkeypatch.setattr("huggingface_hub.hf_hub_download", fake)
    return calls


def test_an_sst_folder_without_binary_is_fetched_again(tmp_path: Path, no_hub) -> None:
    downstream = tmp_path / "senteval" / "downstream"
    for folder in ("MR", "CR", "SUBJ", "MPQA", "SST", "TREC", "MRPC"):  # SST/binary missing
        (downstream / folder).mkdir(parents=True)
    with pytest.raises(_WouldDownload):
        download.fetch(tmp_path, ["transfer"])
    assert no_hub == ["senteval.tar"]


def test_present_transfer_folders_are_checked_not_fetched(sts_data_dir: Path, no_hub, capsys) -> None:
    if not all((sts_data_dir / "senteval" / "downstream" / f).is_dir() for f, _ in TASK_FILES.values()):
        pytest.skip("the SentEval transfer sets are not in the data directory")
    download.fetch(sts_data_dir, ["transfer"])
    assert no_hub == []
    assert "line counts checked" in capsys.readouterr().out
