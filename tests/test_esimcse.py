"""ESimCSE (caskcsg/sentemb ``ESimCSE``) against its official code, on tiny random backbones.

The references are the official lines TRANSCRIBED here and RUN on the same inputs (the official repository pins
transformers 4.2.1, which cannot be imported beside this one): ``train.py:461-528`` (the repetition), ``models.py:
96-293`` with ``trainers.py:619-636`` (one training step: the online forward, the momentum update, the loss with
the queue, the momentum forward, the enqueue).  The pinned lists below were produced by running the transcription.
"""

from __future__ import annotations

import copy
import random
import warnings
from pathlib import Path

import lightning as L
import pytest
import torch
from torch import nn

from cselab.methods.cached_step import CachedStep
from cselab.methods.esimcse.loss import QueueInfoNCE
from cselab.methods.esimcse.momentum import MomentumQueue, init_weights_bert_421
from cselab.methods.esimcse.repetition import (
    PLAN_KEY,
    RepetitionCollate,
    repeat_tokens,
    repeat_words,
    repetition_plan,
)
from cselab.model.spec import ConfigError
from tests import forked
from tests.conftest import no_dropout

WIKI = Path(__file__).resolve().parent / "data" / "wiki1m_head300.txt"


def _wiki(n: int = 120) -> list[str]:
    return [t for t in WIKI.read_text(encoding="utf-8").splitlines() if t.strip()][:n]


# ---------------------------------------------------------------------------------- official code, transcribed
def official_bpe(sent_features_input_ids: list[list[int]], total: int, dup_rate: float,
                 record: list | None = None) -> list[list[int]]:
    """``ESimCSE/train.py:498-528`` (dup_type == "bpe"), on the module-level ``random`` as the official code
    (``record``: the drawn ``dup`` lists of the repeated rows are appended to it)."""
    new_input_ids_all = []
    for idx, input_ids in enumerate(sent_features_input_ids):
        input_len = len(input_ids)
        if idx >= total and int(dup_rate * input_len) > 0:
            add_len = random.randrange(min(10, int(dup_rate * input_len)))
            dup = sorted(random.sample(range(1, input_len - 1), add_len))  # not [CLS]
            if record is not None:
                record.append(dup)
            new_input_ids = []
            for i, _id in enumerate(input_ids):
                if i in dup:
                    new_input_ids.append(_id)
                new_input_ids.append(_id)
        else:
            new_input_ids = input_ids
            if record is not None and idx >= total:
                record.append([])
        new_input_ids_all.append(new_input_ids)
    return new_input_ids_all


def official_word(sent1: list[str], dup_rate: float) -> list[str]:
    """``ESimCSE/train.py:461-478`` (dup_type == "word", add_stop False)."""
    new_sent1 = []
    for sent in sent1:
        sent_list = sent.split(" ")
        sent_len = len(sent_list)
        if sent_len > 0:
            add_len = random.randrange(min(10, sent_len, max(2, int(dup_rate * sent_len))))
            dup = sorted(random.sample(range(0, sent_len - 1), add_len))
            for i in dup:
                sent_list[i] = sent_list[i] + " " + sent_list[i]
            new_sent1.append(" ".join(sent_list))
        else:
            new_sent1.append(sent)
    return new_sent1


class OfficialESimCSE(nn.Module):
    """``BertForCL`` with ``momentum > 0``, ``pooler_type=cls`` (``models.py:339-354``), its weights given."""

    def __init__(self, bert: nn.Module, momentum_model: nn.Module, mlp: nn.Module, temp: float) -> None:
        super().__init__()
        self.bert, self.momentum_model, self.mlp, self.temp = bert, momentum_model, mlp, temp
        self.cos = nn.CosineSimilarity(dim=-1)  # Similarity, models.py:35-46

    def sim(self, x, y):
        return self.cos(x, y) / self.temp

    def cl_forward(self, input_ids, attention_mask, pre_z1=None, disable_dropout=False, momentum=0.0):
        """``models.py:96-293`` for two views, no MLM, one process."""
        batch_size, num_sent = input_ids.size(0), input_ids.size(1)
        token_type_ids = torch.zeros_like(input_ids)
        if disable_dropout and momentum > 0.0:
            input_ids, attention_mask, token_type_ids = input_ids[:, 0, :], attention_mask[:, 0, :], token_type_ids[:, 0, :]
            num_sent = 1
            outputs = self.momentum_model(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                                          return_dict=True)
        else:
            input_ids = input_ids.view((-1, input_ids.size(-1)))
            attention_mask = attention_mask.view((-1, attention_mask.size(-1)))
            token_type_ids = token_type_ids.view((-1, token_type_ids.size(-1)))
            outputs = self.bert(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                                return_dict=True)
            if momentum > 0.0:
                for param, param_m in zip(self.bert.parameters(), self.momentum_model.parameters()):  # noqa: B905
                    param_m.data = param_m.data * momentum + param.data * (1.0 - momentum)
        pooler_output = outputs.last_hidden_state[:, 0]
        pooler_output = pooler_output.view((batch_size, num_sent, pooler_output.size(-1)))
        pooler_output = self.mlp(pooler_output)
        if disable_dropout and momentum > 0.0:
            return pooler_output[:, 0].clone().detach()
        z1, z2 = pooler_output[:, 0], pooler_output[:, 1]
        cos_sim = self.sim(z1.unsqueeze(1), z2.unsqueeze(0))
        loss_fct = nn.CrossEntropyLoss()
        labels = torch.arange(cos_sim.size(0)).long()
        if pre_z1 is not None:
            cos_sim_neg = torch.cat((cos_sim, self.sim(z1.unsqueeze(1), pre_z1.unsqueeze(0))), 1)
            return loss_fct(cos_sim_neg, labels)
        return loss_fct(cos_sim, labels)


def official_compute_loss(model: OfficialESimCSE, inputs: dict, state: dict, neg_size: int, momentum: float):
    """``trainers.py:619-636``: the loss (to be back-propagated by the caller) and the queue ``state["pre_z1"]``."""
    model.train()
    loss = model.cl_forward(inputs["input_ids"], inputs["attention_mask"], pre_z1=state["pre_z1"],
                            disable_dropout=False, momentum=momentum)
    model.eval()
    with torch.no_grad():
        eval_z = model.cl_forward(inputs["input_ids"], inputs["attention_mask"], pre_z1=state["pre_z1"],
                                  disable_dropout=True, momentum=momentum)
    if state["pre_z1"] is None:
        state["pre_z1"] = eval_z.clone()
    else:
        state["pre_z1"] = torch.cat((state["pre_z1"], eval_z.clone()), 0)[-neg_size:]
    return loss


# ---------------------------------------------------------------------------------- helpers
def _esimcse(make_method, family: str = "bert", **options):
    method = make_method("esimcse", family, pooler="cls", head="mlp", mlp_only_train=True,
                         loss={"name": "infonce_queue", "_target_": "cselab.methods.esimcse.loss.QueueInfoNCE",
                               "temperature": 0.05},
                         options={"momentum": 0.9, "queue_size": 6, "dup_rate": 0.32, **options})
    method.log = lambda *a, **k: None  # no trainer attached
    return method


def _rows(collate: RepetitionCollate, texts: list[str], seed: int = 42) -> list[dict]:
    plan = repetition_plan(texts, collate.dup_rate, seed, collate.dup_type, lengths=collate.wrapped_lengths)
    return [{"text": t, PLAN_KEY: p} for t, p in zip(texts, plan, strict=True)]


# ---------------------------------------------------------------------------------- repetition
#: the first 6 sentences of tests/data/wiki1m_head300.txt, tiny BERT, max_seq_length 32, dup_rate 0.32, seed 42:
#: the positions the transcribed official code doubles (produced by running :func:`official_bpe`)
PINNED_BPE = [[1, 4, 9, 15, 18], [4, 24], [1, 2, 3, 7, 8, 14, 19, 30], [1, 7, 18, 20, 21, 23, 26, 28], [1, 8, 9, 15, 19, 26],
              [14, 23]]


def test_bpe_repetition_equals_the_official_prepare_features(bert_tokenizer) -> None:
    """Token repetition, stream and lengths: the collate's view 1 equals the official ``input_ids[i + total]``
    for the whole corpus (map batches of 50, as ``datasets.map`` hands the official function 1000)."""
    texts = _wiki(120)
    collate = RepetitionCollate(bert_tokenizer, 0.32, "bpe", max_seq_len=32)
    random.seed(42)
    official: list[list[int]] = []
    drawn: list[list[int]] = []
    for start in range(0, len(texts), 50):
        chunk = texts[start:start + 50]
        ids = bert_tokenizer(chunk + chunk, max_length=32, truncation=True)["input_ids"]
        official += official_bpe(ids, len(chunk), 0.32, drawn)[len(chunk):]
    assert drawn[:6] == PINNED_BPE
    rows = _rows(collate, texts)
    assert [r[PLAN_KEY] for r in rows] == drawn
    batch = collate(rows)
    for i, ref in enumerate(official):
        n = int(batch["attention_mask"][i, 1].sum())
        assert batch["input_ids"][i, 1, :n].tolist() == ref, i
        n0 = int(batch["attention_mask"][i, 0].sum())
        assert batch["input_ids"][i, 0, :n0].tolist() == bert_tokenizer(texts[i], max_length=32,
                                                                        truncation=True)["input_ids"]
    assert max(len(r) for r in official) > 32  # the repetition is not truncated again
    assert any(r[PLAN_KEY] == [] for r in rows) and any(len(r[PLAN_KEY]) >= 5 for r in rows)


def test_word_repetition_equals_the_official_prepare_features(bert_tokenizer) -> None:
    texts = _wiki(80)
    random.seed(7)
    official = official_word(list(texts), 0.32)
    collate = RepetitionCollate(bert_tokenizer, 0.32, "word", max_seq_len=32)
    rows = _rows(collate, texts, seed=7)
    assert [repeat_words(t, r[PLAN_KEY]) for t, r in zip(texts, rows, strict=True)] == official
    batch = collate(rows)
    for i, text in enumerate(official):
        n = int(batch["attention_mask"][i, 1].sum())
        assert batch["input_ids"][i, 1, :n].tolist() == bert_tokenizer(text, max_length=32, truncation=True)["input_ids"]


def test_repetition_on_roberta_keeps_the_first_token_and_the_seed_changes_the_draw(roberta_tokenizer) -> None:
    texts = _wiki(40)
    collate = RepetitionCollate(roberta_tokenizer, 0.3, "bpe", max_seq_len=32)
    batch = collate(_rows(collate, texts))
    assert (batch["input_ids"][:, :, 0] == roberta_tokenizer.cls_token_id).all()
    assert repeat_tokens([5, 6, 7, 8], [1, 2]) == [5, 6, 6, 7, 7, 8]
    other = repetition_plan(texts, 0.3, 43, "bpe", lengths=collate.wrapped_lengths)
    assert other != [r[PLAN_KEY] for r in _rows(collate, texts)]


# ---------------------------------------------------------------------------------- momentum encoder, loss
def test_momentum_encoder_init_and_update(make_method) -> None:
    method = _esimcse(make_method)
    online, mq = method.encoder, method.momentum
    pairs = list(zip(online.model.parameters(), mq.momentum_encoder.model.parameters(), strict=True))
    assert all(not pm.requires_grad for _, pm in pairs)
    assert not any(torch.equal(p, pm) for p, pm in pairs if p.dim() == 2)  # official: random, not a copy
    emb = mq.momentum_encoder.model.embeddings
    assert torch.equal(emb.LayerNorm.weight, torch.ones_like(emb.LayerNorm.weight))
    assert abs(float(emb.word_embeddings.weight.std()) - 0.02) < 0.003  # N(0, initializer_range)
    before = [pm.detach().clone() for _, pm in pairs]
    mq.update(online)
    for (p, pm), old in zip(pairs, before, strict=True):
        torch.testing.assert_close(pm, old * 0.9 + p * 0.1, rtol=0, atol=0)
    copied = MomentumQueue(online, 0.5, 4, init="copy")
    assert all(torch.equal(p, pm) for p, pm in zip(online.model.parameters(),
                                                    copied.momentum_encoder.model.parameters(), strict=True))
    layer = nn.Linear(3, 3)
    init_weights_bert_421(layer, 0.02)
    assert torch.equal(layer.bias, torch.zeros(3))


def test_queue_loss_value_and_gradients_equal_the_official_formula() -> None:
    torch.manual_seed(0)
    z = torch.randn(5, 2, 8, dtype=torch.float64, requires_grad=True)
    queue = torch.randn(7, 8, dtype=torch.float64)
    loss = QueueInfoNCE(0.05)(z, queue)
    loss.backward()
    z_ref = z.detach().clone().requires_grad_()
    ref = OfficialESimCSE(None, None, None, 0.05)
    z1, z2 = z_ref[:, 0], z_ref[:, 1]
    logits = torch.cat((ref.sim(z1.unsqueeze(1), z2.unsqueeze(0)), ref.sim(z1.unsqueeze(1), queue.unsqueeze(0))), 1)
    ref_loss = nn.CrossEntropyLoss()(logits, torch.arange(5))
    ref_loss.backward()
    torch.testing.assert_close(loss, ref_loss, rtol=1e-12, atol=0)
    torch.testing.assert_close(z.grad, z_ref.grad, rtol=1e-10, atol=1e-12)
    assert float(QueueInfoNCE(0.05)(z.detach())) < float(loss.detach())  # the queue's columns add negatives


@pytest.mark.parametrize("queue_size", [6, 3])  # 3 < B: the first append is kept whole (trainers.py:631-632)
def test_training_steps_equal_the_official_steps(make_method, queue_size) -> None:
    """Three steps (SGD between them): the loss, every gradient, the momentum encoder and the queue equal the
    transcribed official ``compute_loss`` on the same batches (dropout off on both: the masks are not the point)."""
    method = _esimcse(make_method, queue_size=queue_size)
    method.double()  # float64 on both sides: the comparison is of the arithmetic, not of float32 rounding
    no_dropout(method)
    ref = OfficialESimCSE(copy.deepcopy(method.encoder.model), copy.deepcopy(method.momentum.momentum_encoder.model),
                          copy.deepcopy(method.head), 0.05)
    ref.momentum_model.requires_grad_(False)
    texts = _wiki(12)
    rows = _rows(method.train_collate(), texts)
    batches = [method.train_collate()(rows[i:i + 4]) for i in (0, 4, 8)]
    opt = torch.optim.SGD([p for p in method.parameters() if p.requires_grad], lr=0.5)
    ref_opt = torch.optim.SGD([p for p in ref.parameters() if p.requires_grad], lr=0.5)
    state = {"pre_z1": None}
    method.on_train_epoch_start()
    for step, batch in enumerate(batches):
        method.train()
        opt.zero_grad()
        ref_opt.zero_grad()
        loss = method.training_step(batch, step)
        loss.backward()
        ref_loss = official_compute_loss(ref, batch, state, queue_size, 0.9)
        ref_loss.backward()
        torch.testing.assert_close(loss.detach(), ref_loss.detach(), rtol=1e-10, atol=0)
        ours = dict(method.encoder.model.named_parameters())
        for name, p in ref.bert.named_parameters():
            if p.grad is None:
                assert ours[name].grad is None or not ours[name].grad.any(), name
                continue
            torch.testing.assert_close(ours[name].grad, p.grad, rtol=1e-7, atol=1e-12, msg=lambda m, n=name: f"{n}: {m}")
        torch.testing.assert_close(method.head.dense.weight.grad, ref.mlp.dense.weight.grad, rtol=1e-7, atol=1e-12)
        for pm, rm in zip(method.momentum.momentum_encoder.model.parameters(), ref.momentum_model.parameters(),
                          strict=True):
            torch.testing.assert_close(pm, rm, rtol=1e-12, atol=1e-14)
        torch.testing.assert_close(method.momentum.queue, state["pre_z1"], rtol=1e-9, atol=1e-12)
        opt.step()
        ref_opt.step()
    assert method.momentum.queue.shape[0] == queue_size


def test_momentum_forward_is_in_eval_mode_and_the_model_stays_in_train_mode(make_method) -> None:
    method = _esimcse(make_method)
    method.train()
    batch = method.train_collate()(_rows(method.train_collate(), _wiki(4)))
    a = method.momentum.encode(batch, method._pool, method.head)
    b = method.momentum.encode(batch, method._pool, method.head)
    assert torch.equal(a, b)  # no dropout (the tiny BERT's rate is 0.1)
    assert method.head.training and method.encoder.training and not method.momentum.momentum_encoder.training


def test_export_is_the_online_encoder_without_the_momentum_copy(make_method, tmp_path) -> None:
    """What the paper evaluates (``sent_emb=True`` runs ``self.bert``, ``models.py:374-376``): the exported folder holds
    the online encoder (no ``momentum`` weight) and encodes as the method does."""
    from cselab.model.embedding import EmbeddingModel

    method = _esimcse(make_method)
    method.momentum.update(method.encoder)  # the momentum copy differs from the online encoder
    method.eval()
    method.model.save(tmp_path / "export")
    loaded = EmbeddingModel.load(tmp_path / "export")
    assert not any("momentum" in k for k in loaded.state_dict())
    sentences = _wiki(6)
    torch.testing.assert_close(loaded.encode(sentences), method.encode(sentences), rtol=1e-5, atol=1e-6)


def test_cached_step_gives_the_uncached_loss_and_gradients(make_method) -> None:
    results = []
    for chunk in (None, 3):
        method = _esimcse(make_method)
        method.float()
        no_dropout(method)
        method.cached_step = CachedStep(chunk) if chunk else None
        rows = _rows(method.train_collate(), _wiki(8))
        method.training_step(method.train_collate()(rows[:4]), 0)  # fills the queue
        method.zero_grad()
        loss = method.training_step(method.train_collate()(rows[4:]), 1)
        loss.backward()
        results.append((loss.detach(), {n: p.grad.clone() for n, p in method.named_parameters() if p.grad is not None},
                        method.momentum.queue.clone()))
    (l0, g0, q0), (l1, g1, q1) = results
    torch.testing.assert_close(l1, l0, rtol=1e-6, atol=0)
    assert g0.keys() == g1.keys() and g0
    for name in g0:
        torch.testing.assert_close(g1[name], g0[name], rtol=1e-4, atol=1e-7, msg=name)
    torch.testing.assert_close(q1, q0, rtol=1e-6, atol=1e-7)


# ---------------------------------------------------------------------------------- Lightning: epochs, resume
class _StopAt(L.Callback):
    """Write a checkpoint after ``step`` optimizer steps (as ``ModelCheckpoint`` writes one mid-epoch) and stop
    there: an interrupted run (the schedule stays the full run's)."""

    def __init__(self, step: int, save: Path | None) -> None:
        self.step, self.save = step, save

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step >= self.step:
            if self.save is not None:
                trainer.save_checkpoint(str(self.save))
            trainer.should_stop = True


def _fit(method, corpus: Path, tmp: Path, max_steps: int, ckpt: str | None = None, save: Path | None = None,
         stop_at: int | None = None):
    from cselab.data.unsup import UnsupDataModule

    method.log = L.LightningModule.log.__get__(method)
    dm = UnsupDataModule(method.train_collate(), path=str(corpus), batch_size=8, seed=42,
                         transform=method.prepare_train_set)
    trainer = L.Trainer(accelerator="cpu", devices=1, max_steps=max_steps, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                        limit_val_batches=0, default_root_dir=str(tmp),
                        callbacks=[_StopAt(stop_at, save)] if stop_at else [])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(method, datamodule=dm, ckpt_path=ckpt)
    return method


def test_queue_is_emptied_each_epoch_and_a_resumed_run_continues_its_queue(make_method, tmp_path) -> None:
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(_wiki(40)) + "\n", encoding="utf-8")  # 5 batches of 8 an epoch
    full = _esimcse(make_method, queue_size=100)
    no_dropout(full)
    _fit(full, corpus, tmp_path / "full", 7)
    assert full.momentum.queue.shape[0] == 16  # epoch 2's two steps only (trainers.py:452)

    first = _esimcse(make_method, queue_size=100)
    no_dropout(first)
    ckpt = tmp_path / "step3.ckpt"
    _fit(first, corpus, tmp_path / "first", 7, save=ckpt, stop_at=3)
    saved = torch.load(ckpt, map_location="cpu", weights_only=False)
    assert saved["esimcse_queue"]["queue"].shape[0] == 24
    assert any(k.startswith("momentum.momentum_encoder.") for k in saved["state_dict"])
    resumed = _esimcse(make_method, queue_size=100)
    no_dropout(resumed)
    _fit(resumed, corpus, tmp_path / "resumed", 7, ckpt=str(ckpt))
    torch.testing.assert_close(resumed.momentum.queue, full.momentum.queue, rtol=1e-5, atol=1e-6)
    for (name, p), q in zip(full.named_parameters(), resumed.parameters(), strict=True):
        torch.testing.assert_close(q, p, rtol=1e-5, atol=1e-6, msg=name)

    mid = _esimcse(make_method, queue_size=100)
    mid.on_load_checkpoint(saved)
    mid.trainer = None
    torch.testing.assert_close(mid.momentum.queue, saved["esimcse_queue"]["queue"])


# ---------------------------------------------------------------------------------- refusals
def test_refusals_are_named(make_method, bert_tokenizer) -> None:
    with pytest.raises(ConfigError, match="loss=infonce_queue"):
        make_method("esimcse", "bert", pooler="cls", head="mlp", options={})
    with pytest.raises(ConfigError, match="prompt=none"):
        make_method("esimcse", "bert", pooler="cls", head="mlp", prompt="promptbert", options={},
                    loss={"_target_": "cselab.methods.esimcse.loss.QueueInfoNCE"})
    with pytest.raises(ConfigError, match="setting=unsup"):
        make_method("esimcse", "bert", pooler="cls", head="mlp", setting="sup", options={},
                    loss={"_target_": "cselab.methods.esimcse.loss.QueueInfoNCE"})
    from cselab.methods.esimcse.repetition import add_repetition_column

    with pytest.raises(ConfigError, match="data.streaming"):
        add_repetition_column([{"text": "a"}], RepetitionCollate(bert_tokenizer, 0.3), 42)
    with pytest.raises(KeyError, match="repetition"):
        RepetitionCollate(bert_tokenizer, 0.3)([{"text": "a cat"}, {"text": "the dog"}])


# ---------------------------------------------------------------------------------- report, end to end
def test_report_shows_the_published_esimcse_rows(tmp_path) -> None:
    from test_report import _config, make_run

    from cselab.report.collect import collect

    scores = {t: 70.0 for t in ("sts12", "sts13", "sts14", "sts15", "sts16", "stsb", "sickr", "avg")}
    for backbone, avg in (("bert_base", 78.27), ("roberta_base", 77.44)):
        root = tmp_path / backbone
        make_run(root, "esimcse", scores=scores, overrides=["method=esimcse"],
                 config=_config(method="esimcse", backbone=backbone, loss__name="infonce_queue"))
        group = collect([root]).groups[0]
        assert group.paper("avg") == avg and "CoT-BERT Table 2" in group.published.source
    root = tmp_path / "minilm"
    make_run(root, "esimcse", scores=scores, overrides=["method=esimcse"],
             config=_config(method="esimcse", backbone="minilm_l6", loss__name="infonce_queue"))
    assert collect([root], paper_backbone="bert_base").groups[0].paper("avg") == 78.27


@pytest.mark.integration
def test_run_trains_tests_and_compares_with_simcse(tmp_path, tiny_bert_dir, sts_data_dir) -> None:
    """run.py method=esimcse (4 steps on the tiny BERT and the embedded corpus), then SimCSE on the same seed, then
    ``cselab compare`` of the two on the same test pairs."""
    import json
    import os
    import sys

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "CSELAB_DATA_DIR": str(sts_data_dir), "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline",
           "OMP_NUM_THREADS": "1"}
    for method in ("esimcse", "simcse"):
        proc = forked.run(
            [sys.executable, str(root / "run.py"), f"method={method}", f"backbone.name_or_path={tiny_bert_dir}",
             "trainer.max_steps=4", "trainer.val_check_interval=2", "data.batch_size=8", "seed=3",
             "eval.test_tasks=[stsb,sickr]", "trainer.enable_progress_bar=false", f"hydra.run.dir={tmp_path / method}"],
            cwd=root, env=env, capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    res = json.loads((tmp_path / "esimcse" / "results.json").read_text())
    assert res["global_step"] == 4 and set(res["test"]) == {"stsb", "sickr"}
    assert res["config"]["method"]["esimcse"]["queue_size"] == 160
    proc = forked.run([sys.executable, "-m", "cselab", "compare", str(tmp_path / "esimcse"), str(tmp_path / "simcse"),
                           "--n-resamples", "200"], cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "stsb" in proc.stdout.lower() or "sts-b" in proc.stdout.lower()


# ---------------------------------------------------------------------------------- DDP (2 CPU processes)
class _QueueDump(L.Callback):
    """Rank r's queue at the end of training, saved to ``out/queue{r}.pt``."""

    def __init__(self, out: Path):
        self.out = out

    def on_train_end(self, trainer, pl_module):
        torch.save(pl_module.momentum.queue.detach().clone(), self.out / f"queue{trainer.global_rank}.pt")


def test_ddp_gathers_the_batch_and_keeps_the_queue_per_rank(tmp_path, tiny_bert_dir) -> None:
    """``models.py:207-229``: z1, z2 gathered (first step, empty queue: the loss and gradients of one process on the
    global batch, cselab's gradient convention #9); ``trainers.py:626-636``: each rank queues its own batch only."""
    import json
    import shutil

    from test_ddp import _reference, _run_ddp

    from cselab.methods.registry import method_class

    nodrop = tmp_path / "nodrop"
    shutil.copytree(tiny_bert_dir, nodrop)
    cfg = json.loads((nodrop / "config.json").read_text())
    cfg.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    (nodrop / "config.json").write_text(json.dumps(cfg))

    def build():
        torch.manual_seed(0)
        return method_class("esimcse")(backbone={"name_or_path": str(nodrop), "family": "bert"},
                                       model={"pooler": "cls", "head": "mlp", "mlp_only_train": True},
                                       loss={"_target_": "cselab.methods.esimcse.loss.QueueInfoNCE"},
                                       options={"queue_size": 100})

    method = build()
    rows = _rows(method.train_collate(), _wiki(8))
    out = tmp_path / "ddp"
    out.mkdir()
    original = L.Trainer.__init__

    def with_dump(self, *args, callbacks=None, **kwargs):
        original(self, *args, callbacks=[*(callbacks or []), _QueueDump(out)], **kwargs)

    L.Trainer.__init__ = with_dump
    try:
        ranks = _run_ddp(method, rows, out, splits=[0, 4, 8], steps=2, equal=True)
    finally:
        L.Trainer.__init__ = original
    ref_loss, ref_grads = _reference(build(), rows)
    for rank in ranks:
        torch.testing.assert_close(rank["loss"], ref_loss, rtol=1e-5, atol=1e-6)
        for name, g in ref_grads.items():
            torch.testing.assert_close(rank["grads"][name], g, rtol=1e-4, atol=1e-6)
    queues = [torch.load(out / f"queue{r}.pt") for r in range(2)]
    assert [q.shape[0] for q in queues] == [8, 8]  # 2 steps x its own 4 rows, never the global 8 per step
    assert not torch.allclose(queues[0], queues[1])
