"""MTEB: the cselab encoder follows MTEB's protocol and MTEB's STS score equals cselab's evaluator on the same data."""

from __future__ import annotations

import json

import lightning as L
import numpy as np
import pytest
import torch

pytest.importorskip("mteb")

import mteb  # noqa: E402

from cselab.data.sts import load_task  # noqa: E402
from cselab.evaluation.mteb import LOCAL_TASK_NAMES, CselabMTEBEncoder, local_sts_task  # noqa: E402
from cselab.evaluation.sts import STSEvaluator  # noqa: E402

SENTENCES = ["a man is playing a guitar", "the cat sat on the mat", "two dogs are running in the park",
             "a woman is slicing an onion", "birds fly"]


def _sup_promptbert(make_method):
    """sup PromptBERT: template, [MASK] pooling, MLM-transform head and the template bias at eval."""
    m = make_method("promptbert", "bert", setting="sup", pooler="mask", denoise="position", prompt="promptbert",
                    head="mlm_transform", head_on="each", mlp_only_train=False, denoise_at_eval=True)
    torch.manual_seed(7)
    with torch.no_grad():  # trained-looking head, so that the head and the bias matter
        for p in m.head.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return m.eval()


def test_encoder_is_the_methods_encode_through_mteb_batches(make_method):
    """Template, pooling, head and template bias as at test: MTEB's DataLoader of text batches in, the
    method's ``encode`` rows out (same order, float32)."""
    method = _sup_promptbert(make_method)
    encoder = CselabMTEBEncoder(method, name="test/promptbert-sup")
    assert isinstance(encoder, mteb.models.EncoderProtocol)
    assert encoder.mteb_model_meta.name == "test/promptbert-sup"
    loader = torch.utils.data.DataLoader([{"text": s} for s in SENTENCES], batch_size=2)
    got = encoder.encode(loader, task_metadata=None, hf_split="test", hf_subset="default")
    expected = method.encode(SENTENCES).numpy()
    assert got.dtype == np.float32 and got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6)


def test_encoder_refuses_non_text_batches(make_method):
    encoder = CselabMTEBEncoder(make_method("baseline", "bert", pooler="avg", head="none", train=False))
    with pytest.raises(ValueError, match="text only"):
        encoder.encode([{"image": [1]}])


def test_local_sts12_concatenates_the_subsets(sts_data_dir):
    task = local_sts_task("sts12", sts_data_dir)
    n = sum(len(p) for p in load_task(sts_data_dir, "sts12", "test").values())
    assert task.metadata.name == LOCAL_TASK_NAMES["sts12"] and task.metadata.main_score == "cosine_spearman"
    assert len(task.dataset["test"]) == n == 3108


@pytest.mark.parametrize("task", ["stsb", "sickr", "sts16"])
def test_mteb_spearman_equals_the_evaluator_on_the_local_data(make_method, sts_data_dir, task):
    """MTEB's cosine_spearman on the local task x 100 == cselab's evaluator (same pairs, same encode)."""
    method = make_method("baseline", "bert", pooler="avg", head="none", train=False).eval()
    result = mteb.evaluate(CselabMTEBEncoder(method), local_sts_task(task, sts_data_dir), cache=None,
                           show_progress_bar=False)
    (task_result,) = result.task_results
    ours = STSEvaluator(sts_data_dir).evaluate(method.encode, tasks=[task])[task]
    assert 100 * task_result.get_score() == pytest.approx(ours, abs=1e-4)
    assert task_result.scores["test"][0]["main_score"] == task_result.scores["test"][0]["cosine_spearman"]


def test_cli_scores_a_checkpoint_on_local_stsb_and_compares(make_method, sts_data_dir, tmp_path, capsys):
    from cselab.cli.mteb import main

    method = _sup_promptbert(make_method)
    trainer = L.Trainer(max_steps=0, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, default_root_dir=tmp_path)
    trainer.strategy.connect(method)
    trainer.save_checkpoint(tmp_path / "m.ckpt")
    assert main([str(tmp_path / "m.ckpt"), "--tasks", "STSBenchmark", "--local", str(sts_data_dir),
                 "--compare"]) == 0
    out = json.loads(capsys.readouterr().out)
    (row,) = out["scores"]
    assert row["task"] == LOCAL_TASK_NAMES["stsb"]
    assert abs(row["difference"]) < 1e-3 and -100 <= row["mteb"] <= 100


def test_cli_refusals(capsys, sts_data_dir, tiny_bert_dir):
    from cselab.cli.mteb import main

    assert main([str(tiny_bert_dir), "--tasks", "ArguAna", "--local", str(sts_data_dir)]) == 2
    assert "--local builds only" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main([str(tiny_bert_dir), "--compare"])
    assert exit_info.value.code == 2
