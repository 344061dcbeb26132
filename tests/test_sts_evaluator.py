"""Tests of cselab.evaluation.sts: Spearman, cosine, aggregation, encode-once, validation, table."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.stats import spearmanr

from cselab.evaluation.sts import (
    PAPER_NAMES,
    TEST_TASKS,
    STSEvaluator,
    cosine_scores,
    format_table,
    spearman,
)

# ----------------------------------------------------------------------------------------- spearman


def _average_ranks(values: list[float]) -> list[float]:
    """Independent ranking: 1-based ranks, tied values get the mean of the ranks they span."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        avg = (i + 1 + j + 1) / 2.0
        for k in range(i, j + 1):
            ranks[order[k]] = avg
        i = j + 1
    return ranks


def _pearson(x: list[float], y: list[float]) -> float:
    n = len(x)
    mx, my = sum(x) / n, sum(y) / n
    sxy = sum((a - mx) * (b - my) for a, b in zip(x, y, strict=True))
    sxx = sum((a - mx) ** 2 for a in x)
    syy = sum((b - my) ** 2 for b in y)
    return sxy / math.sqrt(sxx * syy)


def test_average_ranks_helper() -> None:
    assert _average_ranks([10, 20, 10, 30, 20, 20]) == [1.5, 4.0, 1.5, 6.0, 4.0, 4.0]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_spearman_matches_scipy_and_hand_ranks_with_ties(seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 5, size=300).astype(float)  # heavy ties
    y = (x + rng.integers(0, 4, size=300)).astype(float)  # heavy ties, correlated
    got = spearman(x, y)
    assert isinstance(got, float)
    assert got == pytest.approx(float(spearmanr(x, y)[0]), abs=1e-12)
    hand = _pearson(_average_ranks(list(x)), _average_ranks(list(y)))
    assert got == pytest.approx(hand, abs=1e-12)
    # accepts tensors and lists the same way
    assert spearman(torch.tensor(x), list(y)) == pytest.approx(got, abs=1e-12)


def test_spearman_exact_small_case() -> None:
    # ranks 1..5 vs 1,3,2,5,4: sum d^2 = 4 -> 1 - 6*4/(5*24) = 0.8
    assert spearman([1, 2, 3, 4, 5], [1, 3, 2, 5, 4]) == pytest.approx(0.8, abs=1e-12)


def test_spearman_validation() -> None:
    with pytest.raises(ValueError, match="same length"):
        spearman([1, 2, 3], [1, 2])
    with pytest.raises(ValueError, match="at least 2"):
        spearman([1], [1])
    with pytest.raises(ValueError, match="1-D"):
        spearman([[1, 2]], [[1, 2]])


# ----------------------------------------------------------------------------------------- cosine


def test_cosine_scores_float64_and_nan_handling() -> None:
    a = torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, 0.0], [float("nan"), 1.0]], dtype=torch.float32)
    b = torch.tensor([[0.0, 1.0], [2.0, 2.0], [1.0, 0.0], [3.0, 4.0]], dtype=torch.float32)
    c = cosine_scores(a, b)
    assert c.dtype == torch.float64 and c.shape == (4,)
    assert c.tolist() == pytest.approx([0.0, 1.0, 0.0, 0.8], abs=1e-12)  # zero vector -> 0, NaN -> 0


def test_cosine_scores_matches_senteval_formula() -> None:
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(20, 7, generator=g), torch.randn(20, 7, generator=g)
    want = []
    for u, v in zip(a.double().numpy(), b.double().numpy(), strict=True):
        want.append(np.dot(u, v) / (np.sqrt(np.dot(u, u)) * np.sqrt(np.dot(v, v))))
    assert cosine_scores(a, b).numpy() == pytest.approx(np.array(want), abs=1e-12)


def test_cosine_scores_shape_check() -> None:
    with pytest.raises(ValueError, match="same shape"):
        cosine_scores(torch.zeros(3, 2), torch.zeros(2, 2))
    with pytest.raises(ValueError, match="2-D"):
        cosine_scores(torch.zeros(3), torch.zeros(3))


# ----------------------------------------------------------------------------------------- synthetic tasks
# Every pair is ("q", "p <c>"); the fake encoder maps "q" -> [1, 0] and "p <c>" -> [c, sqrt(1 - c^2)],
# so the cosine of a pair is exactly c.

SUBSET_A = {"c": [0.1, 0.2, 0.3], "gold": [1.0, 2.0, 3.0]}  # rho = 1
SUBSET_B = {"c": [0.4, 0.5, 0.6, 0.7], "gold": [3.9, 3.8, 3.7, 3.6]}  # rho = -1
SUBSET_C = {"c": [0.8, 0.85, 0.9, 0.95, 0.99], "gold": [4.0, 4.2, 4.1, 4.4, 4.3]}  # rho = 0.8


def _fake_vec(sentence: str) -> list[float]:
    if sentence == "q":
        return [1.0, 0.0]
    tag, c = sentence.split()
    assert tag == "p", sentence
    c = float(c)
    return [c, math.sqrt(1.0 - c * c)]


class CountingEncoder:
    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def __call__(self, sentences: list[str]) -> torch.Tensor:
        self.calls.append(list(sentences))
        return torch.tensor([_fake_vec(s) for s in sentences], dtype=torch.float32)

    @property
    def seen(self) -> list[str]:
        return [s for call in self.calls for s in call]


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def _write_subset(year_dir: Path, name: str, c: list[float], gold: list[float], unscored: int = 0) -> None:
    inputs = [f"q\tp {x}" for x in c]
    golds = [f"{g}" for g in gold]
    # unscored pairs (empty gold line) with cosines that would break the hand results if they were kept
    inputs += [f"q\t p   {0.05 + 0.001 * k} " for k in range(unscored)]
    golds += [""] * unscored
    _write(year_dir / f"STS.input.{name}.txt", "\n".join(inputs) + "\n")
    _write(year_dir / f"STS.gs.{name}.txt", "\n".join(golds) + "\n")


@pytest.fixture()
def synth_dir(tmp_path: Path) -> Path:
    down = tmp_path / "senteval" / "downstream"
    year = down / "STS" / "STS13-en-test"  # STS13: subsets FNWN, headlines, OnWN
    _write_subset(year, "FNWN", **SUBSET_A, unscored=2)
    _write_subset(year, "headlines", **SUBSET_B)
    _write_subset(year, "OnWN", **SUBSET_C, unscored=1)
    # STS-B dev shares sentences with STS13 ("q", "p 0.5") and has one of its own ("p 0.45")
    _write(
        down / "STS" / "STSBenchmark" / "sts-dev.csv",
        "g\tg\t2012\t1\t1.0\tq\tp 0.2\n"
        "g\tg\t2012\t2\t2.0\tq\tp   0.5\n"
        "g\tg\t2012\t3\t3.0\tq\tp 0.45\textra\tcolumns\n",
    )
    return tmp_path


def test_aggregations_against_hand_computation(synth_dir: Path) -> None:
    ev = STSEvaluator(synth_dir)
    # all: sys ranks 1..12; gold ranks A 1,2,3 | B 7,6,5,4 | C 8,10,9,12,11 -> sum d^2 = 0 + 20 + 4 = 24
    # rho = 1 - 6*24 / (12*143) = 131/143
    all_ = ev.evaluate(CountingEncoder(), tasks=("sts13",), aggregation="all")
    assert all_["sts13"] == pytest.approx(100 * 131 / 143, abs=1e-9)
    assert all_["avg"] == pytest.approx(all_["sts13"], abs=1e-12)
    assert list(all_) == ["sts13", "avg"]
    mean = ev.evaluate(CountingEncoder(), tasks=("sts13",), aggregation="mean")
    assert mean["sts13"] == pytest.approx(100 * (1 - 1 + 0.8) / 3, abs=1e-9)
    wmean = ev.evaluate(CountingEncoder(), tasks=("sts13",), aggregation="wmean")
    assert wmean["sts13"] == pytest.approx(100 * (3 * 1 - 4 * 1 + 5 * 0.8) / 12, abs=1e-9)  # 25.0

    rep = ev.evaluate_detailed(CountingEncoder(), tasks=("sts13",))
    ts = rep.tasks["sts13"]
    assert ts.n == 12
    assert {k: (v.n, round(v.spearman, 9)) for k, v in ts.subsets.items()} == {
        "FNWN": (3, 100.0),
        "headlines": (4, -100.0),
        "OnWN": (5, 80.0),
    }
    assert list(ts.subsets) == ["FNWN", "headlines", "OnWN"]


def test_single_split_task_and_avg(synth_dir: Path) -> None:
    ev = STSEvaluator(synth_dir)
    res = ev.evaluate(CountingEncoder(), tasks=("stsb",), split="dev")
    assert res["stsb"] == pytest.approx(50.0, abs=1e-9)  # cos 0.2,0.5,0.45 vs gold 1,2,3: 1 - 6*2/24
    rep = ev.evaluate_detailed(CountingEncoder(), tasks=("stsb",), split="dev", aggregation="wmean")
    assert rep.tasks["stsb"].all == rep.tasks["stsb"].mean == rep.tasks["stsb"].wmean
    assert list(rep.tasks["stsb"].subsets) == ["dev"]


def test_each_distinct_sentence_encoded_once(synth_dir: Path) -> None:
    # both tasks need split 'test' for sts13; give STS-B a test file identical to dev
    dev = synth_dir / "senteval" / "downstream" / "STS" / "STSBenchmark" / "sts-dev.csv"
    (dev.parent / "sts-test.csv").write_text(dev.read_text(encoding="utf-8"), encoding="utf-8")
    enc = CountingEncoder()
    res = STSEvaluator(synth_dir).evaluate(enc, tasks=("sts13", "stsb"))
    assert len(enc.calls) == 1
    seen = enc.seen
    assert len(seen) == len(set(seen))
    expected = {"q"} | {f"p {c}" for s in (SUBSET_A, SUBSET_B, SUBSET_C) for c in s["c"]} | {"p 0.45"}
    assert set(seen) == expected  # unscored pairs' sentences are not encoded; whitespace normalised
    assert seen == sorted(seen)  # deterministic order
    assert res["avg"] == pytest.approx((res["sts13"] + res["stsb"]) / 2, abs=1e-12)

    enc2 = CountingEncoder()
    res2 = STSEvaluator(synth_dir, batch_size=4).evaluate(enc2, tasks=("sts13", "stsb"))
    assert len(enc2.calls) == math.ceil(len(expected) / 4)
    assert sorted(enc2.seen) == sorted(expected) and len(enc2.seen) == len(expected)
    assert res2 == pytest.approx(res, abs=1e-12)


@pytest.mark.parametrize(
    "bad",
    [
        lambda s: [[1.0, 0.0]] * len(s),  # not a tensor
        lambda s: torch.ones(len(s)),  # 1-D
        lambda s: torch.ones(len(s) + 1, 2),  # wrong number of rows
        lambda s: torch.ones(len(s), 2, 1),  # 3-D
        lambda s: torch.ones(len(s), 2, dtype=torch.long),  # not float
    ],
)
def test_bad_encode_output_raises(synth_dir: Path, bad) -> None:
    with pytest.raises(ValueError, match="encode.*must return a 2-D"):
        STSEvaluator(synth_dir).evaluate(bad, tasks=("sts13",))


def test_numpy_encode_output_accepted(synth_dir: Path) -> None:
    enc = CountingEncoder()
    res = STSEvaluator(synth_dir).evaluate(lambda s: enc(s).numpy(), tasks=("sts13",))
    assert res["sts13"] == pytest.approx(100 * 131 / 143, abs=1e-9)


def test_validation_errors(synth_dir: Path) -> None:
    ev = STSEvaluator(synth_dir)
    with pytest.raises(ValueError, match="valid: all, mean, wmean"):
        ev.evaluate(CountingEncoder(), tasks=("sts13",), aggregation="median")
    with pytest.raises(ValueError, match="valid tasks: sts12, sts13, sts14, sts15, sts16, stsb, sickr"):
        ev.evaluate(CountingEncoder(), tasks=("sts13", "sts17"))
    with pytest.raises(ValueError, match="no split 'dev'"):
        ev.evaluate(CountingEncoder(), tasks=("sts13",), split="dev")
    with pytest.raises(ValueError, match="duplicated"):
        ev.evaluate(CountingEncoder(), tasks=("stsb", "STS-B"), split="dev")
    with pytest.raises(ValueError, match="batch_size"):
        STSEvaluator(synth_dir, batch_size=0)


# ----------------------------------------------------------------------------------------- table


def test_format_table() -> None:
    scores = {t: 70.0 + i + 0.123 for i, t in enumerate(TEST_TASKS)}
    scores["avg"] = 73.456
    head, row = format_table(scores).splitlines()
    assert head.split() == [PAPER_NAMES[t] for t in TEST_TASKS] + ["Avg"]
    assert row.split() == ["70.12", "71.12", "72.12", "73.12", "74.12", "75.12", "76.12", "73.46"]

    head, row = format_table({"stsb": 80.0, "avg": 80.0}).splitlines()
    assert row.split() == ["-", "-", "-", "-", "-", "80.00", "-", "80.00"]
    # avg computed only when all seven present and no "avg" key
    _, row = format_table({t: 50.0 for t in TEST_TASKS}).splitlines()
    assert row.split()[-1] == "50.00"
    _, row = format_table({"sts12": 50.0}).splitlines()
    assert row.split()[-1] == "-"


def test_progress_is_reported_per_task_and_each_sentence_still_encoded_once(synth_dir: Path, monkeypatch) -> None:
    dev = synth_dir / "senteval" / "downstream" / "STS" / "STSBenchmark" / "sts-dev.csv"
    (dev.parent / "sts-test.csv").write_text(dev.read_text(encoding="utf-8"), encoding="utf-8")
    plain = STSEvaluator(synth_dir).evaluate(CountingEncoder(), tasks=("sts13", "stsb"))
    monkeypatch.setattr(STSEvaluator, "PROGRESS_CHUNK", 4)
    enc, calls = CountingEncoder(), []
    res = STSEvaluator(synth_dir).evaluate(enc, tasks=("sts13", "stsb"), progress=lambda *a: calls.append(a))
    assert res == pytest.approx(plain, abs=1e-12)
    assert len(enc.seen) == len(set(enc.seen))  # "q" is in both tasks: encoded once, with sts13
    sts13 = {"q"} | {f"p {c}" for s in (SUBSET_A, SUBSET_B, SUBSET_C) for c in s["c"]}
    assert calls[0] == ("sts13", 0, len(sts13))
    assert [c for c in calls if c[0] == "sts13"][1:] == [("sts13", d, len(sts13)) for d in (4, 8, 12, 13)]
    assert [c for c in calls if c[0] == "stsb"] == [("stsb", 0, 1), ("stsb", 1, 1)]  # only "p 0.45" is new
