"""SentEval transfer tasks (#23): the readers on the real files, the protocol against a sequential transcription of
SentEval's classifiers, the batched grid against a loop of single trainings, refusals, the run and the CLI."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.model_selection import StratifiedKFold

from cselab.data import transfer as data_transfer
from cselab.data.transfer import (
    TRANSFER_TASKS,
    TransferSplit,
    TransferTask,
    check_transfer_files,
    load_transfer_task,
)
from cselab.evaluation.logreg import ClassifierConfig, Problem, fit_grid, fit_one, initial_weights
from cselab.evaluation.transfer import PROTOCOLS, TransferProtocol, _features, run_classifier

#: the issue's counts: (split sizes, label balance) per task on SentEval's files
COUNTS = {
    "mr": ({"all": 10662}, {"all": {1: 5331, 0: 5331}}),
    "cr": ({"all": 3775}, {"all": {1: 2407, 0: 1368}}),
    "subj": ({"all": 10000}, {"all": {1: 5000, 0: 5000}}),
    "mpqa": ({"all": 10606}, {"all": {1: 3312, 0: 7294}}),
    "sst2": ({"train": 67349, "valid": 872, "test": 1821},
             {"train": {1: 37569, 0: 29780}, "valid": {1: 444, 0: 428}, "test": {1: 909, 0: 912}}),
    "trec": ({"train": 5452, "test": 500}, None),
    "mrpc": ({"train": 4076, "test": 1725}, {"train": {1: 2753, 0: 1323}, "test": {1: 1147, 0: 578}}),
}


@pytest.mark.parametrize("task", TRANSFER_TASKS)
def test_real_files_load_with_senteval_counts_labels_and_order(sts_data_dir, task):
    loaded = load_transfer_task(sts_data_dir, task)
    sizes, balance = COUNTS[task]
    assert {k: len(v) for k, v in loaded.splits.items()} == sizes
    if balance:
        assert {k: dict(Counter(v.labels.tolist())) for k, v in loaded.splits.items()} == balance
    for split in loaded.splits.values():  # SentEval's order: stable sort by (tokens, label) (MRPC: A, B, label)
        keys = [(len(s.split()), len(p.split()) if split.pairs else 0, int(y))
                for s, p, y in zip(split.sentences, split.pairs or split.sentences, split.labels, strict=True)]
        assert keys == sorted(keys)
    if task == "trec":
        assert sorted(set(loaded.splits["train"].labels.tolist())) == [0, 1, 2, 3, 4, 5]
    if task == "mrpc":
        assert loaded.splits["train"].pairs is not None and len(loaded.splits["train"].pairs) == 4076


def test_truncated_or_missing_file_is_refused_before_encoding(sts_data_dir, tmp_path):
    root = tmp_path / "senteval" / "downstream" / "MR"
    root.mkdir(parents=True)
    src = sts_data_dir / "senteval" / "downstream" / "MR"
    shutil.copy(src / "rt-polarity.neg", root / "rt-polarity.neg")
    lines = (src / "rt-polarity.pos").read_bytes().splitlines(keepends=True)
    (root / "rt-polarity.pos").write_bytes(b"".join(lines[:-10]))
    with pytest.raises(ValueError, match=r"rt-polarity\.pos holds 5,321 samples, SentEval's file holds 5,331"):
        check_transfer_files(tmp_path, ["mr"])
    with pytest.raises(FileNotFoundError, match=r"TREC.*train_5500\.label not found \(expected 5,452"):
        check_transfer_files(tmp_path, ["trec"])
    with pytest.raises(ValueError, match="unknown transfer task 'sst5'"):
        check_transfer_files(tmp_path, ["sst5"])


def test_mrpc_features_are_abs_difference_and_product():
    """mrpc.py:78-87: np.c_[|u - v|, u * v] (not [u, v, |u - v|, u * v])."""
    table = {"a": torch.tensor([1.0, -2.0]), "b": torch.tensor([3.0, 5.0])}
    task = TransferTask("mrpc", {"train": TransferSplit(["a"], np.array([1]), ["b"])}, 2, "kfold")
    feats = _features(task, lambda ss: torch.stack([table[s] for s in ss]))
    assert feats["train"].tolist() == [[2.0, 7.0, 3.0, -10.0]]


@pytest.fixture(scope="module")
def small_task_data():
    gen = torch.Generator().manual_seed(0)
    n, d, c = 160, 12, 3
    y = torch.randint(0, c, (n,), generator=gen)
    X = torch.randn(n, d, generator=gen, dtype=torch.float64) + torch.nn.functional.one_hot(y, d).double() * 1.2
    return X, y, c


@pytest.mark.parametrize("optim", ["adam", "rmsprop"])
def test_batched_grid_equals_a_loop_of_single_trainings(small_task_data, optim):
    """Same weights and the same early-stopping epoch as SentEval's classifier trained problem by problem (float64;
    problems of different sizes, with validation rows or SentEval's 5 % split)."""
    X, y, c = small_task_data
    cfg = ClassifierConfig(optim, batch_size=16, tenacity=2, epoch_size=2, max_epoch=40)
    folds = list(StratifiedKFold(4, shuffle=True, random_state=1111).split(np.zeros((len(y), 1)), y.numpy()))
    problems = [Problem(tr, l2, dev=te) for l2 in (1e-5, 1e-2) for tr, te in folds]
    problems += [Problem(np.arange(150), 1e-3, validation_split=0.05), Problem(np.arange(97), 1e-4, dev=np.arange(97, 160))]
    grid = fit_grid(X, y, c, problems, cfg)
    epochs = set()
    for problem, got in zip(problems, grid, strict=True):
        ref = fit_one(X, y, c, problem, cfg)
        assert (got.epochs, got.best_epoch, got.best_accuracy) == (ref.epochs, ref.best_epoch, ref.best_accuracy)
        torch.testing.assert_close(got.weight, ref.weight, rtol=0, atol=1e-12)
        torch.testing.assert_close(got.bias, ref.bias, rtol=0, atol=1e-12)
        epochs.add(got.epochs)
    assert len(epochs) > 1  # problems stopped at different epochs: the per-problem early stopping was exercised


def test_initial_weights_are_nn_linear_after_manual_seed_and_leave_the_rng():
    state = torch.random.get_rng_state()
    w, b = initial_weights(5, 2, 1111)
    assert torch.equal(torch.random.get_rng_state(), state)
    torch.manual_seed(1111)
    layer = torch.nn.Linear(5, 2)
    assert torch.equal(w, layer.weight.detach()) and torch.equal(b, layer.bias.detach())


def _senteval_inner_kfold(X, y, c, proto):
    """validation.py:57-107 transcribed with a loop of single trainings (the reference of run_classifier)."""
    k, grid, cfg = proto.kfold, proto.l2_grid, proto.classifier
    dev_results, test_results = [], []
    for tr, te in StratifiedKFold(k, shuffle=True, random_state=1111).split(np.zeros((len(y), 1)), y.numpy()):
        scores = []
        for reg in grid:
            inner = StratifiedKFold(k, shuffle=True, random_state=1111).split(np.zeros((len(tr), 1)), y.numpy()[tr])
            accs = [fit_one(X, y, c, Problem(tr[itr], reg, dev=tr[ite]), cfg).best_accuracy for itr, ite in inner]
            scores.append(round(100 * np.mean(accs), 2))
        opt = grid[int(np.argmax(scores))]
        dev_results.append(np.max(scores))
        final = fit_one(X, y, c, Problem(tr, opt, validation_split=0.05), cfg)
        pred = (X[te] @ final.weight.T + final.bias).argmax(1)
        test_results.append(round(100 * (1.0 * int((pred == y[te]).sum()) / len(te)), 2))
    return round(np.mean(dev_results), 2), round(np.mean(test_results), 2)


def test_inner_kfold_protocol_equals_senteval_transcription(small_task_data):
    """Folds from StratifiedKFold(shuffle, random_state=1111) on the rows in order, the L2 chosen per outer fold by the
    rounded mean inner accuracy, the final classifier on a 5 % split: the batched protocol gives SentEval's numbers."""
    X, y, c = small_task_data
    proto = TransferProtocol("fasttest", 3, ClassifierConfig("rmsprop", 32, 2, 2, max_epoch=20), (1e-5, 1e-2))
    task = TransferTask("mr", {"all": TransferSplit([str(i) for i in range(len(y))], y.numpy())}, c, "inner_kfold")
    got = run_classifier(task, {"all": X}, proto)
    ref_dev, ref_acc = _senteval_inner_kfold(X, y, c, proto)
    assert (got["devacc"], got["acc"]) == (float(ref_dev), float(ref_acc))
    assert len(got["l2"]) == 3


def test_protocol_files_are_the_evaluation_py_modes():
    from omegaconf import OmegaConf

    conf = Path(__file__).resolve().parents[1] / "conf" / "transfer"
    for mode, expected in PROTOCOLS.items():
        node = OmegaConf.to_container(OmegaConf.load(conf / f"{mode}.yaml"))
        assert TransferProtocol.from_config(node) == expected
    assert PROTOCOLS["test"].l2_grid == (1e-5, 1e-4, 1e-3, 1e-2)
    with pytest.raises(ValueError, match="transfer.classifier.nhid=50"):
        TransferProtocol.from_config({"classifier": {"nhid": 50}})


def _tiny_transfer_dir(tmp_path: Path, monkeypatch) -> Path:
    """TREC and MRPC files of a few lines each (the expected counts patched to them)."""
    root = tmp_path / "senteval" / "downstream"
    (root / "TREC").mkdir(parents=True)
    (root / "MRPC").mkdir(parents=True)
    words = ["the cat sat", "a dog ran", "birds fly", "a man is playing a guitar", "it is raining today",
             "two dogs are running in the park", "a woman is slicing an onion", "the dog ran"]
    labels = ["ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM"]
    train = [f"{labels[i % 6]}:x {words[i % 8]} {i % 3}" for i in range(48)]
    (root / "TREC" / "train_5500.label").write_text("\n".join(train) + "\n", encoding="latin-1")
    (root / "TREC" / "TREC_10.label").write_text("\n".join(train[:12]) + "\n", encoding="latin-1")
    rows = [f"{i % 2}\t1\t2\t{words[i % 8]}\t{words[(i + i % 2) % 8]}" for i in range(40)]
    header = "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String"
    (root / "MRPC" / "msr_paraphrase_train.txt").write_text("\n".join([header, *rows]) + "\n", encoding="utf-8")
    (root / "MRPC" / "msr_paraphrase_test.txt").write_text("\n".join([header, *rows[:10]]) + "\n", encoding="utf-8")
    monkeypatch.setitem(data_transfer.TASK_FILES, "trec", ("TREC", (("train_5500.label", 48), ("TREC_10.label", 12))))
    monkeypatch.setitem(data_transfer.TASK_FILES, "mrpc", ("MRPC", (("msr_paraphrase_train.txt", 40),
                                                                   ("msr_paraphrase_test.txt", 10))))
    return tmp_path


def test_cli_transfer_on_a_backbone_writes_results(tmp_path, tiny_bert_dir, monkeypatch, capsys):
    import json

    from cselab.cli import main

    data = _tiny_transfer_dir(tmp_path / "data", monkeypatch)
    out = tmp_path / "transfer.json"
    assert main(["transfer", str(tiny_bert_dir), "--tasks", "trec", "mrpc", "--mode", "fasttest",
                 "--data-dir", str(data), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "TREC" in printed and "MRPC" in printed and "wall time" in printed
    results = json.loads(out.read_text())
    assert set(results["transfer"]) == {"trec", "mrpc"} and "f1" in results["transfer"]["mrpc"]
    assert results["transfer_protocol"]["mode"] == "fasttest"
    assert results["transfer_protocol"]["senteval_commit"].startswith("5d6dc117")
    assert 0 <= results["transfer"]["trec"]["acc"] <= 100
    assert main(["transfer", str(tiny_bert_dir), "--tasks", "mr", "--data-dir", str(data)]) == 1
    assert "rt-polarity.pos not found" in capsys.readouterr().err


def test_run_scores_transfer_tasks_in_the_test_phase(tmp_path, tiny_bert_dir, sts_data_dir, monkeypatch):
    """A method.train=false run with eval.transfer_tasks: results.json holds the accuracies and the protocol; an
    unknown mode and a missing file are refused before the backbone loads."""
    import json

    from tests.conftest import compose_tiny_run, run

    data = _tiny_transfer_dir(tmp_path / "data", monkeypatch)
    for sub in ("STS",):
        (data / "senteval" / "downstream" / sub).symlink_to(sts_data_dir / "senteval" / "downstream" / sub)
    cfg = compose_tiny_run(tmp_path, tiny_bert_dir, data, "method=baseline", "method.pooler=avg",
                           "eval.test_tasks=[stsb]", "eval.transfer_tasks=[trec,mrpc]", "eval.transfer_mode=fasttest")
    results = run(cfg, tmp_path / "run")
    written = json.loads((tmp_path / "run" / "results.json").read_text())
    assert set(written["transfer"]) == {"trec", "mrpc"} and written["transfer_protocol"]["kfold"] == 5
    assert results["transfer"]["trec"]["acc"] == written["transfer"]["trec"]["acc"]
    from cselab.model.spec import ConfigError

    bad = compose_tiny_run(tmp_path, tiny_bert_dir, data, "method=baseline", "eval.test_tasks=[stsb]",
                           "eval.transfer_tasks=[trec]", "eval.transfer_mode=slow", "overwrite=true")
    with pytest.raises(ConfigError, match="eval.transfer_mode='slow'"):
        run(bad, tmp_path / "run2")
    missing = compose_tiny_run(tmp_path, tiny_bert_dir, data, "method=baseline", "eval.test_tasks=[stsb]",
                               "eval.transfer_tasks=[subj]")
    with pytest.raises(FileNotFoundError, match="subj.objective not found"):
        run(missing, tmp_path / "run3")
