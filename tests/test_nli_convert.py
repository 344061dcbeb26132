"""NLI triplet converter: pairing rule on small jsonl, SICK train, csv round trip through ``datasets``."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from cselab.cli.nli_convert import main
from cselab.cli.nli_triplets import (
    DEFAULT_OUT,
    ConversionStats,
    NLIFormatError,
    NLIPair,
    build_triplets,
    convert,
    read_nli_jsonl,
    read_pairs,
    read_sick_nli,
    write_triplets_csv,
)

SICK_TRAIN_CANDIDATES = [
    Path(__file__).resolve().parents[1] / "data" / "senteval" / "downstream" / "SICK" / "SICK_train.txt",
    Path("/work/shared/data/senteval/downstream/SICK/SICK_train.txt"),
    Path("/work/shared/data/senteval_raw/SICK/SICK_train.txt"),
]


def _sick_train() -> Path:
    for p in SICK_TRAIN_CANDIDATES:
        if p.is_file():
            return p
    pytest.skip("SICK_train.txt not available")


def _write_jsonl(path: Path, rows: list[dict | str]) -> Path:
    lines = [r if isinstance(r, str) else json.dumps(r) for r in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _row(p: str, h: str, label: str, **extra) -> dict:
    return {"sentence1": p, "sentence2": h, "gold_label": label, **extra}


def _read_csv(path: Path) -> list[list[str]]:
    with open(path, encoding="utf-8", newline="") as f:
        return list(csv.reader(f))


SNLI_ROWS = [
    _row("A man plays  a guitar.", "A man makes music.", "entailment", pairID="1r1e"),
    _row("A man plays a guitar.", "A man sleeps.", "contradiction", pairID="1r1c"),
    _row("A man plays a guitar.", "A man plays jazz.", "neutral", pairID="1r1n"),
    _row("A man plays a guitar.", "Someone plays an instrument.", "entailment", pairID="1r2e"),
    _row("A man plays a guitar.", "Nobody plays.", "contradiction", pairID="1r2c"),
    _row("A man plays a guitar.", "A person plays.", "entailment", pairID="1r3e"),
    _row("A man plays a guitar.", "A dog barks.", "-", pairID="1r3c"),  # no gold label: skipped
    _row("Two dogs run.", "Animals run.", "entailment"),  # no contradiction: unused
    _row("Two dogs run.", "Dogs run fast.", "neutral"),
    _row("A woman cooks.", "A woman sleeps.", "contradiction"),  # no entailment: unused
    _row('Kids, "happy", play.', "Children play.", "Entailment"),  # quotes/commas, label case
    _row('Kids, "happy", play.', "Kids cry.", "CONTRADICTION"),
    _row('Kids, "happy", play.', "Children play.", "entailment"),  # exact duplicate: kept once
]


def test_pairing_rule_on_small_jsonl(tmp_path: Path) -> None:
    path = _write_jsonl(tmp_path / "snli.jsonl", [*SNLI_ROWS[:8], "", *SNLI_ROWS[8:]])
    stats = ConversionStats()
    pairs = read_pairs("snli", [path], stats)
    assert stats.skipped_no_label == 1
    assert len(pairs) == 12
    assert pairs[0].premise == "A man plays a guitar."  # whitespace-normalised, grouped with the others
    assert pairs[0].where == f"{path}:1"
    triplets = build_triplets(pairs, stats=stats)
    # i-th entailment with the (i mod m)-th contradiction, premises in order of first appearance
    assert triplets == [
        ("A man plays a guitar.", "A man makes music.", "A man sleeps."),
        ("A man plays a guitar.", "Someone plays an instrument.", "Nobody plays."),
        ("A man plays a guitar.", "A person plays.", "A man sleeps."),
        ('Kids, "happy", play.', "Children play.", "Kids cry."),
    ]
    assert (stats.premises, stats.premises_used, stats.triplets, stats.duplicates) == (4, 2, 4, 1)
    assert stats.label_counts == {"entailment": 5, "contradiction": 4, "neutral": 2}


def test_convert_is_deterministic_and_combines_files(tmp_path: Path) -> None:
    a = _write_jsonl(tmp_path / "snli.jsonl", SNLI_ROWS[:6])
    b = _write_jsonl(
        tmp_path / "mnli.jsonl",
        [
            _row("A man plays a guitar.", "A musician performs.", "entailment", genre="fiction"),
            _row("It rains.", "It is wet.", "entailment", genre="fiction"),
            _row("It rains.", "It is dry.", "contradiction", genre="fiction"),
        ],
    )
    out1, out2 = tmp_path / "o1.csv", tmp_path / "sub" / "o2.csv"
    s1 = convert("mnli", [a, b], out1)
    s2 = convert("snli", [a, b], out2)
    assert out1.read_bytes() == out2.read_bytes()
    rows = _read_csv(out1)
    assert rows[0] == ["sent0", "sent1", "hard_neg"]
    assert rows[1:] == [
        ["A man plays a guitar.", "A man makes music.", "A man sleeps."],
        ["A man plays a guitar.", "Someone plays an instrument.", "Nobody plays."],
        ["A man plays a guitar.", "A person plays.", "A man sleeps."],
        ["A man plays a guitar.", "A musician performs.", "Nobody plays."],  # merged across files
        ["It rains.", "It is wet.", "It is dry."],
    ]
    assert s1.triplets == s2.triplets == 5


def test_na_like_and_empty_sentences_are_dropped(tmp_path: Path) -> None:
    pairs = [
        NLIPair("P one.", "NA", "entailment"),
        NLIPair("P one.", "Not so.", "contradiction"),
        NLIPair("P two.", "", "entailment"),
        NLIPair("P two.", "Fine.", "entailment"),
        NLIPair("P two.", "None", "contradiction"),
    ]
    stats = ConversionStats()
    assert build_triplets(pairs, stats=stats) == []
    assert (stats.skipped_na_like, stats.skipped_empty) == (2, 1)


def test_reverse_contradictions() -> None:
    pairs = [NLIPair("A", "B", "contradiction"), NLIPair("B", "C", "entailment")]
    assert build_triplets(pairs) == []  # A has no entailment, B (as premise) no contradiction
    # reversed: (B, A) is a contradiction with B as premise; entailments are never reversed
    assert build_triplets(pairs, reverse_contradictions=True) == [("B", "C", "A")]
    more = pairs + [NLIPair("A", "D", "entailment")]
    assert build_triplets(more) == [("A", "D", "B")]
    assert build_triplets(more, reverse_contradictions=True) == [("A", "D", "B"), ("B", "C", "A")]


@pytest.mark.parametrize(
    ("line", "match"),
    [
        ("{not json", r"line 2: not valid JSON"),
        ("[1, 2]", r"line 2: expected a JSON object"),
        (
            json.dumps({"sentence1": "a", "gold_label": "entailment"}),
            r"line 2: missing field\(s\) \['sentence2'\]",
        ),
        (json.dumps(_row("a", "b", "maybe")), r"line 2: unknown NLI label 'maybe'"),
        (json.dumps({"sentence1": "a", "sentence2": None, "gold_label": "neutral"}), r"line 2: field\(s\)"),
    ],
)
def test_jsonl_errors_name_file_and_line(tmp_path: Path, line: str, match: str) -> None:
    path = _write_jsonl(tmp_path / "bad.jsonl", [SNLI_ROWS[0], line])
    with pytest.raises(NLIFormatError, match=match) as info:
        read_nli_jsonl(path)
    assert str(path) in str(info.value)


def test_sick_errors_name_file_and_line(tmp_path: Path) -> None:
    header = "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment\n"
    bad_cols = tmp_path / "cols.txt"
    bad_cols.write_text(header + "1\tA b\tC d\t4.5\tNEUTRAL\n2\tonly\tthree\n", encoding="utf-8")
    with pytest.raises(NLIFormatError, match=r"cols.txt, line 3: expected 5 tab-separated fields"):
        read_sick_nli(bad_cols)
    bad_label = tmp_path / "label.txt"
    bad_label.write_text(header + "1\tA b\tC d\t4.5\tPARAPHRASE\n", encoding="utf-8")
    with pytest.raises(NLIFormatError, match=r"label.txt, line 2: unknown NLI label 'PARAPHRASE'"):
        read_sick_nli(bad_label)
    bad_header = tmp_path / "header.txt"
    bad_header.write_text("1\tA b\tC d\t4.5\tNEUTRAL\n", encoding="utf-8")
    with pytest.raises(NLIFormatError, match=r"header.txt, line 1: expected the SICK header"):
        read_sick_nli(bad_header)
    with pytest.raises(FileNotFoundError, match="missing.txt"):
        read_sick_nli(tmp_path / "missing.txt")
    with pytest.raises(ValueError, match="unknown NLI source"):
        read_pairs("rte", [bad_cols])


def test_sick_train_triplets(tmp_path: Path) -> None:
    path = _sick_train()
    pairs = read_sick_nli(path)
    assert len(pairs) == 4500
    stats = ConversionStats()
    triplets = build_triplets(pairs, stats=stats)
    assert len(triplets) == stats.triplets == 141
    assert (stats.premises, stats.premises_used, stats.duplicates) == (3146, 107, 30)
    by_pair = {(p.premise, p.hypothesis): p.label for p in pairs}
    for p, e, c in triplets:  # every triplet is backed by a forward A -> B pair of each label
        assert by_pair[(p, e)] == "entailment"
        assert by_pair[(p, c)] == "contradiction"
    assert len(build_triplets(pairs, reverse_contradictions=True)) == 251


def test_csv_round_trip_through_datasets(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    triplets = [
        ("plain premise", "plain entailment", "plain contradiction"),
        ('a "quoted", comma premise', "semi;colon 'single' quotes", "unicode café — ünïcode"),
        ("  leading and trailing spaces are kept by csv  ", "0", "3.5"),
    ]
    out = write_triplets_csv(triplets, tmp_path / "gen" / "t.csv")
    ds = datasets.load_dataset(
        "csv", data_files={"train": str(out)}, split="train", cache_dir=str(tmp_path / "hf_cache")
    )
    assert ds.column_names == ["sent0", "sent1", "hard_neg"]
    rows = [(r["sent0"], r["sent1"], r["hard_neg"]) for r in ds]
    assert rows[:2] == triplets[:2]
    assert rows[2][0] == triplets[2][0]


def test_sick_csv_round_trip_through_datasets(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    out = tmp_path / "sick.csv"
    stats = convert("sick", [_sick_train()], out)
    ds = datasets.load_dataset(
        "csv", data_files={"train": str(out)}, split="train", cache_dir=str(tmp_path / "c")
    )
    assert ds.column_names == ["sent0", "sent1", "hard_neg"]
    assert ds.num_rows == stats.triplets == 141
    assert [list(r.values()) for r in ds] == _read_csv(out)[1:]


def test_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write_jsonl(tmp_path / "snli.jsonl", SNLI_ROWS)
    monkeypatch.chdir(tmp_path)
    assert main(["--from", "snli", str(path)]) == 0
    assert (tmp_path / DEFAULT_OUT).is_file()  # default output under outputs/generated/, relative to cwd
    assert "4 triplets from 2 of 4 premises" in capsys.readouterr().out
    assert main(["--from", "snli", str(tmp_path / "nope.jsonl"), "--out", "x.csv"]) == 1
    assert "nope.jsonl" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--from", "rte", str(path)])


def test_sick_nli_data_config() -> None:
    yaml = pytest.importorskip("yaml")
    conf = Path(__file__).resolve().parents[1] / "conf" / "data" / "sick_nli.yaml"
    cfg = yaml.safe_load(conf.read_text())
    assert cfg["defaults"] == ["sup", "_self_"]
    assert cfg["path"].endswith("/outputs/generated/sick_nli_train.csv")
