"""Streaming corpus: sharded by DDP rank AND DataLoader worker, seeded buffered shuffle, epochs, HF-equal rows."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest
from lightning.fabric.utilities.data import _set_sampler_epoch
from torch.utils.data import DataLoader, get_worker_info

from cselab.data.unsup import StreamingSentences, UnsupDataModule


def _corpus(tmp_path: Path, n: int) -> tuple[Path, list[str]]:
    """A file of ``n`` distinct sentences with blank / whitespace-only lines in between (skipped)."""
    sents = [f"sentence number {i} of the corpus" for i in range(n)]
    lines = []
    for i, s in enumerate(sents):
        lines.append(s)
        if i % 17 == 0:
            lines.append("")
        if i % 23 == 0:
            lines.append("   \t ")
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path, sents


def _tagged(rows):
    info = get_worker_info()
    return (info.id if info else 0, [r["text"] for r in rows])


def _read(ds: StreamingSentences, workers: int, batch_size: int = 4, persistent: bool = False) -> list:
    """[(worker id, [texts])] batches of one epoch, in the DataLoader's order."""
    loader = DataLoader(ds, batch_size=batch_size, num_workers=workers, collate_fn=_tagged,
                        persistent_workers=persistent)
    return list(loader)


@pytest.mark.parametrize("n", [103, 100])
def test_two_ranks_two_workers_partition_the_corpus(tmp_path: Path, n: int) -> None:
    path, sents = _corpus(tmp_path, n)
    seen: list[str] = []
    for rank in range(2):
        ds = StreamingSentences(path, seed=7, shuffle_buffer=16, rank=rank, world_size=2, even_ranks=False)
        batches = _read(ds, workers=2)
        assert {w for w, _ in batches} == {0, 1}  # both workers of both ranks get data (one file, one "shard")
        seen += [t for _, texts in batches for t in texts]
    counts = Counter(seen)
    assert not [s for s, c in counts.items() if c > 1]  # no sentence twice
    assert set(seen) == set(sents)  # none missed
    assert len(seen) == n


def test_even_ranks_equal_batches_and_at_most_world_size_minus_one_dropped(tmp_path: Path) -> None:
    path, sents = _corpus(tmp_path, 103)
    per_rank, seen = [], []
    for rank in range(2):
        ds = StreamingSentences(path, seed=7, shuffle_buffer=16, rank=rank, world_size=2, even_ranks=True)
        batches = _read(ds, workers=2)
        per_rank.append(sorted((w, len(texts)) for w, texts in batches))
        seen += [t for _, texts in batches for t in texts]
    assert per_rank[0] == per_rank[1]  # same number of batches of the same sizes: no DDP hang at epoch end
    assert len(seen) == len(set(seen)) == 102  # 103 = 51 rounds of 2 + 1 dropped
    assert set(seen) <= set(sents)


def test_one_process_keeps_everything_and_matches_the_global_order(tmp_path: Path) -> None:
    path, sents = _corpus(tmp_path, 50)
    ds = StreamingSentences(path, seed=3, shuffle_buffer=8)
    order = [t for _, texts in _read(ds, workers=0) for t in texts]
    assert order == list(ds.ordered()) and sorted(order) == sorted(sents)
    assert order != sents  # shuffled
    # the union of 2 workers x 2 ranks, interleaved by position, IS the one-process order
    shards = {}
    for rank in range(2):
        for w, texts in _read(StreamingSentences(path, seed=3, shuffle_buffer=8, rank=rank, world_size=2,
                                                 even_ranks=False), workers=2, batch_size=1):
            shards.setdefault((rank, w), []).extend(texts)
    pos = {s: i for i, s in enumerate(order)}
    for (rank, w), texts in shards.items():
        assert all(pos[t] % 4 == w * 2 + rank for t in texts)
        assert [pos[t] for t in texts] == sorted(pos[t] for t in texts)


def test_shuffle_is_seeded_and_changes_with_the_epoch(tmp_path: Path) -> None:
    path, _ = _corpus(tmp_path, 60)
    a = StreamingSentences(path, seed=1, shuffle_buffer=10)
    b = StreamingSentences(path, seed=1, shuffle_buffer=10)
    assert list(a.ordered()) == list(b.ordered())
    assert list(a.ordered()) != list(StreamingSentences(path, seed=2, shuffle_buffer=10).ordered())
    e0 = list(a.ordered())
    a.set_epoch(1)
    assert a.epoch == 1 and list(a.ordered()) != e0 and sorted(a.ordered()) == sorted(e0)
    assert list(StreamingSentences(path, shuffle_buffer=0).ordered()) == list(a.lines())  # buffer 0: file order


def test_set_epoch_reaches_persistent_workers_through_the_datamodule(tmp_path: Path) -> None:
    path, _ = _corpus(tmp_path, 40)
    dm = UnsupDataModule(collate=_tagged, path=str(path), streaming=True, shuffle_buffer=8, batch_size=4,
                         num_workers=2, seed=5)
    dm.trainer = SimpleNamespace(global_rank=1, world_size=2)
    dm.setup("fit")
    assert isinstance(dm.train_set, StreamingSentences) and (dm.train_set.rank, dm.train_set.world_size) == (1, 2)
    loader = dm.train_dataloader()
    assert loader.persistent_workers
    epoch0 = sorted(t for _, texts in loader for t in texts)
    _set_sampler_epoch(loader, 1)  # what Lightning's fit loop calls before each epoch
    assert dm.train_set.epoch == 1
    epoch1 = [t for _, texts in loader for t in texts]
    fresh = StreamingSentences(path, seed=5, shuffle_buffer=8, rank=1, world_size=2)
    fresh.set_epoch(1)
    assert epoch1 == [t for _, texts in _read(fresh, workers=2) for t in texts]  # workers saw epoch 1
    assert sorted(epoch1) != epoch0  # rank 1's share changes with the shuffle


def test_rows_equal_the_memory_mapped_path(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    path = tmp_path / "mixed.txt"
    path.write_bytes(b"  leading spaces kept\r\nwindows line\r\n\r\nold mac\rlast line without newline")
    hf = datasets.load_dataset("text", data_files={"train": str(path)}, split="train", cache_dir=str(tmp_path / "c"))
    expected = [r["text"] for r in hf if r["text"].strip()]
    assert list(StreamingSentences(path, shuffle_buffer=0).lines()) == expected


def test_bad_rank_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="rank"):
        StreamingSentences(tmp_path / "x.txt", rank=2, world_size=2)
