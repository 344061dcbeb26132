"""Bad input gets a clear error (naming the file / key and what was expected) or is skipped and counted."""

from __future__ import annotations

import pytest

from cselab.data.nli import NLIDataModule


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
