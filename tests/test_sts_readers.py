"""Tests of cselab.data.sts: SentEval reading conventions, pair counts on the real data, error messages."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cselab.data.sts import (
    STS_SUBSETS,
    STSFormatError,
    STSPairs,
    load_task,
    read_sick,
    read_sts_year,
    read_stsb,
    resolve_downstream_dir,
)


def _real_data_dir() -> Path:
    env = os.environ.get("CSELAB_DATA_DIR")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture(scope="module")
def data_dir() -> Path:
    d = _real_data_dir()
    if not (d / "senteval" / "downstream").is_dir() and not (d / "downstream").is_dir():
        pytest.skip(f"SentEval data not found under {d} (set CSELAB_DATA_DIR)")
    return d


# ----------------------------------------------------------------------------------------- real data


@pytest.mark.parametrize(
    ("task", "total"), [("sts12", 3108), ("sts13", 1500), ("sts14", 3750), ("sts15", 3000), ("sts16", 1186)]
)
def test_sts_year_counts(data_dir: Path, task: str, total: int) -> None:
    subsets = load_task(data_dir, task)
    assert tuple(subsets) == STS_SUBSETS[task]
    assert sum(len(p) for p in subsets.values()) == total
    for name, pairs in subsets.items():
        assert pairs.name == name
        assert len(pairs.sent1) == len(pairs.sent2) == len(pairs.scores) == len(pairs)
        assert all(0.0 <= s <= 5.0 for s in pairs.scores)


def test_sts12_subset_counts(data_dir: Path) -> None:
    counts = {k: len(v) for k, v in load_task(data_dir, "sts12").items()}
    assert counts == {
        "MSRpar": 750,
        "MSRvid": 750,
        "SMTeuroparl": 459,
        "surprise.OnWN": 750,
        "surprise.SMTnews": 399,
    }


def test_sts13_subset_counts(data_dir: Path) -> None:
    counts = {k: len(v) for k, v in load_task(data_dir, "sts13").items()}
    assert counts == {"FNWN": 189, "headlines": 750, "OnWN": 561}


@pytest.mark.parametrize(
    ("task", "split", "n"),
    [
        ("stsb", "test", 1379),
        ("stsb", "dev", 1500),
        ("stsb", "train", 5749),
        ("sickr", "test", 4927),
        ("sickr", "dev", 500),
        ("sickr", "train", 4500),
    ],
)
def test_stsb_sick_counts(data_dir: Path, task: str, split: str, n: int) -> None:
    d = load_task(data_dir, task, split)
    assert list(d) == [split]
    assert len(d[split]) == n
    assert d[split].name == split


def test_real_sentences_are_whitespace_normalised(data_dir: Path) -> None:
    for task in ("sts12", "sts13", "sts14", "sts15", "sts16"):
        for pairs in load_task(data_dir, task).values():
            for s in pairs.sent1 + pairs.sent2:
                assert s == " ".join(s.split())
    first = load_task(data_dir, "stsb", "test")["test"]
    assert first.sent1[0] == "a girl is styling her hair ."
    assert first.scores[0] == 2.5


def test_data_dir_may_be_downstream_parent(data_dir: Path) -> None:
    senteval = resolve_downstream_dir(data_dir).parent  # the folder containing `downstream`
    a = load_task(senteval, "stsb", "dev")["dev"]
    b = load_task(data_dir, "stsb", "dev")["dev"]
    assert a == b


# ----------------------------------------------------------------------------------------- tiny files


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode("utf-8"))
    return path


def test_unscored_pairs_dropped_and_whitespace_rejoined(tmp_path: Path) -> None:
    _write(tmp_path / "STS.input.x.txt", "a  b\tc d\ne f\tg h\n i\t j  k \n")
    _write(tmp_path / "STS.gs.x.txt", "1.0\n\n3.5\n")
    p = read_sts_year(tmp_path, "x")
    assert isinstance(p, STSPairs)
    assert p == STSPairs(["a b", "i"], ["c d", "j k"], [1.0, 3.5], "x")
    assert len(p) == 2


def test_crlf_and_missing_final_newline(tmp_path: Path) -> None:
    _write(tmp_path / "STS.input.x.txt", "a\tb\r\nc\td")
    _write(tmp_path / "STS.gs.x.txt", "1\r\n2")
    p = read_sts_year(tmp_path, "x")
    assert p.sent1 == ["a", "c"] and p.sent2 == ["b", "d"] and p.scores == [1.0, 2.0]


def test_mismatched_line_counts_raise(tmp_path: Path) -> None:
    _write(tmp_path / "STS.input.x.txt", "a\tb\nc\td\n")
    _write(tmp_path / "STS.gs.x.txt", "1\n2\n3\n")
    with pytest.raises(STSFormatError) as ei:
        read_sts_year(tmp_path, "x")
    msg = str(ei.value)
    assert "STS.input.x.txt" in msg and "STS.gs.x.txt" in msg
    assert "2 lines" in msg and "3" in msg
    assert isinstance(ei.value, ValueError)


def test_wrong_number_of_fields_raises_with_line_number(tmp_path: Path) -> None:
    _write(tmp_path / "STS.input.x.txt", "a\tb\nc\td\te\n")
    _write(tmp_path / "STS.gs.x.txt", "1\n2\n")
    with pytest.raises(STSFormatError, match=r"STS\.input\.x\.txt, line 2: expected exactly 2 tab-separated"):
        read_sts_year(tmp_path, "x")
    _write(tmp_path / "STS.input.y.txt", "no tab here\n")
    _write(tmp_path / "STS.gs.y.txt", "1\n")
    with pytest.raises(STSFormatError, match=r"line 1"):
        read_sts_year(tmp_path, "y")


def test_bad_gold_score_raises(tmp_path: Path) -> None:
    _write(tmp_path / "STS.input.x.txt", "a\tb\nc\td\n")
    _write(tmp_path / "STS.gs.x.txt", "1\nfoo\n")
    with pytest.raises(STSFormatError, match=r"STS\.gs\.x\.txt, line 2"):
        read_sts_year(tmp_path, "x")


def test_stsb_extra_columns_ignored_no_csv_quoting(tmp_path: Path) -> None:
    f = _write(
        tmp_path / "sts-dev.csv",
        'main-news\theadlines\t2013\t0001\t4.200\t"a  quoted\tthe end .\tsrc1\tsrc2\n'
        "main-forums\tdeft\t2014\t0002\t0.000\tx y\tz\n",
    )
    p = read_stsb(f)
    assert p.name == "dev"
    assert p.sent1 == ['"a quoted', "x y"]
    assert p.sent2 == ["the end .", "z"]
    assert p.scores == [4.2, 0.0]


def test_stsb_short_line_raises(tmp_path: Path) -> None:
    f = _write(tmp_path / "sts-test.csv", "g\tg\t2012\t1\t3.0\ta\tb\ng\tg\t2012\t2\t3.0\tonly one\n")
    with pytest.raises(STSFormatError, match=r"sts-test\.csv, line 2: expected at least 7"):
        read_stsb(f)


def test_sick_header_skipped(tmp_path: Path) -> None:
    f = _write(
        tmp_path / "SICK_trial.txt",
        "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment\n"
        "1\tA  dog runs\tA dog is running\t4.5\tENTAILMENT\n"
        "2\tA cat\tNobody\t1.2\tNEUTRAL\n",
    )
    p = read_sick(f, name="dev")
    assert p == STSPairs(["A dog runs", "A cat"], ["A dog is running", "Nobody"], [4.5, 1.2], "dev")


def test_missing_file_message(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError) as ei:
        load_task(tmp_path, "stsb", "test")
    msg = str(ei.value)
    expected = tmp_path.resolve() / "senteval" / "downstream" / "STS" / "STSBenchmark" / "sts-test.csv"
    assert str(expected) in msg
    assert "make data" in msg and "python -m cselab data" in msg
    with pytest.raises(FileNotFoundError, match=r"STS\.input\.MSRpar\.txt"):
        load_task(tmp_path, "sts12")
    with pytest.raises(FileNotFoundError, match=r"SICK_trial\.txt"):
        load_task(tmp_path, "sickr", "dev")


def test_load_task_layouts_and_validation(tmp_path: Path) -> None:
    line = "g\tg\t2012\t1\t3.0\ta\tb\n"
    _write(tmp_path / "senteval" / "downstream" / "STS" / "STSBenchmark" / "sts-train.csv", line)
    for root in (tmp_path, tmp_path / "senteval", tmp_path / "senteval" / "downstream"):
        d = load_task(root, "STS-B", "train")
        assert list(d) == ["train"] and d["train"].sent1 == ["a"]
    with pytest.raises(ValueError, match="valid tasks: sts12, sts13, sts14, sts15, sts16, stsb, sickr"):
        load_task(tmp_path, "sts17")
    with pytest.raises(ValueError, match="valid splits: test"):
        load_task(tmp_path, "sts12", "dev")
    with pytest.raises(ValueError, match="valid splits: train, dev, test"):
        load_task(tmp_path, "stsb", "validation")


def test_cache_returns_fresh_lists_and_sees_changes(tmp_path: Path) -> None:
    f = _write(tmp_path / "sts-dev.csv", "g\tg\t2012\t1\t3.0\ta\tb\n")
    p1 = read_stsb(f)
    p1.sent1.append("mutated")
    p2 = read_stsb(f)
    assert p2.sent1 == ["a"]
    _write(f, "g\tg\t2012\t1\t3.0\ta\tb\ng\tg\t2012\t2\t1.0\tc\td\n")  # different size -> re-parsed
    assert len(read_stsb(f)) == 2
