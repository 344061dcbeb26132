"""One experiment config and one sweep config of each paper, composed as a user launches them and run end to end
(``cselab.run.flow.run``: train with ``trainer.fast_dev_run``, validate, test, write results) on a tiny BERT with its MLM
head, the real STS-B files and a tiny corpus / NLI csv standing in for the full data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import open_dict

import cselab.io.config  # noqa: F401  (resolvers)
from cselab.model.spec import ConfigError
from tests.conftest import run

ROOT = Path(__file__).resolve().parents[1]
CONF = str(ROOT / "conf")
SENTENCES = ["a man is playing a guitar", "the cat sat on the mat", "two dogs are running in the park",
             "it is raining today", "a woman is slicing an onion", "birds fly in the sky"]
MLM_ON = "method.mlm={weight:0.1,decay:0.95,decay_steps:100,probability:0.15}"
CASES = [  # (paper, "experiment" | "sweep", name, the sweep values of one job)
    ("SimCSE", "experiment", "simcse/unsup_bert_base", []),
    ("PromptBERT", "experiment", "promptbert/unsup_bert_base", []),
    ("PromptBERT", "sweep", "promptbert_table8", ["+objective=different_templates_denoise"]),
    ("PromptBERT", "sweep", "promptbert_table9", ["method.pooler=topk", "method.topk_denoise=true"]),
    ("CoT-BERT", "experiment", "cot_bert/unsup_bert_base", []),
    ("CoT-BERT", "sweep", "cot_bert_table6", ["method.denoise=pad"]),
    ("DCPCSE", "experiment", "dcpcse/unsup_bert_base", []),
    ("DCPCSE", "sweep", "dcpcse_table2", [MLM_ON]),
    ("PromCSE", "experiment", "promcse/sup_eh_bert_base", []),
    ("PromCSE", "sweep", "promcse_table3", ["tuning.variant=layer_shared"]),
    ("PromCSE", "sweep", "promcse_table4", ["loss.margin=0.2"]),
]


def _fast_dev_config(kind: str, name: str, values: list[str], tmp_path: Path, mlm_dir, data_dir):
    """The composed ``kind=name`` config plus ``values`` on the tiny MLM BERT with ``trainer.fast_dev_run``,
    training on a tiny corpus / NLI csv written to ``tmp_path``, testing STS-B only."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(SENTENCES) + "\n")
    nli = tmp_path / "nli.csv"
    nli.write_text("sent0,sent1,hard_neg\n" + "".join(f"{s},{s} today,birds fly\n" for s in SENTENCES))
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        cfg = compose("config", overrides=[
            f"{kind}={name}", *values, f"backbone.name_or_path={mlm_dir}", "backbone.family=bert",
            "trainer.fast_dev_run=true", "trainer.enable_progress_bar=false", "data.batch_size=4",
            f"data_dir={data_dir}", "eval.test_tasks=[stsb]",
        ])
    with open_dict(cfg):
        cfg.data.path = str(nli if cfg.setting.name == "sup" else corpus)
    return cfg


@pytest.mark.integration
@pytest.mark.parametrize(("paper", "kind", "name", "values"), CASES, ids=[f"{c[1]}={c[2]}" for c in CASES])
def test_paper_config_runs_with_fast_dev_run(paper, kind, name, values, tmp_path, tiny_mlm_dir, sts_data_dir):
    cfg = _fast_dev_config(kind, name, values, tmp_path, tiny_mlm_dir, sts_data_dir)
    results = run(cfg, tmp_path / "run")
    saved = json.loads((tmp_path / "run" / "results.json").read_text())
    assert saved["test"]["stsb"] == pytest.approx(results["test"]["stsb"])
    assert -100 <= saved["test"]["stsb"] <= 100
    assert saved["config"]["method"]["name"] == cfg.method.name
    if cfg.method.train:
        assert saved["global_step"] == 1 and len(saved["val_curve"]) == 1
    for item in values:  # the job's sweep value reached the run's config
        key, value = item.lstrip("+").split("=", 1)
        if key != "objective" and not value.startswith("{"):
            node = saved["config"]
            for part in key.split("."):
                node = node[part]
            assert str(node).lower() == value.lower()



BF16_CASES = [c for c in CASES if c[1] == "experiment"] + [("DCPCSE", "sweep", "dcpcse_table2", [MLM_ON])]


@pytest.mark.integration
@pytest.mark.parametrize(("paper", "kind", "name", "values"), BF16_CASES, ids=[c[2] for c in BF16_CASES])
def test_paper_config_trains_under_bf16_mixed(paper, kind, name, values, tmp_path, tiny_mlm_dir, sts_data_dir):
    """``trainer.precision=bf16-mixed``, the GPU default (``auto``), through Lightning's CPU autocast: training,
    validation and the bf16 evaluator run end to end (``test_contract`` checks the bf16 losses and gradients)."""
    cfg = _fast_dev_config(kind, name, [*values, "trainer.precision=bf16-mixed", "eval.precision=bf16"],
                           tmp_path, tiny_mlm_dir, sts_data_dir)
    results = run(cfg, tmp_path / "run")
    saved = json.loads((tmp_path / "run" / "results.json").read_text())
    assert saved["global_step"] == 1 and len(saved["val_curve"]) == 1
    assert saved["config"]["trainer"]["precision"] == "bf16-mixed"
    assert -100 <= results["test"]["stsb"] <= 100


@pytest.mark.integration
def test_activation_checkpointing_runs_end_to_end_and_refuses_deep_prefixes(tmp_path, tiny_mlm_dir, sts_data_dir):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(SENTENCES) + "\n")
    common = [f"backbone.name_or_path={tiny_mlm_dir}", "backbone.family=bert", "trainer.fast_dev_run=true",
              "trainer.enable_progress_bar=false", "data.batch_size=4", f"data_dir={sts_data_dir}",
              "eval.test_tasks=[stsb]", f"data.path={corpus}", "activation_checkpointing=true"]
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        cfg = compose("config", overrides=["experiment=promptbert/unsup_bert_base", *common])
        deep = compose("config", overrides=["experiment=dcpcse/unsup_bert_base", *common])
    results = run(cfg, tmp_path / "run")
    assert results["global_step"] == 1 and -100 <= results["test"]["stsb"] <= 100
    with pytest.raises(ConfigError, match="tuning.variant=deep"):  # refused by validate, before loading
        run(deep, tmp_path / "deep")
    assert not (tmp_path / "deep").exists()
