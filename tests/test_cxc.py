"""CxC-STS: the real score files joined with a synthetic dataset_coco.json; the Spearman bootstrap."""

from __future__ import annotations

import json
import math
import random
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.stats import spearmanr

from cselab.data.cxc import (
    CxCFormatError,
    CxCPairs,
    MissingCaptionsError,
    join_captions,
    load_coco_captions,
    load_cxc,
    parse_cxc_id,
    read_cxc_scores,
    resolve_cxc_dir,
)
from cselab.evaluation.cxc import (
    bootstrap_spearman_from_scores,
    cxc_bootstrap_spearman,
    iter_bootstrap_samples,
    query_groups,
)
from cselab.evaluation.sts import encode_pairs

CXC_CANDIDATES = [
    Path(__file__).resolve().parents[1] / "data" / "cxc",
    Path("/work/shared/data/cxc"),
]

_VOCAB = (
    "a an the man woman dog cat two three young old red blue green small large people group bus train car "
    "plate pizza table street field beach tennis player court kite sky water boat bench giraffe elephant "
    "sitting standing riding holding eating walking flying parked next to on in of with near"
).split()


def _caption(sentid: int) -> str:
    rnd = random.Random(sentid)
    return " ".join(rnd.choice(_VOCAB) for _ in range(rnd.randint(5, 9))) + " ."


@pytest.fixture(scope="module")
def cxc_dir() -> Path:
    for d in CXC_CANDIDATES:
        if (d / "sts_test.csv").is_file() and (d / "sts_val.csv").is_file():
            return d
    pytest.skip("CxC score files (sts_val.csv, sts_test.csv) not available")


@pytest.fixture(scope="module")
def coco_json(cxc_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A synthetic Karpathy ``dataset_coco.json``: every sentid of both splits (5 per image) + unrelated ones."""
    ids: set[int] = set()
    for split in ("val", "test"):
        s = read_cxc_scores(cxc_dir / f"sts_{split}.csv")
        ids |= set(s.id1) | set(s.id2)
    ordered = sorted(ids) + [10_000_000 + i for i in range(7)]  # extra captions not in CxC
    images = []
    for k in range(0, len(ordered), 5):
        chunk = ordered[k : k + 5]
        images.append(
            {
                "imgid": k // 5,
                "split": "test",
                "filename": f"COCO_val2014_{k:012d}.jpg",
                "sentids": chunk,
                "sentences": [
                    {"sentid": i, "raw": "  " + _caption(i) + " \n", "tokens": _caption(i).split()}
                    for i in chunk
                ],
            }
        )
    path = tmp_path_factory.mktemp("coco") / "dataset_coco.json"
    path.write_text(json.dumps({"images": images, "dataset": "coco"}), encoding="utf-8")
    return path


def bow_encoder(dim: int = 16, seed: int = 0):
    """A deterministic bag-of-words encoder that records its calls."""
    gen = torch.Generator().manual_seed(seed)
    table = {w: torch.randn(dim, generator=gen, dtype=torch.float64) for w in [*_VOCAB, "."]}
    calls: list[list[str]] = []

    def encode(texts: list[str]) -> torch.Tensor:
        calls.append(list(texts))
        return torch.stack(
            [sum((table[w] for w in t.split()), torch.zeros(dim, dtype=torch.float64)) for t in texts]
        )

    return encode, calls


# ------------------------------------------------------------------------------------------ data


def test_join_counts_on_the_real_files(cxc_dir: Path, coco_json: Path) -> None:
    expected = {"test": 44045, "val": 44009}
    for split, n in expected.items():
        pairs = load_cxc(coco_json, split, data_dir=cxc_dir.parent)
        assert isinstance(pairs, CxCPairs) and pairs.name == split
        assert len(pairs) == len(pairs.text1) == len(pairs.text2) == len(pairs.id2) == n
        assert len(set(pairs.id1)) == 25000  # distinct queries
        assert len(set(pairs.id1) | set(pairs.id2)) == 25000
        assert Counter(pairs.sampling_method)["c2c_cocaption"] == 25000
        assert Counter(len(g) for g in query_groups(pairs.id1)).keys() <= {1, 2, 3}
        for i in (0, 1, n // 2, n - 1):
            assert pairs.text1[i] == _caption(pairs.id1[i])  # whitespace-normalised raw caption
            assert pairs.text2[i] == _caption(pairs.id2[i])
        assert all(0.0 <= y <= 5.0 for y in pairs.scores)
    first = read_cxc_scores(cxc_dir / "sts_test.csv")
    assert (first.id1[0], first.id2[0], first.scores[0], first.sampling_method[0]) == (
        411553,
        5142,
        1.56,
        "c2c_isim",
    )
    assert resolve_cxc_dir(cxc_dir.parent) == cxc_dir
    assert resolve_cxc_dir(cxc_dir) == cxc_dir


def test_missing_caption_file_error(cxc_dir: Path, tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "dataset_coco.json"
    with pytest.raises(FileNotFoundError) as info:
        load_coco_captions(missing)
    msg = str(info.value)
    assert str(missing) in msg and "dataset_coco.json" in msg and "karpathy" in msg.lower()
    with pytest.raises(FileNotFoundError, match="dataset_coco.json"):
        load_cxc(missing, "test", data_dir=cxc_dir)
    with pytest.raises(FileNotFoundError, match="sts_test.csv"):
        load_cxc(missing, "test", data_dir=tmp_path)
    with pytest.raises(ValueError, match="unknown CxC split"):
        load_cxc(missing, "train", data_dir=cxc_dir)


def test_missing_ids_error_with_counts(cxc_dir: Path, coco_json: Path) -> None:
    scores = read_cxc_scores(cxc_dir / "sts_test.csv")
    captions = load_coco_captions(coco_json)
    gone = {scores.id1[0], scores.id2[0], scores.id1[5]}
    for i in gone:
        del captions[i]
    rows = sum(1 for a, b in zip(scores.id1, scores.id2, strict=True) if a in gone or b in gone)
    with pytest.raises(MissingCaptionsError) as info:
        join_captions(scores, captions, source="my_map.json")
    msg = str(info.value)
    assert f"3 of 25000 caption ids ({rows} of 44045 pairs)" in msg
    assert "my_map.json" in msg and f"COCO_val2014:sentid:{min(gone)}" in msg
    assert isinstance(info.value, KeyError)


def test_caption_file_layouts_and_errors(tmp_path: Path) -> None:
    coco = tmp_path / "captions_val2014.json"
    coco.write_text(json.dumps({"annotations": [{"id": 7, "image_id": 1, "caption": "A  cat.\n"}]}))
    assert load_coco_captions(coco) == {7: "A cat."}
    karpathy = tmp_path / "k.json"
    karpathy.write_text(
        json.dumps({"images": [{"sentences": [{"sentid": 1, "raw": "x"}, {"sentid": 2, "raw": "y"}]}]})
    )
    assert load_coco_captions(karpathy, sentids={2}) == {2: "y"}
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"foo": []}))
    with pytest.raises(CxCFormatError, match="bad.json.*found \\['foo'\\]"):
        load_coco_captions(bad)
    bad.write_text("{not json")
    with pytest.raises(CxCFormatError, match="not valid JSON"):
        load_coco_captions(bad)


def test_score_file_errors(tmp_path: Path) -> None:
    head = "caption1,caption2,agg_score,sampling_method\n"
    f = tmp_path / "sts_test.csv"
    f.write_text(
        head + "COCO_val2014:sentid:1,COCO_val2014:sentid:2,1.5,c2c_isim\nCOCO_val2014:1,x,2,c2c_isim\n"
    )
    with pytest.raises(CxCFormatError, match=r"sts_test.csv, line 3: expected a caption id"):
        read_cxc_scores(f)
    f.write_text(head + "COCO_val2014:sentid:1,COCO_val2014:sentid:2,high,c2c_isim\n")
    with pytest.raises(CxCFormatError, match=r"line 2: could not convert"):
        read_cxc_scores(f)
    f.write_text("a,b,c,d\n")
    with pytest.raises(CxCFormatError, match=r"line 1: expected the header"):
        read_cxc_scores(f)
    assert parse_cxc_id("COCO_val2014:sentid:42") == 42


# ------------------------------------------------------------------------------------------ bootstrap


def test_each_sample_takes_half_the_queries_and_one_item_each(cxc_dir: Path) -> None:
    scores = read_cxc_scores(cxc_dir / "sts_test.csv")
    groups = query_groups(scores.id1)
    assert len(groups) == 25000
    id1 = np.asarray(scores.id1)
    chosen_items: dict[int, set[int]] = {}
    samples = list(iter_bootstrap_samples(groups, n_samples=20, seed=123))
    assert len(samples) == 20
    for rows in samples:
        assert rows.shape == (12500,)
        assert len(set(id1[rows].tolist())) == 12500  # distinct queries: exactly one item per selected query
        assert len(set(rows.tolist())) == 12500
        for r in rows[:2000].tolist():
            chosen_items.setdefault(int(id1[r]), set()).add(r)
    # different samples select different queries, and queries with several items get different items
    assert len({tuple(sorted(s[:50].tolist())) for s in samples}) == 20
    multi = [q for q, g in zip(dict.fromkeys(scores.id1), groups, strict=True) if len(g) == 3]
    assert any(len(chosen_items.get(q, ())) > 1 for q in multi)
    # determinism
    again = list(iter_bootstrap_samples(groups, n_samples=20, seed=123))
    assert all(np.array_equal(a, b) for a, b in zip(samples, again, strict=True))
    other = next(iter_bootstrap_samples(groups, n_samples=1, seed=124))
    assert not np.array_equal(other, samples[0])


def test_items_are_drawn_uniformly() -> None:
    groups = [np.array([0]), np.array([1, 2]), np.array([3, 4, 5]), np.array([6]), np.array([7])]
    counts = Counter()
    n = 3000
    for rows in iter_bootstrap_samples(groups, n_samples=n, seed=0, query_fraction=0.4):
        assert len(rows) == 2
        counts.update(rows.tolist())
    # each query is selected with probability 2/5; each of its k items with 1/k of that
    expected = {0: 0.4, 1: 0.2, 2: 0.2, 3: 0.4 / 3, 4: 0.4 / 3, 5: 0.4 / 3, 6: 0.4, 7: 0.4}
    for r, p in expected.items():
        assert counts[r] / n == pytest.approx(p, abs=0.04)


def test_deterministic_on_the_real_pairs_and_encodes_each_caption_once(
    cxc_dir: Path, coco_json: Path
) -> None:
    pairs = load_cxc(coco_json, "test", data_dir=cxc_dir)
    encode, calls = bow_encoder()
    a = cxc_bootstrap_spearman(encode, pairs, n_samples=30, seed=123)
    assert len(calls) == 1
    assert len(calls[0]) == len(set(calls[0])) == len(set(pairs.text1) | set(pairs.text2))
    assert calls[0] == sorted(calls[0])
    b = cxc_bootstrap_spearman(bow_encoder()[0], pairs, n_samples=30, seed=123)
    assert a == b
    assert set(a) == {"mean", "std", "samples"} and len(a["samples"]) == 30
    assert a["mean"] == pytest.approx(float(np.mean(a["samples"])))
    assert a["std"] == pytest.approx(float(np.std(a["samples"])))
    assert -100.0 <= min(a["samples"]) <= max(a["samples"]) <= 100.0
    c = cxc_bootstrap_spearman(bow_encoder()[0], pairs, n_samples=30, seed=124)
    assert c["samples"] != a["samples"]
    # chunked encoding gives the same scores
    encode2, calls2 = bow_encoder()
    d = cxc_bootstrap_spearman(encode2, pairs, n_samples=30, seed=123, batch_size=4096)
    assert len(calls2) > 1 and d == a


def _direct_bootstrap(
    emb: dict[str, list[float]],
    rows: list[tuple[int, str, str, float]],
    n_samples: int,
    seed: int,
    query_fraction: float,
) -> dict:
    """The protocol written out: group by query, draw queries then items with default_rng, loop Spearman."""
    by_query: dict[int, list[int]] = {}
    for r, (q, _, _, _) in enumerate(rows):
        by_query.setdefault(q, []).append(r)
    queries = list(by_query)

    def cos(u: list[float], v: list[float]) -> float:
        return sum(a * b for a, b in zip(u, v, strict=True)) / (
            math.sqrt(sum(a * a for a in u)) * math.sqrt(sum(b * b for b in v))
        )

    rng = np.random.default_rng(seed)
    k = int(math.floor(query_fraction * len(queries)))
    out = []
    for _ in range(n_samples):
        chosen = rng.choice(len(queries), size=k, replace=False)
        picks = rng.integers(0, np.array([len(by_query[queries[c]]) for c in chosen]))
        sel = [by_query[queries[c]][int(p)] for c, p in zip(chosen, picks, strict=True)]
        system = [cos(emb[rows[r][1]], emb[rows[r][2]]) for r in sel]
        gold = [rows[r][3] for r in sel]
        out.append(100.0 * spearmanr(system, gold)[0])
    return {"mean": float(np.mean(out)), "std": float(np.std(out)), "samples": out}


def _small_case(seed: int = 7) -> tuple[CxCPairs, dict[str, list[float]]]:
    rnd = random.Random(seed)
    texts = [f"caption {i}" for i in range(30)]
    emb = {t: [rnd.gauss(0, 1) for _ in range(5)] for t in texts}
    id1, id2, text1, text2, scores = [], [], [], [], []
    used: set[frozenset[int]] = set()  # distinct unordered text pairs: no exact ties in the model scores
    for q in range(40):
        for _ in range(rnd.randint(1, 3)):
            a = q if q < 30 else rnd.randrange(30)  # queries 30-39 reuse the caption text of another query
            b = rnd.choice([x for x in range(30) if x != a and frozenset((a, x)) not in used])
            used.add(frozenset((a, b)))
            id1.append(1000 + q)
            id2.append(2000 + b)
            text1.append(texts[a])
            text2.append(texts[b])
            scores.append(round(rnd.uniform(0, 5), 2))
    rnd_order = list(range(len(id1)))
    rnd.shuffle(rnd_order)  # rows of one query need not be contiguous
    pick = lambda xs: [xs[i] for i in rnd_order]  # noqa: E731
    pairs = CxCPairs(
        pick(id1), pick(id2), pick(scores), ["c2c_isim"] * len(id1), "synthetic", pick(text1), pick(text2)
    )
    return pairs, emb


@pytest.mark.parametrize(("n_samples", "seed", "fraction"), [(1000, 123, 0.5), (50, 5, 0.25), (20, 123, 1.0)])
def test_agrees_with_a_direct_implementation(n_samples: int, seed: int, fraction: float) -> None:
    pairs, emb = _small_case()

    def encode(texts: list[str]) -> torch.Tensor:
        return torch.tensor([emb[t] for t in texts], dtype=torch.float64)

    got = cxc_bootstrap_spearman(encode, pairs, n_samples=n_samples, seed=seed, query_fraction=fraction)
    rows = list(zip(pairs.id1, pairs.text1, pairs.text2, pairs.scores, strict=True))
    want = _direct_bootstrap(emb, rows, n_samples, seed, fraction)
    assert got["samples"] == pytest.approx(want["samples"], abs=1e-9)
    assert got["mean"] == pytest.approx(want["mean"], abs=1e-9)
    assert got["std"] == pytest.approx(want["std"], abs=1e-9)


def test_one_item_per_query_and_all_queries_is_the_plain_spearman() -> None:
    rnd = np.random.default_rng(0)
    system, gold = rnd.normal(size=50), rnd.uniform(0, 5, size=50)
    out = bootstrap_spearman_from_scores(system, gold, list(range(50)), n_samples=5, query_fraction=1.0)
    full = 100.0 * spearmanr(system, gold)[0]
    assert out["samples"] == pytest.approx([full] * 5)
    assert out["std"] == pytest.approx(0.0, abs=1e-9)


def test_argument_errors() -> None:
    groups = query_groups([1, 1, 2, 3])
    with pytest.raises(ValueError, match="query_fraction"):
        next(iter_bootstrap_samples(groups, query_fraction=0.0))
    with pytest.raises(ValueError, match="n_samples"):
        next(iter_bootstrap_samples(groups, n_samples=0))
    with pytest.raises(ValueError, match="Spearman needs at least 2"):
        next(iter_bootstrap_samples(groups, query_fraction=0.5))  # floor(1.5) = 1 pair
    with pytest.raises(ValueError, match="equal length"):
        bootstrap_spearman_from_scores([0.1, 0.2], [1.0], [1, 2])
    with pytest.raises(ValueError, match="one row per sentence"):
        encode_pairs(lambda t: torch.zeros(len(t) + 1, 3), ["a"], ["b"])
    with pytest.raises(ValueError, match="differ in length"):
        encode_pairs(lambda t: torch.zeros(len(t), 3), ["a"], [])
