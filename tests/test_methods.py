"""Methods on tiny BERT / RoBERTa: training step, dropout views, sup collate, encode, head placement, loading."""

from __future__ import annotations

import warnings

import pytest
import torch

from cselab.model.heads import MLPHead, build_head
from cselab.model.loading import BackboneUnavailableError, load_backbone

FAMILIES = ["bert", "roberta"]
SENTS = ["a man is playing a guitar", "birds fly", "the cat sat on the mat", "it is raining today", "the dog ran"]
TRIPLETS = [
    {"sent0": "a man is playing a guitar", "sent1": "a man plays music", "hard_neg": "a woman is slicing an onion"},
    {"sent0": "the cat sat on the mat", "sent1": "a cat sat", "hard_neg": "two dogs are running in the park"},
    {"sent0": "it is raining today", "sent1": "the sky is not blue", "hard_neg": "it is sunny"},
]


def _step(method, batch) -> torch.Tensor:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # self.log() without a Trainer warns
        return method.training_step(batch, 0)


# ----------------------------------------------------------------------------------------- training


@pytest.mark.parametrize("family", FAMILIES)
def test_simcse_unsup_training_step(family: str, make_method) -> None:
    method = make_method("simcse", family)
    assert method.training
    batch = method.train_collate()(SENTS)
    assert batch["input_ids"].shape[:2] == (5, 2)
    assert torch.equal(batch["input_ids"][:, 0], batch["input_ids"][:, 1])  # same tokens, dropout makes views
    loss = _step(method, batch)
    assert loss.dim() == 0 and torch.isfinite(loss)
    assert loss.item() > 0
    loss.backward()
    head_grad = method.head.dense.weight.grad
    emb_grad = method.encoder.model.embeddings.word_embeddings.weight.grad
    assert head_grad is not None and float(head_grad.abs().sum()) > 0
    assert emb_grad is not None and float(emb_grad.abs().sum()) > 0


@pytest.mark.parametrize("family", FAMILIES)
def test_promptbert_training_step(family: str, make_method) -> None:
    method = make_method("promptbert", family, pooler="mask", denoise="position", prompt="promptbert")
    batch = method.train_collate()(SENTS)
    assert "bias_input_ids" in batch
    loss = _step(method, batch)
    assert torch.isfinite(loss)
    loss.backward()
    assert float(method.encoder.model.embeddings.word_embeddings.weight.grad.abs().sum()) > 0


@pytest.mark.parametrize("family", FAMILIES)
def test_unsup_views_differ_under_dropout_only(family: str, make_method) -> None:
    method = make_method("simcse", family)
    batch = method.train_collate()(SENTS)
    method.train()
    z = method.embed(batch)
    assert z.shape == (5, 2, method.encoder.hidden_size)
    assert (z[:, 0] - z[:, 1]).abs().max() > 1e-4
    method.eval()
    with torch.no_grad():
        z = method.embed(batch)
    torch.testing.assert_close(z[:, 0], z[:, 1], atol=1e-6, rtol=0)


@pytest.mark.parametrize("family", FAMILIES)
def test_simcse_sup_collate(family: str, make_method) -> None:
    method = make_method("simcse", family, setting="sup", mlp_only_train=False)
    batch = method.train_collate()(TRIPLETS)
    assert batch["input_ids"].shape[:2] == (3, 3)
    tok = method.tokenizer
    for i, row in enumerate(TRIPLETS):
        for v, field in enumerate(("sent0", "sent1", "hard_neg")):
            n = int(batch["attention_mask"][i, v].sum())
            expected = [tok.cls_token_id, *tok.encode(row[field], add_special_tokens=False), tok.sep_token_id]
            assert batch["input_ids"][i, v, :n].tolist() == expected
    loss = _step(method, batch)
    assert torch.isfinite(loss)


def test_sup_collate_missing_field(make_method) -> None:
    method = make_method("simcse", "bert", setting="sup")
    rows = [{"sent0": "a cat sat", "sent1": "birds fly"}, {"sent0": "the dog ran", "sent1": "a cat sat"}]
    with pytest.raises(KeyError) as info:
        method.train_collate()(rows)
    assert "'hard_neg'" in str(info.value)
    assert "sent0" in str(info.value) and "sent1" in str(info.value)  # the keys present are listed


def test_unknown_setting_refused(make_method) -> None:
    with pytest.raises(ValueError, match="setting.name='semi'"):
        make_method("simcse", "bert", setting="semi")


# ----------------------------------------------------------------------------------------- encode


@pytest.mark.parametrize(
    ("name", "family", "kwargs"),
    [
        ("simcse", "bert", {}),
        ("simcse", "roberta", {}),
        ("promptbert", "bert", {"pooler": "mask", "denoise": "position", "prompt": "promptbert"}),
        ("promptbert", "roberta", {"pooler": "mask", "denoise": "position", "prompt": "promptbert"}),
        ("baseline", "bert", {"pooler": "avg", "head": "none"}),
    ],
)
def test_encode_returns_rows_in_input_order(name: str, family: str, kwargs: dict, make_method) -> None:
    method = make_method(name, family, **kwargs)
    method.train()
    emb = method.encode(SENTS, batch_size=2)  # sorted by length, several batches with padding
    assert emb.shape == (len(SENTS), method.encoder.hidden_size)
    assert emb.dtype == torch.float32 and emb.device.type == "cpu"
    assert method.training  # mode restored
    for i, sentence in enumerate(SENTS):
        alone = method.encode([sentence])
        torch.testing.assert_close(emb[i], alone[0], atol=1e-5, rtol=0)
    assert not torch.allclose(emb[0], emb[1], atol=1e-3)
    method.eval()
    method.encode(SENTS[:2])
    assert not method.training  # eval mode restored too
    assert method.encode([]).shape == (0, method.encoder.hidden_size)


def test_encode_matches_an_explicit_eval_forward(make_method) -> None:
    """PromptBERT's test representation: view 1 with the period rule, no denoising, no head."""
    method = make_method("promptbert", "bert", pooler="mask", denoise="position", prompt="promptbert")
    tok = method.tokenizer
    emb = method.encode(["the cat sat"])
    ids = tok.encode('this sentence of "the cat sat." means [MASK].')
    method.eval()
    with torch.no_grad():
        last = method.encoder.model(input_ids=torch.tensor([ids])).last_hidden_state
    torch.testing.assert_close(emb[0], last[0, ids.index(tok.mask_token_id)], atol=1e-5, rtol=0)


# ----------------------------------------------------------------------------------------- head


def _eval_batch(method):
    return method.eval_collate(["the cat sat on the mat", "birds fly"])


@pytest.mark.parametrize("family", FAMILIES)
def test_head_only_in_training_when_mlp_only_train(family: str, make_method) -> None:
    method = make_method("simcse", family, mlp_only_train=True)
    assert method.representation_pooler == "cls_before_pooler"
    batch = method.train_collate()(SENTS)
    method.train()
    torch.manual_seed(7)
    z = method.embed(batch)
    torch.manual_seed(7)
    h = method.represent(batch)
    torch.testing.assert_close(z, method.head(h), atol=1e-6, rtol=0)
    assert not torch.allclose(z, h, atol=1e-3)
    method.eval()
    with torch.no_grad():
        batch = _eval_batch(method)
        torch.testing.assert_close(method.embed(batch), method.represent(batch), atol=0, rtol=0)
        h = method.represent(batch)[:, 0]
    torch.testing.assert_close(method.encode(["the cat sat on the mat", "birds fly"]), h, atol=1e-5, rtol=0)


@pytest.mark.parametrize("family", FAMILIES)
def test_head_at_eval_when_not_mlp_only_train(family: str, make_method) -> None:
    method = make_method("simcse", family, setting="sup", mlp_only_train=False)
    method.eval()
    with torch.no_grad():
        batch = _eval_batch(method)
        h = method.represent(batch)
        z = method.embed(batch)
        torch.testing.assert_close(z, method.head(h), atol=1e-6, rtol=0)
        assert not torch.allclose(z, h, atol=1e-3)
    torch.testing.assert_close(method.encode(["the cat sat on the mat", "birds fly"]), z[:, 0], atol=1e-5, rtol=0)


def test_cls_without_head_uses_the_backbone_pooler(make_method) -> None:
    method = make_method("baseline", "bert", pooler="cls", head="none")
    assert method.representation_pooler == "cls"
    method.eval()
    batch = _eval_batch(method)
    with torch.no_grad():
        out = method.encoder(batch["input_ids"][:, 0], batch["attention_mask"][:, 0])
        torch.testing.assert_close(method.embed(batch)[:, 0], out.pooler_output, atol=1e-6, rtol=0)


def test_build_head() -> None:
    head = build_head("mlp", 8)
    assert isinstance(head, MLPHead)
    x = torch.randn(3, 8)
    torch.testing.assert_close(head(x), torch.tanh(x @ head.dense.weight.T + head.dense.bias))
    assert build_head("none", 8) is None
    with pytest.raises(ValueError, match="method.head='bn'"):
        build_head("bn", 8)


# ----------------------------------------------------------------------------------------- config errors


def test_mask_pooler_needs_a_prompt(make_method) -> None:
    with pytest.raises(ValueError, match="pooler=mask needs a template"):
        make_method("promptbert", "bert", pooler="mask")
    with pytest.raises(ValueError, match="denoise=position needs a template"):
        make_method("simcse", "bert", denoise="position")


def test_missing_view_names_the_config_key(make_method) -> None:
    method = make_method("promptbert", "bert", pooler="mask", prompt="promptbert")
    with pytest.raises(KeyError, match="prompt.templates.bert.view9"):
        method.template("view9")


def test_denoise_without_template_on_a_view_is_refused(bert_tokenizer) -> None:
    from cselab.model.template_input import ViewCollate, ViewSpec

    with pytest.raises(ValueError, match="needs a template on every view"):
        ViewCollate(bert_tokenizer, [ViewSpec("text")], denoise="position")
    with pytest.raises(ValueError, match="denoise='bogus'"):
        ViewCollate(bert_tokenizer, [ViewSpec("text")], denoise="bogus")


# ----------------------------------------------------------------------------------------- backbone loading


@pytest.mark.parametrize(("family", "offset", "kind"), [("bert", 0, "BertModel"), ("roberta", 2, "RobertaModel")])
def test_load_backbone_local(family: str, offset: int, kind: str, backbone_dirs) -> None:
    encoder, tokenizer = load_backbone(str(backbone_dirs[family]))
    assert type(encoder.model).__name__ == kind
    assert encoder.family == family  # inferred from model_type
    assert encoder.position_offset == offset
    assert encoder.hidden_size == 32
    assert encoder.max_positions == 128
    assert tokenizer.mask_token_id is not None


def test_load_backbone_missing_local_path(tmp_path) -> None:
    missing = str(tmp_path / "no_model_here")
    with pytest.raises(BackboneUnavailableError) as info:
        load_backbone(missing)
    assert missing in str(info.value)
    assert "backbone=minilm_l6" in str(info.value)


def test_load_backbone_offline_hub_id(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)  # the id is not a local folder
    with pytest.raises(BackboneUnavailableError) as info:
        load_backbone("no-such-org/no-such-model")
    message = str(info.value)
    assert "no-such-org/no-such-model" in message
    assert "offline" in message.lower()
    assert "backbone=minilm_l6" in message and "backbone=/path/to/a/local/model/folder" in message


def test_backbone_error_is_an_os_error() -> None:
    assert issubclass(BackboneUnavailableError, OSError)


def test_encode_caches_the_tokenization_and_runs_without_autograd(make_method) -> None:
    method = make_method("simcse", "bert")
    calls = []
    tokenize = method.eval_collate.tokenize
    method.eval_collate.tokenize = lambda s: calls.append(len(s)) or tokenize(s)
    sentences = ["a man is playing a guitar", "the cat sat on the mat", "birds fly"]
    first = method.encode(sentences, batch_size=2)
    again = method.encode(list(sentences), batch_size=2)
    other = method.encode(sentences[:2], batch_size=2)
    assert calls == [3, 2]  # the second call of the same list skipped the tokenizer
    assert torch.equal(first, again) and torch.allclose(first[:2], other, atol=1e-5)
    assert not first.requires_grad


@pytest.mark.parametrize("chunk", [None, 3], ids=["uncached", "cached_step"])
def test_each_batch_shape_counts_its_flops_for_the_throughput_monitor(make_method, tmp_path, chunk) -> None:
    """The model's forward FLOPs x3 per batch shape; under the cached step its first pass and loss only (its
    second pass, in the step's own backward passes, is not model work), which count the same."""
    import lightning as L
    from torch.utils.data import DataLoader
    from torch.utils.flop_counter import FlopCounterMode

    from cselab.methods.cached_step import CachedStep

    method = make_method("simcse", "bert")
    method.cached_step = CachedStep(chunk) if chunk else None
    texts = ["a man is playing a guitar on the street", "the cat sat", "birds fly", "a cat sat on the mat today",
             "hello there", "the man plays a guitar"]
    rows = [{"text": s} for s in texts + texts[:2]]  # 4 batches of 2; the 4th repeats the 1st's shapes
    loader = DataLoader(rows, batch_size=2, collate_fn=method.train_collate())
    seen = []

    class Record(L.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            seen.append(pl_module.flops_per_batch)

    monitor = L.pytorch.callbacks.ThroughputMonitor(batch_size_fn=lambda b: b["input_ids"].shape[0], window_size=2)
    csv = L.pytorch.loggers.CSVLogger(tmp_path, name="csv", version="")
    from cselab.callbacks.flops import FlopCounter

    flops = FlopCounter()
    trainer = L.Trainer(max_steps=4, logger=csv, callbacks=[flops, Record(), monitor], enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, log_every_n_steps=1,
                        limit_val_batches=0, accelerator="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(method, loader)
        expected = []
        for batch in DataLoader(rows, batch_size=2, collate_fn=method.train_collate()):
            with FlopCounterMode(display=False) as counter:  # the step's forward: embed, gather, loss
                method.loss_fn(method.gather_embeddings(method.embed(batch)))
            expected.append(3 * counter.get_total_flops())
    assert seen == expected  # forward counted per batch shape, x3 for the backward
    assert len(set(expected)) >= 3 and expected[3] == expected[0]
    assert len(flops.by_shape) == len(set(expected))  # the repeated shape was not counted again
    assert "train/device/flops_per_sec" in (tmp_path / "csv" / "metrics.csv").read_text().splitlines()[0]


def test_eval_precision(make_method) -> None:
    sentences = ["a man is playing a guitar", "the cat sat on the mat", "birds fly"]
    exact = make_method("simcse", "bert").encode(sentences)
    assert torch.equal(make_method("simcse", "bert", eval_precision="32").encode(sentences), exact)  # CPU auto = 32
    fast = make_method("simcse", "bert", eval_precision="bf16").encode(sentences)
    assert fast.dtype == torch.float32 and not torch.equal(fast, exact)
    assert torch.nn.functional.cosine_similarity(fast, exact).min() > 0.99
    with pytest.raises(ValueError, match="eval.precision='fp16': expected auto, 32 or bf16"):
        make_method("simcse", "bert", eval_precision="fp16")
