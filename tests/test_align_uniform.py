"""callbacks.align_uniform (SimCSE Fig. 2): l_align and l_uniform on STS-B dev every N steps, at Wang & Isola's
definitions (align_loss / uniform_loss, alpha 2, t 2, pairs with gold > 4), logged to the run's loggers with their
cost; off by default, on in the experiment that reproduces the figure; and in a real run, the CSV the report
draws."""

from __future__ import annotations

import csv
import hashlib
import json
import logging
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
import yaml
from hydra import compose, initialize_config_dir

from cselab.callbacks.align_uniform import ALIGNMENT_METRIC, SECONDS_METRIC, UNIFORMITY_METRIC, AlignUniform
from cselab.data.sts import load_task
from tests import forked

ROOT = Path(__file__).resolve().parents[1]


def _data_dir() -> Path:
    for cand in (os.environ.get("CSELAB_DATA_DIR"), ROOT / "data", ROOT.parent / "shared" / "data"):
        if cand and (Path(cand) / "senteval" / "downstream").is_dir():
            return Path(cand).resolve()
    pytest.skip("no SentEval data (run `make data`)")


def _vector(sentence: str, dim: int = 16) -> torch.Tensor:
    """A fixed pseudo-embedding per sentence (the same sentence, the same vector)."""
    seed = int(hashlib.sha1(sentence.encode()).hexdigest()[:8], 16)
    return torch.randn(dim, generator=torch.Generator().manual_seed(seed))


class _Module:
    """encode() of a model whose embeddings drift with a scale set by the test (a stand-in for training)."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, str]] = []
        self.shift = 0.0

    def encode(self, sentences, batch_size=None, encoder="test"):
        self.calls.append((len(sentences), encoder))
        return torch.stack([_vector(s) for s in sentences]) + self.shift


class _Logger:
    def __init__(self) -> None:
        self.rows: list[tuple[int, dict]] = []

    def log_metrics(self, metrics, step):
        self.rows.append((step, dict(metrics)))

    def save(self):
        pass


def _wang_isola(module: _Module, data_dir: Path) -> tuple[float, float]:
    """SsnL/align_uniform's align_loss / uniform_loss, written from their definition, on STS-B dev."""
    pairs = load_task(data_dir, "stsb", "dev")["dev"]
    pos = [i for i, s in enumerate(pairs.scores) if s > 4.0]
    x = F.normalize(module.encode([pairs.sent1[i] for i in pos]).double(), dim=-1)
    y = F.normalize(module.encode([pairs.sent2[i] for i in pos]).double(), dim=-1)
    sentences = list(dict.fromkeys([*pairs.sent1, *pairs.sent2]))
    z = F.normalize(module.encode(sentences).double(), dim=-1)
    align = (x - y).norm(p=2, dim=1).pow(2).mean()
    uniform = torch.pdist(z, p=2).pow(2).mul(-2).exp().mean().log()
    return float(align), float(uniform)


def test_every_n_steps_on_stsb_dev_at_wang_and_isolas_definitions(caplog):
    data_dir = _data_dir()
    callback = AlignUniform(str(data_dir), every_n_steps=10)
    module, logger = _Module(), _Logger()
    trainer = SimpleNamespace(global_step=0, is_global_zero=True, loggers=[logger])
    with caplog.at_level(logging.INFO, logger="cselab.callbacks.align_uniform"):
        callback.on_train_start(trainer, module)
        for step in range(1, 26):
            trainer.global_step = step
            module.shift = 0.01 * step
            callback.on_train_batch_end(trainer, module, None, None, step - 1)
            callback.on_train_batch_end(trainer, module, None, None, step - 1)   # accumulation: the same step again
        callback.on_train_end(trainer, module)
    assert [step for step, _ in logger.rows] == [0, 10, 20]
    assert [h["step"] for h in callback.history] == [0, 10, 20]
    assert {enc for _, enc in module.calls} == {"dev"}   # the checkpoint-selection encoder
    module.shift = 0.01 * 20
    align, uniform = _wang_isola(module, data_dir)
    last = logger.rows[-1][1]
    assert last[ALIGNMENT_METRIC] == pytest.approx(align, rel=1e-9)
    assert last[UNIFORMITY_METRIC] == pytest.approx(uniform, rel=1e-9)
    assert last[SECONDS_METRIC] >= 0
    assert logger.rows[0][1][ALIGNMENT_METRIC] != pytest.approx(align)   # the trajectory moves with the model
    # the cost is in the log: each measurement's seconds, and the total with its share of the fit
    text = caplog.text
    assert "step 10: align" in text and "s in all" in text
    assert "align_uniform: 3 measurements" in text and "% of its" in text
    # a resumed run continues the trajectory (kept in checkpoints)
    again = AlignUniform(str(data_dir), every_n_steps=10)
    again.load_state_dict(callback.state_dict())
    assert again.history == callback.history and again.seconds_total == callback.seconds_total


@pytest.mark.parametrize(("kwargs", "key"), [({"every_n_steps": 0}, "every_n_steps"), ({"split": "train"}, "split"),
                                             ({"encoder": "train"}, "encoder")])
def test_bad_arguments_name_the_key(kwargs, key):
    with pytest.raises(ValueError, match=f"callbacks.align_uniform.{key}="):
        AlignUniform("data", **kwargs)


def _config(*overrides: str) -> dict:
    import cselab.io.config  # noqa: F401  (resolvers)

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=list(overrides))
    from omegaconf import OmegaConf

    return OmegaConf.to_container(cfg, resolve=False)


def _callbacks(*overrides: str) -> dict:
    return _config(*overrides)["callbacks"]


def test_the_fig2_experiment_is_the_simcse_row_plus_the_callback():
    """scripts/parity_snapshot.py takes simcse/unsup_bert_base's recorded case for it (SAME_AS_RECORDED)."""
    fig2, row = _config("experiment=simcse/unsup_fig2_bert_base"), _config("experiment=simcse/unsup_bert_base")
    assert fig2.pop("callbacks") != row.pop("callbacks")
    assert fig2.pop("group") == "simcse/unsup_fig2_bert_base" and row.pop("group") == "simcse/unsup_bert_base"
    assert fig2 == row


def test_off_by_default_on_in_simcse_fig2():
    from cselab.run.assemble import build_callbacks

    default = _callbacks()["align_uniform"]
    assert default["_target_"] == "cselab.callbacks.align_uniform.AlignUniform" and default["enabled"] is False
    fig2 = _callbacks("experiment=simcse/unsup_fig2_bert_base")["align_uniform"]
    assert fig2["enabled"] is True and fig2["every_n_steps"] == 10 and fig2["split"] == "dev"
    assert (fig2["threshold"], fig2["alpha"], fig2["t"]) == (4.0, 2.0, 2.0)
    node = {k: v for k, v in fig2.items() if k not in ("data_dir", "batch_size")}
    built = build_callbacks({"sts": {"_target_": "lightning.Callback"}, "align_uniform": {**node, "data_dir": "d"}},
                            {})
    assert isinstance(built["align_uniform"], AlignUniform)
    assert "align_uniform" not in build_callbacks(
        {"sts": {"_target_": "lightning.Callback"}, "align_uniform": {**node, "enabled": False, "data_dir": "d"}}, {})


@pytest.mark.integration
def test_a_run_logs_the_trajectory_to_csv_and_the_report_draws_it(tmp_path, tiny_bert_dir):
    data_dir = _data_dir()
    env = {**os.environ, "CSELAB_DATA_DIR": str(data_dir), "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline",
           "OMP_NUM_THREADS": "1"}
    run_dir = tmp_path / "run"
    proc = forked.run(
        [sys.executable, str(ROOT / "run.py"), "method=simcse", f"backbone.name_or_path={tiny_bert_dir}",
         "trainer.max_steps=4", "trainer.val_check_interval=2", "data.batch_size=8", "eval.test_tasks=[stsb]",
         "callbacks.align_uniform.enabled=true", "callbacks.align_uniform.every_n_steps=2", f"hydra.run.dir={run_dir}"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    assert "align_uniform: 3 measurements" in (proc.stdout + proc.stderr + "".join(
        p.read_text() for p in run_dir.glob("*.log")))
    rows = [r for r in csv.DictReader(open(run_dir / "csv" / "metrics.csv")) if r.get(ALIGNMENT_METRIC)]
    assert [int(r["step"]) for r in rows] == [0, 2, 4]
    out = tmp_path / "fig"
    from cselab.cli.report import main as report_main

    assert report_main([str(run_dir), "--figures", str(out), "--out", str(tmp_path / "r.md")]) == 0
    series = json.loads((out / "align_uniform.json").read_text())["series"]
    assert len(series) == 1 and series[0]["step"] == [0, 2, 4]
    assert series[0]["y"] == [float(r[ALIGNMENT_METRIC]) for r in rows]
    assert series[0]["x"] == [float(r[UNIFORMITY_METRIC]) for r in rows]
    assert yaml.safe_load((run_dir / ".hydra" / "overrides.yaml").read_text())
