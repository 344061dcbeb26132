"""W&B offline: the run's name, group, a clean config, the dev curve at the step results.json uses, the charts.

The offline run directory (``<run dir>/wandb/offline-run-*``) is read back: the run, config and history records
of its ``run-*.wandb`` file (a LevelDB-style log of protobuf records, parsed with W&B's own
``wandb_internal_pb2.Record``; offline runs write no ``files/config.yaml``).
"""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path

import pytest

pytest.importorskip("wandb")


def read_wandb_records(path: Path) -> list:
    """The protobuf records of an offline ``.wandb`` file (W&B's LevelDB-style log: 32 KiB blocks of chunks
    with a 7-byte header: crc32, length, type FULL=1 / FIRST=2 / MIDDLE=3 / LAST=4; the file starts with a
    7-byte ``:W&B`` header)."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    block, pos, records, pending = 32768, 7, [], b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # block trailer
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        chunk = data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind == 0 and length == 0:
            continue
        pending += chunk
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


def history(records) -> list[dict]:
    """The rows passed to ``run.log``, as dicts of decoded JSON values."""
    rows = []
    for r in records:
        if r.WhichOneof("record_type") == "history":
            rows.append({".".join(i.nested_key) or i.key: json.loads(i.value_json) for i in r.history.item})
    return rows


@pytest.mark.integration
def test_offline_run_name_group_config_dev_curve_and_charts(tmp_path, tiny_bert_dir, sts_data_dir, monkeypatch):

    from tests.conftest import compose_tiny_run, run

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    cfg = compose_tiny_run(tmp_path, tiny_bert_dir, sts_data_dir,
                           "eval.test_tasks=[sts12,sts13,sts14,sts15,sts16,stsb,sickr]", "logger=wandb",
                           "group=my_sweep", "variant='max_steps=4'", "seed=7")
    out = tmp_path / "run"
    results = run(cfg, out)

    [offline] = (out / "wandb").glob("offline-run-*")
    records = read_wandb_records(next(offline.glob("run-*.wandb")))
    [run_record] = [r.run for r in records if r.WhichOneof("record_type") == "run"][:1]
    assert run_record.display_name == "simcse minilm_l6 unsup max_steps=4 seed7"
    assert run_record.run_group == "my_sweep"

    config = {i.key: json.loads(i.value_json) for r in records if r.WhichOneof("record_type") == "config"
              for i in r.config.update if i.key and not i.key.startswith("_")}
    assert {"method", "optim", "data", "trainer", "run_name", "variant", "seed", "backbone"} <= set(config)
    assert "hp" not in config and "lr" not in config  # each value once: optim.lr only
    assert "hparams" not in config["method"]  # no paper rows of every backbone
    assert config["optim"]["lr"] == cfg.optim.lr and config["group"] == "my_sweep"

    expected = {"test/sts_table", "test/sts_scores", "test/sts_chart_table", "test/stsb_cosine_by_gold_bin",
                "test/stsb_mean_cosine_by_gold_bin_table"}
    deadline = time.monotonic() + 60  # W&B's service may still be writing the last history rows on a loaded machine
    while not expected <= {k.split(".")[0] for r in history(records) for k in r} and time.monotonic() < deadline:
        time.sleep(1)
        records = read_wandb_records(next(offline.glob("run-*.wandb")))
    rows = history(records)
    dev = [(r["trainer/global_step"], r["val/stsb_spearman"]) for r in rows if "val/stsb_spearman" in r]
    assert [step for step, _ in dev] == [p["step"] for p in results["val_curve"]] == [2, 4]
    assert [v for _, v in dev] == pytest.approx([p["stsb_dev"] for p in results["val_curve"]])
    logged = {k.split(".")[0] for r in rows for k in r}  # tables arrive as <key>.path, <key>.nrows ...
    assert expected <= logged  # (a chart is its table + a Vega spec)
    assert {f"test/stsb_cosine_hist/gold_{b}_table" for b in ("0-1", "1-2", "2-3", "3-4", "4-5")} <= logged
    # the test table carries the intervals (results.json's test_ci)
    [scores] = list(offline.rglob("sts_scores_*.table.json"))
    table = json.loads(scores.read_text())
    assert table["columns"] == ["task", "spearman", "ci_low", "ci_high"]
    assert [row[2:] for row in table["data"]] == [results["test_ci"][t] for t in results["test"]]

    import csv

    with open(out / "csv" / "metrics.csv") as f:
        csv_dev = [(int(r["step"]), float(r["val/stsb_spearman"])) for r in csv.DictReader(f) if r["val/stsb_spearman"]]
    assert [step for step, _ in csv_dev] == [2, 4]  # the CSV too
