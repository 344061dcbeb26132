"""The console of a run (one line per event, no advertisements) and the end of a -m sweep (summary, exit status)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cselab.io.logs import DropAdvertisements, one_line_per_event
from cselab.run import sweep
from tests import forked

ROOT = Path(__file__).resolve().parents[1]


def _job(root: Path, name: str, results: dict | None = None, failed: dict | None = None) -> Path:
    job = root / name
    (job / ".hydra").mkdir(parents=True)
    if results is not None:
        (job / "results.json").write_text(json.dumps(results))
    if failed is not None:
        (job / "failed.json").write_text(json.dumps(failed))
    return job


def test_sweep_jobs_reads_done_failed_and_unfinished_in_job_order(tmp_path):
    _job(tmp_path, "10_simcse_x_unsup", results={"test": {"avg": 70.123}})
    _job(tmp_path, "2_promptbert_x_unsup", failed={"error": "ConfigError", "message": "loss.temperature  must be > 0"})
    _job(tmp_path, "0_cot_bert_x_unsup")
    (tmp_path / "not_a_job").mkdir()
    jobs = sweep.sweep_jobs(tmp_path)
    assert [j.path.name for j in jobs] == ["0_cot_bert_x_unsup", "2_promptbert_x_unsup", "10_simcse_x_unsup"]
    assert [j.status for j in jobs] == ["unfinished", "failed", "done"]
    assert jobs[1].detail == "ConfigError: loss.temperature must be > 0"
    assert jobs[2].detail == "avg 70.12"
    text = sweep.format_summary(tmp_path, jobs)
    assert text.splitlines()[0] == f"sweep {tmp_path}: 3 jobs, 1 done, 1 failed, 1 unfinished"
    assert all(str(j.path) in text for j in jobs)


def test_a_failure_after_an_earlier_success_counts_as_failed(tmp_path):
    job = _job(tmp_path, "0_a", results={"test": {"avg": 1.0}})
    os.utime(job / "results.json", (1, 1))
    (job / "failed.json").write_text(json.dumps({"error": "RuntimeError", "message": "boom"}))
    assert sweep.job_status(job).status == "failed"


def test_exit_status_follows_the_last_sweep(tmp_path, monkeypatch):
    monkeypatch.setattr(sweep, "_last_jobs", None)
    assert sweep.exit_status() == 0  # no sweep: a single run
    monkeypatch.setattr(sweep, "_last_jobs", [sweep.JobStatus(tmp_path, "done")])
    assert sweep.exit_status() == 0
    monkeypatch.setattr(sweep, "_last_jobs", [sweep.JobStatus(tmp_path, "done"), sweep.JobStatus(tmp_path, "failed")])
    assert sweep.exit_status() == 1
    monkeypatch.setattr(sweep, "_last_jobs", [])
    assert sweep.exit_status() == 1


def test_lightning_records_go_through_the_root_handler_once(monkeypatch):
    import lightning  # noqa: F401  (attaches Lightning's console handler)

    logger = logging.getLogger("lightning")
    monkeypatch.setattr(logger, "handlers", [*logger.handlers, logging.StreamHandler()])
    monkeypatch.setattr(logger, "propagate", False)
    root = logging.getLogger()
    if not root.handlers:
        monkeypatch.setattr(root, "handlers", [logging.NullHandler()])
    one_line_per_event()
    assert not [h for h in logger.handlers if type(h) is logging.StreamHandler]
    assert logger.propagate is True


def test_advertisements_are_dropped_and_events_kept():
    one_line_per_event()
    rank_zero = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    assert any(isinstance(f, DropAdvertisements) for f in rank_zero.filters)
    make = lambda msg: logging.LogRecord("x", logging.INFO, __file__, 1, msg, None, None)  # noqa: E731
    flt = DropAdvertisements()
    assert not flt.filter(make("💡 Tip: For seamless cloud logging ... try installing [litlogger](...)"))
    assert flt.filter(make("GPU available: False, used: False"))


@pytest.mark.integration
def test_sweep_with_a_failed_job_prints_the_summary_and_exits_1(tmp_path, tiny_bert_dir):
    """Job 0 is refused by the config check, job 1 runs; the sweep goes on, summarises both, exits 1."""
    data = next((Path(c) for c in (os.environ.get("CSELAB_DATA_DIR"), ROOT / "data")
                 if c and (Path(c) / "senteval" / "downstream").is_dir()), None)
    if data is None:
        pytest.skip("no SentEval data (run `make data`)")
    env = {**os.environ, "CSELAB_DATA_DIR": str(data.resolve()), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    proc = forked.run(
        [sys.executable, str(ROOT / "run.py"), "-m", "loss.temperature=-1,0.05", "method=baseline", "method.pooler=avg",
         f"backbone.name_or_path={tiny_bert_dir}", "eval.test_tasks=[stsb]", f"hydra.sweep.dir={tmp_path}"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-4000:]
    jobs = sorted(p.name for p in tmp_path.iterdir() if (p / ".hydra").is_dir())
    assert len(jobs) == 2
    assert (tmp_path / jobs[0] / "failed.json").is_file() and (tmp_path / jobs[1] / "results.json").is_file()
    assert f"sweep {tmp_path}: 2 jobs, 1 done, 1 failed" in out
    assert f"failed     {tmp_path / jobs[0]}" in out and "ConfigError: loss.temperature must be > 0" in out
    assert f"done       {tmp_path / jobs[1]}   stsb " in out
    # one line per event, no advertisement
    assert out.count("Seed set to 42") == 1, out[-4000:]
    assert out.count("GPU available:") == 0  # method=baseline trains nothing: no Trainer, the evaluator alone
    assert "litlogger" not in out and "\nINFO: " not in out


def test_third_party_bars_are_off_and_the_load_report_is_one_line_in_a_log_file(tiny_mlm_dir, monkeypatch):
    """Issue #40: transformers' "Loading weights: 100%|..." bars and its ~15-line LOAD REPORT filled log files.
    With stderr not a terminal the libraries' bars are off; the report is one line naming the keys."""
    import logging

    from huggingface_hub.utils import are_progress_bars_disabled, enable_progress_bars
    from transformers import AutoModel
    from transformers.utils import logging as hf_logging

    import cselab.io.logs as logs

    monkeypatch.setattr(logs, "interactive", lambda: False)
    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())

    handler = Keep()
    logging.getLogger(logs.LOAD_REPORT_LOGGER).addHandler(handler)
    try:
        logs.quiet_third_party()
        assert not hf_logging.is_progress_bar_enabled() and are_progress_bars_disabled()
        AutoModel.from_pretrained(tiny_mlm_dir)  # a BertModel from a BertForMaskedLM checkpoint: keys differ
    finally:
        logging.getLogger(logs.LOAD_REPORT_LOGGER).removeHandler(handler)
        hf_logging.enable_progress_bar()
        enable_progress_bars()
    report = [m for m in seen if "BertModel" in m]
    assert len(report) == 1 and "\n" not in report[0], report
    assert report[0].startswith("BertModel loaded from ") and "UNEXPECTED (cls.predictions" in report[0]
    assert "MISSING (pooler.dense" in report[0]


def test_the_bars_are_off_for_libraries_imported_after_and_nothing_is_imported_for_it():
    """quiet_third_party before transformers and huggingface_hub are imported (run.py calls it first thing, and a
    refused command answers before they load): it imports neither, and both start with their bars off."""
    code = """import sys
import cselab.io.logs as logs
logs.interactive = lambda: False
logs.quiet_third_party()
print(sorted(m for m in ("transformers", "huggingface_hub") if m in sys.modules))
from huggingface_hub.utils import are_progress_bars_disabled
from transformers.utils import logging as hf_logging
print(are_progress_bars_disabled(), hf_logging.is_progress_bar_enabled())
"""
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_DISABLE_PROGRESS_BARS"}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines() == ["[]", "True False"], proc.stdout
