"""Bad input gets a clear error (naming the file / key and what was expected) or is skipped and counted."""

from __future__ import annotations

from pathlib import Path

import pytest

from cselab.data.nli import NLIDataModule
from cselab.data.unsup import StreamingSentences, UnsupDataModule


def _collate(rows):
    return rows


def test_nli_rows_with_missing_cells_are_skipped_and_counted(tmp_path):
    path = tmp_path / "nli.csv"
    path.write_text("sent0,sent1,hard_neg\na man plays,a man plays music,nobody plays\nd,,f\n,x,y\ng,h,i\n")
    dm = NLIDataModule(_collate, path=str(path), batch_size=2)
    dm.setup("fit")
    assert dm.skipped_rows == 2 and len(dm.train_set) == 2
    assert dm.train_set[0] == {"sent0": "a man plays", "sent1": "a man plays music", "hard_neg": "nobody plays"}


def test_nli_wrong_header_names_file_and_columns(tmp_path):
    path = tmp_path / "nli.csv"
    path.write_text("premise,hypothesis\na,b\n")
    with pytest.raises(ValueError, match=r"nli.csv: expected the header sent0,sent1,hard_neg .* missing"):
        NLIDataModule(_collate, path=str(path), batch_size=2).setup("fit")


def test_missing_corpus_names_path_key_and_command(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"data.path.*make data.*cselab.data.download"):
        NLIDataModule(_collate, path=str(tmp_path / "none.csv"), batch_size=2).setup("fit")


def test_batch_size_below_two_is_refused():
    with pytest.raises(ValueError, match="data.batch_size must be >= 2"):
        NLIDataModule(_collate, path="x.csv", batch_size=1)


def test_unreadable_corpus_names_path_and_fix(tmp_path, monkeypatch):
    import os

    path = tmp_path / "corpus.txt"
    path.write_text("a sentence\n")
    real_access = os.access
    # chmod 0 does not stop root (CI may run as root): make this file unreadable to the check itself
    monkeypatch.setattr(os, "access", lambda p, mode: False if str(p) == str(path) else real_access(p, mode))
    with pytest.raises(PermissionError, match=r"corpus.txt \(config key data.path\) exists but is not readable"):
        UnsupDataModule(_collate, path=str(path), batch_size=2).setup("fit")


CORPUS_BYTES = (
    b"a man plays a guitar\n"
    b"\n"
    b"   \t \n"
    b"caf\xe9 au lait in latin-1\n"  # not UTF-8
    b"the cat sat on the mat\n"
    b"two dogs \xff\xfe run\n"  # not UTF-8
    b"it is raining today\n"
)


def test_corpus_with_empty_lines_and_non_utf8_bytes_is_skipped_and_counted(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_bytes(CORPUS_BYTES)
    dm = UnsupDataModule(_collate, path=str(path), batch_size=2)
    dm.setup("fit")
    assert dm.skipped_lines == 2 and dm.skipped_undecodable == 2
    assert list(dm.train_set["text"]) == ["a man plays a guitar", "the cat sat on the mat", "it is raining today"]


def test_streamed_corpus_skips_the_same_lines(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_bytes(CORPUS_BYTES)
    rows = [r["text"] for r in StreamingSentences(path, shuffle_buffer=0)]
    assert rows == ["a man plays a guitar", "the cat sat on the mat", "it is raining today"]


def test_corpus_with_no_usable_line_is_refused(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_bytes(b"\n \n\xe9t\xe9\n")
    with pytest.raises(ValueError, match=r"corpus.txt \(data.path\): no usable sentence"):
        UnsupDataModule(_collate, path=str(path), batch_size=2).setup("fit")


def test_nli_rows_with_non_utf8_bytes_are_skipped_and_counted(tmp_path):
    path = tmp_path / "nli.csv"
    path.write_bytes(b"sent0,sent1,hard_neg\na man plays,a man plays music,nobody plays\nd\xe9,e,f\ng,h,i\n")
    dm = NLIDataModule(_collate, path=str(path), batch_size=2)
    dm.setup("fit")
    assert dm.skipped_undecodable == 1 and len(dm.train_set) == 2


def test_missing_training_file_is_refused_before_the_backbone_loads(tmp_path):
    from hydra import compose, initialize_config_dir

    import cselab.config  # noqa: F401
    from cselab.pipeline import check_data_files

    conf = str(Path(__file__).resolve().parents[1] / "conf")
    with initialize_config_dir(config_dir=conf, version_base="1.3"):
        cfg = compose(config_name="config", overrides=[f"data.path={tmp_path}/none.txt"])
    with pytest.raises(FileNotFoundError, match=r"unsup corpus not found at .*none.txt \(config key data.path\)"):
        check_data_files(cfg)
