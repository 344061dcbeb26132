"""The published transfer rows (PromptBERT Table 15, PromCSE Table 7) against the papers' texts, and our rows
beside them in `cselab report`."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from cselab.data.transfer import TRANSFER_TASKS
from cselab.report.transfer import load_published_transfer, render_transfer_tables, transfer_rows_of_runs

PAPERS = Path(__file__).resolve().parents[2] / "shared" / "papers"
TEXTS = {"promptbert": ["promptbert.txt", "promptbert.alt-extraction.txt"], "promcse": ["promcse.txt"]}


def test_every_published_transfer_row_is_printed_in_its_paper():
    rows = load_published_transfer()
    assert {(r.paper, r.table) for r in rows} == {("promptbert", "Table 15"), ("promcse", "Table 7")}
    assert sum(r.paper == "promptbert" for r in rows) == 15 and sum(r.paper == "promcse" for r in rows) == 14
    if not PAPERS.is_dir():
        pytest.skip("no ../shared/papers")
    for row in rows:
        numbers = [f"{row.scores[c]:.2f}" for c in (*TRANSFER_TASKS, "avg")]
        for name in TEXTS[row.paper]:
            text = re.sub(r"[|\s]+", " ", (PAPERS / name).read_text(encoding="utf-8"))
            assert " ".join(numbers) in text, (row.name, name)


def test_our_runs_sit_under_the_row_they_reproduce(tmp_path):
    cfg = {"method": {"name": "simcse"}, "backbone": {"name": "bert_base"}, "setting": {"name": "unsup"},
           "loss": {"name": "infonce"}}
    acc = {t: {"acc": 80.0 + i, "devacc": 80.0} for i, t in enumerate(TRANSFER_TASKS)}
    results = [(f"run{s}", {"config": cfg, "transfer": acc, "transfer_protocol": {"mode": "test"}}) for s in range(2)]
    other = {"config": {**cfg, "backbone": {"name": "minilm_l6"}}, "transfer": {"mr": {"acc": 70.0}}}
    rows = transfer_rows_of_runs([*results, ("x", other)])
    assert [r.n for r in rows] == [2, 1] and rows[0].scores["avg"] == pytest.approx(83.0)
    text = render_transfer_tables(rows)
    table15 = text.split("### PromptBERT Table 15")[1].split("###")[0]
    assert "SimCSE-BERT (unsup, quoted)" in table15 and "ours: simcse bert_base unsup | 2 | test | 80.00" in table15
    assert "PromCSE Table 7" in text and "no published row" in text and "70.00" in text


def test_cselab_report_prints_the_transfer_tables(tmp_path, capsys):
    from cselab.cli import main

    run = tmp_path / "run"
    run.mkdir()
    cfg = {"method": {"name": "promcse"}, "backbone": {"name": "bert_base"}, "setting": {"name": "unsup"},
           "loss": {"name": "infonce"}, "seed": 1}
    test = {t: 70.0 for t in ("sts12", "sts13", "sts14", "sts15", "sts16", "stsb", "sickr")}
    (run / "results.json").write_text(json.dumps({"test": {**test, "avg": 70.0}, "dev": {"stsb": 80.0}, "config": cfg,
                                                  "transfer": {"mr": {"acc": 79.5, "devacc": 80.0}},
                                                  "transfer_protocol": {"mode": "fasttest"}}))
    assert main(["report", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "PromCSE Table 7" in out and "PromCSE-BERTbase (unsup)" in out and "79.50" in out
