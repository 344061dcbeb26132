"""The supervised NLI triplets (``nli_for_simcse.csv``: ``sent0,sent1,hard_neg``) as a LightningDataModule."""

from __future__ import annotations

from collections.abc import Callable

from torch.utils.data import DataLoader

from cselab.data.datamodule import SentenceDataModule
from cselab.data.paths import UNDECODABLE, data_root, require

NLI_COLUMNS = ("sent0", "sent1", "hard_neg")


def check_header(header: list[str], where: str, found: object = None) -> None:
    """Refuse ``header`` unless it holds sent0, sent1 and hard_neg: a ValueError naming ``where``, the header
    found (``found`` when given) and the missing columns."""
    if missing := [c for c in NLI_COLUMNS if c not in header]:
        raise ValueError(f"{where}: expected the header sent0,sent1,hard_neg (SimCSE's nli_for_simcse.csv), "
                         f"found {header if found is None else found}; missing {missing}")


class NLIDataModule(SentenceDataModule):
    """Premise, entailment and contradiction hypotheses; rows are ``{"sent0", "sent1", "hard_neg"}``.

    Args:
        path: the csv, relative to ``data_dir`` unless absolute (config ``data.path``).
        data_dir: the data directory.
        **kwargs: :class:`SentenceDataModule` arguments.

    Raises:
        FileNotFoundError: missing file (path, config key, command to get it).
        ValueError: the header lacks one of ``sent0,sent1,hard_neg`` (names the file and the header found), or
            no row is complete.  Rows with an empty or missing cell are skipped and counted (``skipped_rows``),
            and so are rows with bytes that are not UTF-8 (``skipped_undecodable``).
    """

    def __init__(self, collate: Callable, path: str = "nli_for_simcse.csv", data_dir: str | None = None, **kwargs):
        super().__init__(collate, **kwargs)
        self.path = path if path.startswith("/") else str(data_root(data_dir) / path)
        self.skipped_rows = 0
        self.skipped_undecodable = 0

    def setup(self, stage: str | None = None) -> None:
        if stage not in (None, "fit") or self.train_set is not None:
            return
        import datasets

        require(self.path, "NLI triplets csv", "data.path")
        ds = datasets.load_dataset("csv", data_files={"train": self.path}, split="train", encoding_errors="replace")
        check_header(ds.column_names, self.path)
        ds = ds.select_columns(list(NLI_COLUMNS))
        ds, self.skipped_rows = self._skip(
            ds, lambda row: all(isinstance(row[c], str) and row[c].strip() for c in NLI_COLUMNS),
            f"of {len(ds)} rows with an empty or missing sent0 / sent1 / hard_neg")
        ds, self.skipped_undecodable = self._skip(ds, lambda row: not any(UNDECODABLE in row[c] for c in NLI_COLUMNS),
                                                  "rows with bytes that are not UTF-8")
        if len(ds) == 0:
            raise ValueError(f"{self.path}: no complete sent0,sent1,hard_neg row")
        self.train_set = self._prepared(ds)

    def train_dataloader(self) -> DataLoader:
        return self._loader(self.train_set, shuffle=True)
