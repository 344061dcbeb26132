"""DiffCSE (voidism/DiffCSE @ f724b2c) on tiny random backbones: the masked copies, the replaced-token labels, the
discriminator's input, the RTD loss and a whole step's loss and gradients against transcriptions of the official
code (``diffcse/models.py``, ``train.py``), the checkpoint / export, and the refusals."""

from __future__ import annotations

import zlib
from pathlib import Path

import lightning as L
import pytest
import torch
from torch import nn

from cselab.methods.diffcse.method import DiffCSE
from cselab.methods.diffcse.rtd import ReplacedTokenDetection, replaced_token_labels, rtd_loss
from cselab.model.loading import BackboneUnavailableError
from cselab.model.spec import ConfigError
from tests import forked
from tests.conftest import BERT_VOCAB, SENTENCES

MODEL = {"pooler": "cls", "head": "mlp_bn", "mlp_only_train": True}


# ------------------------------------------------------------------------------------------ fixtures
def _bert_config(dropout: float):
    from transformers import BertConfig

    return BertConfig(vocab_size=len(BERT_VOCAB), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                      intermediate_size=64, max_position_embeddings=128, hidden_dropout_prob=dropout,
                      attention_probs_dropout_prob=dropout)


@pytest.fixture(scope="module")
def no_dropout_dirs(tiny_bert_dir, tmp_path_factory) -> dict[str, Path]:
    """A tiny BERT encoder and a tiny BERT masked LM (the generator), both without dropout, with the tiny BERT
    tokenizer: every forward is deterministic, so a transcription of the official step can be compared exactly."""
    from transformers import AutoTokenizer, BertForMaskedLM, BertModel

    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    root = tmp_path_factory.mktemp("diffcse_nodrop")
    torch.manual_seed(11)
    BertModel(_bert_config(0.0)).save_pretrained(root / "encoder")
    torch.manual_seed(12)
    BertForMaskedLM(_bert_config(0.0)).save_pretrained(root / "generator")
    for sub in ("encoder", "generator"):
        tok.save_pretrained(root / sub)
    return {"encoder": root / "encoder", "generator": root / "generator"}


@pytest.fixture(scope="module")
def tiny_roberta_mlm_dir(tiny_roberta_dir, tmp_path_factory) -> Path:
    """A tiny random RobertaForMaskedLM with the tiny RoBERTa tokenizer."""
    from transformers import AutoTokenizer, RobertaConfig, RobertaForMaskedLM

    tok = AutoTokenizer.from_pretrained(tiny_roberta_dir)
    path = tmp_path_factory.mktemp("tiny_roberta_mlm")
    torch.manual_seed(3)
    RobertaForMaskedLM(RobertaConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=64, max_position_embeddings=130, pad_token_id=1,
                                     bos_token_id=0, eos_token_id=2)).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def _diffcse(backbone_dir, generator, family="bert", **rtd) -> DiffCSE:
    torch.manual_seed(0)
    return DiffCSE(backbone={"name_or_path": str(backbone_dir), "family": family}, model=dict(MODEL),
                   options={"generator": str(generator), **rtd})


# ------------------------------------------------------------------------------------------ the masked copies
def _official_mask_tokens(inputs, tokenizer, probability, gen):
    """train.py:512-544 (``mask_tokens``), transcribed; ``torch.bernoulli`` / ``randint`` draw from ``gen``."""
    inputs = inputs.clone()
    labels = inputs.clone()
    probability_matrix = torch.full(labels.shape, probability)
    special_tokens_mask = [tokenizer.get_special_tokens_mask(val, already_has_special_tokens=True)
                           for val in labels.tolist()]
    special_tokens_mask = torch.tensor(special_tokens_mask, dtype=torch.bool)
    probability_matrix.masked_fill_(special_tokens_mask, value=0.0)
    masked_indices = torch.bernoulli(probability_matrix, generator=gen).bool()
    labels[~masked_indices] = -100
    indices_replaced = torch.bernoulli(torch.full(labels.shape, 0.8), generator=gen).bool() & masked_indices
    inputs[indices_replaced] = tokenizer.convert_tokens_to_ids(tokenizer.mask_token)
    indices_random = torch.bernoulli(torch.full(labels.shape, 0.5), generator=gen).bool() & masked_indices & ~indices_replaced
    random_words = torch.randint(len(tokenizer), labels.shape, dtype=torch.long, generator=gen)
    inputs[indices_random] = random_words[indices_random]
    return inputs, labels


def test_masked_copies_are_the_official_mask_tokens_for_a_fixed_seed(tiny_bert_dir, tiny_mlm_dir):
    """The collate's ``mlm_input_ids`` / ``mlm_labels`` (masking_ratio 0.30) equal the official ``mask_tokens`` on
    the padded batch drawn from the same generator state (the collate's seed: CRC-32 of the batch and ``seed``)."""
    method = _diffcse(tiny_bert_dir, tiny_mlm_dir)
    collate = method.train_collate(seed=7)
    assert collate.mlm_probability == pytest.approx(0.30)
    batch = collate(SENTENCES)
    ids = batch["input_ids"]
    seed = zlib.crc32(ids.contiguous().numpy().tobytes(), zlib.crc32(b"7"))
    # official: the (B * V, T) padded rows (train.py:492-501), masked before the view to (B, V, T)
    ref_ids, ref_labels = _official_mask_tokens(ids.view(-1, ids.shape[-1]), method.tokenizer, 0.30,
                                                torch.Generator().manual_seed(seed))
    assert torch.equal(batch["mlm_input_ids"], ref_ids.view(ids.shape))
    assert torch.equal(batch["mlm_labels"], ref_labels.view(ids.shape))
    masked = batch["mlm_labels"] != -100
    assert masked.any() and not masked[..., 0].any()  # [CLS] (and [SEP], padding) never masked
    # the two views of a sentence are masked independently (one draw over (B, V, T))
    assert not torch.equal(masked[:, 0], masked[:, 1])


# ------------------------------------------------------------------------------------------ the labels
def test_replaced_token_labels_by_hand():
    """models.py:185-187 on a hand-built example: position 0 -> [CLS]; a generated token equal to the original is
    'original' (0) even where it was masked; an unmasked position the generator changed is 'replaced' (1);
    padding is 0 in both the labels and the discriminator's input."""
    cls = 101
    input_ids = torch.tensor([[101, 7, 8, 9, 102, 0], [101, 5, 102, 0, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 0], [1, 1, 1, 0, 0, 0]])
    g_pred = torch.tensor([[55, 7, 3, 9, 4, 6], [101, 5, 8, 9, 9, 9]])
    e_inputs, labels = replaced_token_labels(g_pred, input_ids, mask, cls)
    assert e_inputs.tolist() == [[101, 7, 3, 9, 4, 0], [101, 5, 8, 0, 0, 0]]
    assert labels.tolist() == [[0, 0, 1, 0, 1, 0], [0, 0, 1, 0, 0, 0]]
    assert torch.equal(g_pred[0], torch.tensor([55, 7, 3, 9, 4, 6]))  # the input is not modified


def test_replaced_token_labels_equal_the_official_lines_on_random_ids():
    """The official statements (models.py:185-186), transcribed, on random ids: the same tensors."""
    torch.manual_seed(0)
    input_ids = torch.randint(0, 6, (16, 12))
    mask = (torch.arange(12) < torch.randint(2, 13, (16, 1))).long()
    g_pred = torch.randint(0, 6, (16, 12))
    ours = replaced_token_labels(g_pred, input_ids, mask, 0)
    g = g_pred.clone()
    g[:, 0] = 0
    replaced = (g != input_ids) * mask
    e_inputs = g * mask
    assert torch.equal(ours[0], e_inputs) and torch.equal(ours[1], replaced)


# ------------------------------------------------------------------------------------------ the loss
def test_rtd_loss_value_and_gradient_against_the_official_cross_entropy():
    """models.py:272: ``CrossEntropyLoss()(scores.view(-1, 2), labels.view(-1))``, a mean over every position,
    padding included.  Hand value: all-zero scores give ln 2.  Columns beyond the batch's real width (padding the
    official collate does not add, e.g. pad_to_multiple_of) change neither the value nor the gradient."""
    labels = torch.tensor([[0, 1, 0, 0], [0, 0, 1, 0]])
    assert rtd_loss(torch.zeros(2, 4, 2), labels).item() == pytest.approx(0.6931471805599453)
    torch.manual_seed(1)
    scores = torch.randn(2, 4, 2, dtype=torch.float64, requires_grad=True)
    ours = rtd_loss(scores, labels)
    ref = nn.CrossEntropyLoss()(scores.view(-1, 2), labels.view(-1))
    g_ours, = torch.autograd.grad(ours, scores)
    g_ref, = torch.autograd.grad(ref, scores)
    assert ours.item() == pytest.approx(ref.item(), abs=1e-12)
    assert torch.allclose(g_ours, g_ref, atol=1e-12)
    # 3 extra padding columns with arbitrary scores, left out by the width
    padded = torch.cat([scores, torch.randn(2, 3, 2, dtype=torch.float64)], 1).detach().requires_grad_(True)
    wide = rtd_loss(padded, torch.cat([labels, torch.zeros(2, 3, dtype=torch.long)], 1), torch.tensor(4))
    g_wide, = torch.autograd.grad(wide, padded)
    assert wide.item() == pytest.approx(ref.item(), abs=1e-12)
    assert torch.allclose(g_wide[:, :4], g_ref, atol=1e-12) and not g_wide[:, 4:].any()


# ------------------------------------------------------------------------------------------ the discriminator
def _official_discriminator(model, head, e_inputs, mask, cls_input):
    """The official conditional forward (modeling_bert.py:952-961 + the encoder; 4.2.1's additive mask
    (1 - mask) * -10000), run on the HF modules directly, then ``electra_head``."""
    emb = model.embeddings(input_ids=e_inputs)
    emb = torch.cat([cls_input.unsqueeze(1), emb[:, 1:, :]], dim=1)
    ext = (1.0 - mask[:, None, None, :].to(emb.dtype)) * -10000.0
    return head(model.encoder(emb, attention_mask=ext).last_hidden_state)


def test_discriminator_conditions_position_zero_on_the_embedding(tiny_bert_dir, tiny_mlm_dir):
    """The discriminator is a pretrained copy of the backbone (no pooling layer, not shared), its position-0
    embedding output replaced by the sentence embedding: its scores equal the transcribed official forward, do not
    depend on the token id at position 0, and carry a gradient to ``cls_input``."""
    method = _diffcse(tiny_bert_dir, tiny_mlm_dir)
    disc = method.rtd.discriminator.eval()
    backbone = method.encoder.base_model
    assert disc.model is not backbone and disc.model.pooler is None
    original = dict(backbone.named_parameters())
    for name, p in disc.model.named_parameters():
        assert torch.equal(p, original[name]) and p.data_ptr() != original[name].data_ptr(), name
    torch.manual_seed(2)
    ids = torch.randint(5, 40, (3, 7))
    ids[:, 0] = method.tokenizer.cls_token_id
    mask = torch.tensor([[1] * 7, [1] * 5 + [0] * 2, [1] * 3 + [0] * 4])
    ids = ids * mask
    cls_input = torch.randn(3, 32, requires_grad=True)
    ours = disc(ids, mask, cls_input)
    ref = _official_discriminator(disc.model, disc.electra_head, ids, mask, cls_input)
    assert torch.allclose(ours, ref, atol=1e-5)
    other = ids.clone()
    other[:, 0] = 9
    assert torch.allclose(disc(other, mask, cls_input), ours, atol=1e-6)
    grad, = torch.autograd.grad(ours.sum(), cls_input)
    assert grad.abs().sum() > 0


# ------------------------------------------------------------------------------------------ a whole step
def _official_step(method: DiffCSE, batch, temp=0.05, lam=0.005):
    """cl_forward (models.py:143-273), transcribed on the method's own modules (HF models called directly)."""
    z1, z2, rtd, replaced = _official_parts(method, batch)
    cos_sim = nn.CosineSimilarity(dim=-1)(z1.unsqueeze(1), z2.unsqueeze(0)) / temp
    loss = nn.CrossEntropyLoss()(cos_sim, torch.arange(cos_sim.size(0)))
    return loss + lam * rtd, rtd, replaced


def _official_parts(method: DiffCSE, batch):
    """What each process computes in cl_forward before the gather (models.py:143-214, 239-273): the projected views
    ``z1, z2`` (BatchNorm over its own B * V rows in train mode), its RTD loss and the replaced-token labels."""
    input_ids, attention_mask = batch["input_ids"], batch["attention_mask"]
    bs, num_sent, t = input_ids.shape
    input_ids, attention_mask = input_ids.view(-1, t), attention_mask.view(-1, t)
    outputs = method.encoder.base_model(input_ids, attention_mask=attention_mask, return_dict=True)
    pooler_output = outputs.last_hidden_state[:, 0].view(bs, num_sent, -1)
    pooler_output = method.head(pooler_output.view(bs * num_sent, -1)).view(bs, num_sent, -1)
    mlm_input_ids = batch["mlm_input_ids"].view(-1, t)
    with torch.no_grad():
        g_pred = method.rtd.generator(mlm_input_ids, attention_mask)[0].argmax(-1)
    g_pred[:, 0] = method.tokenizer.cls_token_id
    replaced = (g_pred != input_ids) * attention_mask
    e_inputs = g_pred * attention_mask
    disc = method.rtd.discriminator
    scores = _official_discriminator(disc.model, disc.electra_head, e_inputs, attention_mask,
                                     pooler_output.view(-1, pooler_output.size(-1)))
    rtd = nn.CrossEntropyLoss()(scores.view(-1, 2), replaced.view(-1))
    return pooler_output[:, 0], pooler_output[:, 1], rtd, replaced


def test_step_loss_and_gradients_equal_the_official_cl_forward(no_dropout_dirs):
    """One training forward (no dropout, so both are deterministic; the BatchNorm projector in train mode over the
    B * V rows): the loss ``CL + 0.005 * RTD``, the RTD term and every trainable parameter's gradient (encoder,
    projector, discriminator, electra head) equal the transcribed official step; the generator gets none."""
    method = _diffcse(no_dropout_dirs["encoder"], no_dropout_dirs["generator"])
    method.train()
    batch = method.train_collate()(SENTENCES[:6])
    ours, _, n = method.forward_loss(batch)
    assert n == 6
    params = [p for p in method.parameters() if p.requires_grad]
    g_ours = torch.autograd.grad(ours, params, allow_unused=True)
    ref, ref_rtd, replaced = _official_step(method, batch)
    g_ref = torch.autograd.grad(ref, params, allow_unused=True)
    assert ours.item() == pytest.approx(ref.item(), rel=1e-5)
    assert method._rtd_loss.item() == pytest.approx(ref_rtd.item(), rel=1e-5)
    assert replaced.sum() > 0  # the generator replaced some tokens
    names = [n for n, p in method.named_parameters() if p.requires_grad]
    assert not any(n.startswith("rtd.generator") for n in names)
    for name, a, b in zip(names, g_ours, g_ref, strict=True):
        assert (a is None) == (b is None), name
        if a is not None:
            assert torch.allclose(a, b, atol=1e-6, rtol=1e-4), name
    assert all(g is not None for g in g_ours)  # every trainable tensor is used (DDP without unused parameters)


class _RunningStats(L.Callback):
    """Saves rank r's BatchNorm running statistics after its first step to ``out/stats{r}.pt``."""

    def __init__(self, out: Path):
        self.out = out

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if batch_idx == 0:
            torch.save({n: b.detach().clone() for n, b in pl_module.named_buffers() if ".running_" in n},
                       self.out / f"stats{trainer.global_rank}.pt")


def test_ddp_gathers_the_views_and_keeps_rtd_and_batchnorm_per_rank(no_dropout_dirs, tmp_path):
    """D12, 2 processes (``trainer=ddp_sim``'s gloo DDP, 4 sentences each): each rank's loss is the official rank's,
    ``InfoNCE`` over both ranks' ``z1, z2`` (all-gathered, models.py:215-237) ``+ 0.005 * RTD`` of its own rows
    (models.py:259-273), with the BatchNorm projector over its own rows (no SyncBatchNorm, train.py:199-255);
    the gradient after DDP's average is that of ``InfoNCE(all) + 0.005 * mean_r RTD_r`` (the contrastive part
    gathered with gradients: the one-process gradient, #9); each rank's running statistics are its own rows'."""
    import copy

    from tests.test_ddp import _run_ddp

    method = _diffcse(no_dropout_dirs["encoder"], no_dropout_dirs["generator"])
    rows = SENTENCES[:8]
    halves = [method.train_collate()(rows[:4]), method.train_collate()(rows[4:])]
    copies = [copy.deepcopy(method).train() for _ in halves]  # one per rank: its BatchNorm statistics its own
    parts = [_official_parts(c, b) for c, b in zip(copies, halves, strict=True)]
    z1, z2 = torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])  # the gather, rank order
    cos_sim = nn.CosineSimilarity(dim=-1)(z1.unsqueeze(1), z2.unsqueeze(0)) / 0.05
    contrastive = nn.CrossEntropyLoss()(cos_sim, torch.arange(8))
    rtds = [p[2] for p in parts]
    (contrastive + 0.005 * (rtds[0] + rtds[1]) / 2).backward()
    grads = {n: p.grad + dict(copies[1].named_parameters())[n].grad
             for n, p in copies[0].named_parameters() if p.grad is not None}
    stats = [{n: b for n, b in c.named_buffers() if ".running_" in n} for c in copies]
    first = next(n for n in stats[0] if n.endswith("running_mean"))  # the two ranks' rows: two sets of statistics
    assert not torch.allclose(stats[0][first], stats[1][first])

    ranks = _run_ddp(method, rows, tmp_path, (0, 4, 8), callbacks=[_RunningStats(tmp_path)])
    for r, res in enumerate(ranks):
        assert float(res["loss"]) == pytest.approx(float((contrastive + 0.005 * rtds[r]).detach()), rel=1e-5)
        assert res["grads"].keys() == grads.keys()
        for name, g in grads.items():
            torch.testing.assert_close(res["grads"][name], g, rtol=1e-4, atol=1e-6, msg=name)
        got = torch.load(tmp_path / f"stats{r}.pt")
        assert got.keys() == stats[r].keys()
        for name, b in stats[r].items():
            torch.testing.assert_close(got[name], b, rtol=1e-5, atol=1e-6, msg=name)


def test_before_head_with_the_batchnorm_projector_is_an_extension_the_official_code_cannot_run(no_dropout_dirs):
    """``condition=before_head`` (official ``--before_mlp``) with the BatchNorm projector (``--batchnorm``): the
    official ``cl_forward`` applies the projector to the unflattened (B, 2, D) tensor (models.py:204-206), so its
    first BatchNorm1d(2D) reads dim 1 (the 2 views) as channels and raises; it runs only with SimCSE's MLP.  cselab
    conditions the discriminator on the [CLS] rows h (B * V, D) and gives the contrastive loss the projector's
    output over the flattened B * V rows (as ``after_head``, models.py:177-179).  docs/fidelity.md D7 says so."""
    method = _diffcse(no_dropout_dirs["encoder"], no_dropout_dirs["generator"], condition="before_head")
    method.train()
    batch = method.train_collate()(SENTENCES[:6])
    b, v, t = batch["input_ids"].shape
    outputs = method.encoder.base_model(batch["input_ids"].view(-1, t), attention_mask=batch["attention_mask"].view(
        -1, t), return_dict=True)
    pooler_output = outputs.last_hidden_state[:, 0].view(b, v, -1)
    with pytest.raises(RuntimeError, match="running_mean"):  # models.py:204-206 as written, on the same projector
        method.head.net(pooler_output)
    # cselab: z = projector(h) over the B * V rows for the loss, h itself conditions the discriminator
    seen = {}
    handle = method.rtd.discriminator.register_forward_pre_hook(
        lambda module, args: seen.update(cond=args[2]))  # returns None: the arguments unchanged
    try:
        loss, _, _ = method.forward_loss(batch)
    finally:
        handle.remove()
    torch.testing.assert_close(seen["cond"], pooler_output.reshape(b * v, -1), rtol=1e-5, atol=1e-6)
    z = method.head.net(pooler_output.reshape(b * v, -1)).view(b, v, -1)
    cos = nn.CosineSimilarity(dim=-1)(z[:, 0].unsqueeze(1), z[:, 1].unsqueeze(0)) / 0.05
    cl = nn.CrossEntropyLoss()(cos, torch.arange(b))
    assert loss.item() == pytest.approx(cl.item() + 0.005 * method._rtd_loss.item(), rel=1e-5)
    ledger = (Path(__file__).resolve().parents[1] / "docs" / "fidelity.md").read_text(encoding="utf-8")
    d7 = next(line for line in ledger.splitlines() if line.startswith("| D7 |"))
    assert "models.py:204-206" in d7 and "cannot run" in d7


def test_roberta_step_uses_the_s_token_and_trains(tiny_roberta_dir, tiny_roberta_mlm_dir):
    """RoBERTa: position 0 is ``<s>`` (official cls_token=0, models.py:444); a training step runs and every
    trainable tensor gets a gradient."""
    method = _diffcse(tiny_roberta_dir, tiny_roberta_mlm_dir, family="roberta")
    assert method.rtd.cls_token_id == method.tokenizer.cls_token_id == 0
    batch = method.train_collate()(SENTENCES[:4])
    loss, _, _ = method.forward_loss(batch)
    loss.backward()
    assert all(p.grad is not None for p in method.parameters() if p.requires_grad)
    assert torch.isfinite(method._rtd_loss)


# ------------------------------------------------------------------------------------------ checkpoint / export
def test_checkpoint_holds_the_rtd_modules_and_export_is_the_encoder(tiny_bert_dir, tiny_mlm_dir, tmp_path):
    """The state dict holds the discriminator, its head and the frozen generator (a resume continues with them);
    a rebuilt method loads it strictly; the exported embedding model has none of them and encodes as the method."""
    from cselab.model.embedding import EmbeddingModel

    method = _diffcse(tiny_bert_dir, tiny_mlm_dir, masking_ratio=0.2, lambda_weight=0.1)
    state = method.state_dict()
    assert any(k.startswith("rtd.discriminator.model.") for k in state)
    assert "rtd.discriminator.electra_head.weight" in state and any(k.startswith("rtd.generator.") for k in state)
    assert dict(method.hparams)["options"]["lambda_weight"] == 0.1
    with torch.no_grad():
        for p in method.rtd.discriminator.parameters():
            p.add_(0.5)
    rebuilt = DiffCSE(**dict(method.hparams))
    rebuilt.load_state_dict(state)
    assert torch.equal(rebuilt.rtd.discriminator.electra_head.weight, method.rtd.discriminator.electra_head.weight)
    assert rebuilt.train_collate().mlm_probability == pytest.approx(0.2)
    method.model.save(tmp_path / "export")
    exported = EmbeddingModel.load(tmp_path / "export")
    assert not any("rtd" in k or "discriminator" in k for k in exported.state_dict())
    assert exported.describe()["pooler"] == "cls_before_pooler" and exported.describe()["use_head"] is False
    assert torch.allclose(exported.encode(SENTENCES), method.encode(SENTENCES), atol=1e-5)


# ------------------------------------------------------------------------------------------ refusals
def test_refusals_name_their_keys(tiny_bert_dir, tiny_mlm_dir, tiny_roberta_mlm_dir, tmp_path):
    with pytest.raises(ConfigError, match="trainer.cached_step"):
        DiffCSE(backbone={"name_or_path": str(tiny_bert_dir), "family": "bert"}, model=dict(MODEL),
                options={"generator": str(tiny_mlm_dir)}, cached_step={"chunk_size": 4})
    with pytest.raises(ConfigError, match="setting=sup"):
        DiffCSE.check_config(backbone={"name_or_path": str(tiny_bert_dir), "family": "bert"}, model=dict(MODEL),
                             setting="sup")
    with pytest.raises(BackboneUnavailableError, match="package:cognition"):
        _diffcse(tiny_bert_dir, tmp_path / "no_such_generator")
    with pytest.raises(BackboneUnavailableError, match="method.rtd.generator='backbone'"):
        _diffcse(tiny_bert_dir, "backbone")  # the tiny BertModel has no MLM head
    with pytest.raises(ConfigError, match="vocabulary"):
        _diffcse(tiny_bert_dir, tiny_roberta_mlm_dir)


def test_rtd_module_generator_dropout_off_keeps_it_in_eval_mode(tiny_bert_dir, tiny_mlm_dir):
    method = _diffcse(tiny_bert_dir, tiny_mlm_dir, generator_dropout=False)
    method.train()
    assert isinstance(method.rtd, ReplacedTokenDetection)
    assert method.rtd.discriminator.training and not method.rtd.generator.training
    official = _diffcse(tiny_bert_dir, tiny_mlm_dir)
    official.train()
    assert official.rtd.generator.training  # official: the generator follows the model's train mode


# ------------------------------------------------------------------------------------------ configs
def test_paper_configs_compose(tmp_path):
    from hydra import compose, initialize_config_dir

    import cselab.io.config  # noqa: F401  (resolvers)

    conf = str(Path(__file__).resolve().parents[1] / "conf")
    with initialize_config_dir(config_dir=conf, version_base="1.3"):
        bert = compose("config", overrides=["experiment=diffcse/unsup_bert_base"])
        roberta = compose("config", overrides=["experiment=diffcse/unsup_roberta_base"])
        minilm = compose("config", overrides=["method=diffcse"])
    assert bert.method.rtd.generator == "distilbert-base-uncased" and bert.optim.lr == 7e-6
    assert bert.data.batch_size == 64 and bert.trainer.max_epochs == 2 and bert.method.rtd.masking_ratio == 0.30
    assert bert.method.rtd.lambda_weight == 0.005 and bert.module.model.head == "mlp_bn"
    assert bert.module.model.mlp_only_train is True and bert.loss.temperature == 0.05
    assert roberta.method.rtd.generator == "distilroberta-base"
    assert minilm.method.rtd.generator == "package:cognition" and minilm.module._target_.endswith("DiffCSE")


def test_projector_and_electra_head_start_as_the_official_init(tiny_bert_dir, tiny_mlm_dir):
    """ProjectionMLP under ``cl_init`` -> ``init_weights`` (models.py:119-121): its Linear layers N(0, 0.02), no bias,
    BatchNorm PyTorch's (weight 1, bias 0; the last one not affine); ``electra_head`` PyTorch's default Linear
    init (train.py:387: created after ``from_pretrained``), U(+-1/sqrt(D)): std 1/sqrt(3 D)."""
    method = _diffcse(tiny_bert_dir, tiny_mlm_dir)
    linears = [m for m in method.head.modules() if isinstance(m, nn.Linear)]
    norms = [m for m in method.head.modules() if isinstance(m, nn.BatchNorm1d)]
    assert [tuple(m.weight.shape) for m in linears] == [(64, 32), (32, 64)] and all(m.bias is None for m in linears)
    for lin in linears:
        assert lin.weight.std().item() == pytest.approx(0.02, rel=0.1)
    assert norms[0].affine and torch.equal(norms[0].weight, torch.ones(64)) and not norms[1].affine
    head = method.rtd.discriminator.electra_head
    bound = 1 / 32 ** 0.5
    assert head.weight.abs().max() <= bound and head.bias.abs().max() <= bound
    assert head.weight.std().item() > 0.05  # not N(0, 0.02)


# ------------------------------------------------------------------------------------------ end to end
@pytest.mark.integration
def test_trains_tests_and_compares_with_simcse_on_the_same_seed(tmp_path, tiny_bert_dir, tiny_mlm_dir):
    """run.py trains DiffCSE (4 steps, STS-B dev every 2, the tiny MLM as generator), reloads the best checkpoint
    (discriminator and generator included) and tests it; SimCSE on the same seed; ``cselab compare`` pairs them and
    ``cselab report --paper-backbone bert_base`` puts CoT-BERT Table 2's DiffCSE row beside ours."""
    import json
    import os
    import sys

    from tests.test_run import ROOT, _run

    common = [f"backbone.name_or_path={tiny_bert_dir}", "trainer.max_steps=4", "trainer.val_check_interval=2",
              "data.batch_size=8", "eval.test_tasks=[stsb]", "seed=3"]
    _run("method=diffcse", f"method.rtd.generator={tiny_mlm_dir}", *common, f"hydra.run.dir={tmp_path}/diffcse",
         threads=1)
    _run("method=simcse", *common, f"hydra.run.dir={tmp_path}/simcse", threads=1)
    res = json.loads((tmp_path / "diffcse" / "results.json").read_text())
    assert res["global_step"] == 4 and res["config"]["method"]["name"] == "diffcse"
    assert res["config"]["method"]["rtd"]["generator"] == str(tiny_mlm_dir)
    assert res["dev"]["stsb"] == pytest.approx(res["best_dev"], abs=1e-3)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    for args in (["compare", f"{tmp_path}/diffcse", f"{tmp_path}/simcse"],
                 ["report", str(tmp_path), "--paper-backbone", "bert_base"]):
        proc = forked.run([sys.executable, "-m", "cselab", *args], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        if args[0] == "compare":
            assert "| STS-B |" in proc.stdout
        else:
            assert "80.59" in proc.stdout and "CoT-BERT Table 2" in proc.stdout


