"""Continuous prompts on a frozen backbone: prefixes (PEFT + official additions), soft templates, MLM, checkpoints."""

from __future__ import annotations

import copy
import shutil

import lightning as L
import pytest
import torch
from transformers import BertConfig, BertModel

from cselab.model.backbone import Encoder
from cselab.model.loading import BackboneUnavailableError, load_backbone
from tests.conftest import PROMPTBERT_PROMPT

SENTS = ["a man is playing a guitar", "the dog ran to the park", "a woman is slicing an onion", "a cat sat"]
MANUAL = {**copy.deepcopy(PROMPTBERT_PROMPT), "train_views": ["view1", "view1"],
          "templates": {"bert": {"view1": '*cls*_This_sentence_:_"*sent_0*"_means*mask*.*sep+*'}}}


def _prefix(**kw):
    return {"name": "prefix", "pre_seq_len": 4, "variant": "deep", "dropout": 0.1, **kw}


def _positions_seen(encoder: Encoder, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    base = encoder.model.get_base_model() if hasattr(encoder.model, "get_base_model") else encoder.model
    seen = {}
    handle = base.embeddings.position_embeddings.register_forward_hook(
        lambda mod, args, out: seen.update(pos=args[0].clone()))
    try:
        encoder(ids, mask)
    finally:
        handle.remove()
    return seen["pos"]


@pytest.mark.parametrize("family, first", [("bert", 0), ("roberta", 2)])
@pytest.mark.parametrize("positions", ["shifted", "unshifted"])
def test_prefix_position_ids_of_the_real_tokens(make_method, family, first, positions):
    m = make_method("dcpcse", family, pooler="cls", tuning=_prefix(prefix_positions=positions))
    batch = m.eval_collate(["a man is playing a guitar"])
    pos = _positions_seen(m.encoder, batch["input_ids"][:, 0], batch["attention_mask"][:, 0])
    start = first + (4 if positions == "shifted" else 0)  # official code: P (BERT), P + 2 (RoBERTa)
    assert pos[0, 0].item() == start
    assert pos[0, : batch["attention_mask"][0, 0].sum()].tolist() == list(range(start, start + int(
        batch["attention_mask"][0, 0].sum())))


@pytest.mark.parametrize("variant, per_layer", [("deep", True), ("layer_shared", False), ("input_layer", None)])
def test_trainable_parameters_are_the_prompt_and_the_head(make_method, variant, per_layer):
    m = make_method("dcpcse", "bert", pooler="cls", tuning=_prefix(variant=variant))
    cfg = m.encoder.model.get_base_model().config
    h, layers, p = cfg.hidden_size, cfg.num_hidden_layers, 4
    prompt = {True: p * layers * 2 * h, False: p * 2 * h, None: p * h}[per_layer]
    assert m.num_trainable_parameters() == prompt + h * h + h  # + SimCSE's MLP
    trainable = [n for n, q in m.named_parameters() if q.requires_grad]
    assert all("prompt_encoder" in n or n.startswith("model.head.") for n in trainable), trainable
    out = m.encoder(*[t[:, 0] for t in (lambda b: (b["input_ids"], b["attention_mask"]))(m.eval_collate(SENTS))])
    assert out.last_hidden_state.shape[1] == m.eval_collate(SENTS)["input_ids"].shape[2]  # virtual tokens removed


def test_bert_base_prefix_is_a_small_fraction_of_the_backbone():
    """DCPCSE / PromCSE on bert-base: 16 x 12 x 2 x 768 prefix values = 0.27 % of the 109.5M backbone."""
    model = BertModel(BertConfig())  # bert-base sizes, random weights (no download)
    backbone = sum(p.numel() for p in model.parameters())
    enc = Encoder(model, "bert")
    enc.add_prefix(16)
    trainable = sum(p.numel() for p in enc.parameters() if p.requires_grad)
    assert trainable == 16 * 12 * 2 * 768
    assert trainable / backbone == pytest.approx(0.00269, abs=1e-4)


@pytest.mark.parametrize(("args", "match"), [
    ((0,), r"tuning.pre_seq_len must be >= 1, got 0"),
    ((4, "every_layer"), r"tuning.variant='every_layer': expected one of \('deep', 'layer_shared', 'input_layer'\)"),
    ((4, "deep", "shifted_left"), r"tuning.prefix_positions='shifted_left': expected one of"),
    ((4, "input_layer", "unshifted"), r"tuning.prefix_positions must be 'shifted'"),
])
def test_add_prefix_called_directly_refuses_bad_values_by_key(args, match):
    """``Encoder.add_prefix`` (and :func:`cselab.model.prefix.apply_prefix_tuning` under it) outside a run's config:
    each bad value named by its ``tuning.*`` key, before the backbone is frozen or wrapped."""
    enc = Encoder(BertModel(BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                       intermediate_size=64, vocab_size=100)), "bert")
    with pytest.raises(ValueError, match=match):
        enc.add_prefix(*args)
    assert enc.tuning == "full" and all(p.requires_grad for p in enc.parameters())  # untouched


def test_frozen_backbone_is_bit_for_bit_unchanged_and_keeps_dropout(make_method):
    m = make_method("dcpcse", "bert", pooler="cls", tuning=_prefix())
    base = m.encoder.model.get_base_model()
    before = {k: v.clone() for k, v in base.state_dict().items()}
    prompt_before = m.encoder.model.prompt_encoder["default"].embedding.weight.clone()
    opt = torch.optim.AdamW([p for p in m.parameters() if p.requires_grad], lr=1e-1)
    m.train()
    batch = m.train_collate()(SENTS)
    z1, z2 = m.embed(batch)[:, 0], m.embed(batch)[:, 0]
    assert not torch.allclose(z1, z2)  # dropout still on in the frozen backbone (unsup views)
    for _ in range(3):
        loss = m.loss_fn(m.embed(batch))
        loss.backward()
        opt.step()
        opt.zero_grad()
    for k, v in base.state_dict().items():
        assert torch.equal(v, before[k]), k
    assert not torch.equal(m.encoder.model.prompt_encoder["default"].embedding.weight, prompt_before)


def test_prefix_dropout_and_init():
    model = BertModel(BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                 intermediate_size=64))
    enc = Encoder(model, "bert")
    enc.add_prefix(64, dropout=0.5)
    weight = enc.model.prompt_encoder["default"].embedding.weight
    assert weight.std().item() == pytest.approx(0.02, rel=0.1)  # N(0, 0.02), not PEFT's N(0, 1)
    pe = enc.model.prompt_encoder["default"]
    tokens = torch.arange(64).unsqueeze(0)
    pe.train()
    dropped = pe(tokens)
    assert (dropped == 0).float().mean().item() == pytest.approx(0.5, abs=0.05)
    pe.eval()
    torch.testing.assert_close(pe(tokens)[0], weight)


def test_checkpoint_holds_only_trained_tensors_and_reloads(make_method, tmp_path):
    m = make_method("promcse", "bert", pooler="cls", tuning=_prefix(), mlp_only_train=True)
    loader = torch.utils.data.DataLoader(SENTS * 2, batch_size=4, collate_fn=m.train_collate())
    trainer = L.Trainer(max_steps=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        default_root_dir=tmp_path, enable_model_summary=False)
    trainer.fit(m, loader)
    path = tmp_path / "m.ckpt"
    trainer.save_checkpoint(path)
    ckpt = torch.load(path, weights_only=False)
    assert ckpt["backbone"]["name_or_path"] == m.hparams.backbone["name_or_path"]
    names = set(ckpt["state_dict"])
    assert names == {n for n, p in m.named_parameters() if p.requires_grad}
    assert not any(n.startswith("model.backbone.model.base_model.") and "prompt" not in n for n in names)
    reloaded = type(m).load_from_checkpoint(path, weights_only=False)
    torch.testing.assert_close(reloaded.encode(SENTS), m.encode(SENTS))
    import cselab

    loaded = cselab.load(path)  # the public entry point finds the method class itself
    assert type(loaded).__name__ == "PromCSE" and not loaded.training
    torch.testing.assert_close(loaded.encode(SENTS), m.encode(SENTS))


def test_soft_template_slots_init_and_training(make_method):
    m = make_method("optiprompt", "bert", pooler="mask", prompt=copy.deepcopy(MANUAL), tuning={"name": "soft_prompt"})
    collate = m.train_collate()
    tokenizer = m.tokenizer
    table = m.encoder.soft_template.weight
    ids = collate.soft_init_ids
    # every template token except [CLS]/[SEP]/[MASK]: "this sentence : \" \" means ."
    assert tokenizer.convert_ids_to_tokens(ids) == ["this", "sentence", ":", '"', '"', "means", "."]
    torch.testing.assert_close(table.detach(), m.encoder.model.get_input_embeddings().weight[torch.tensor(ids)])
    batch = collate(SENTS)
    tpl = batch["template_index"]
    for b in range(len(SENTS)):
        sel = tpl[b, 0] >= 0
        assert batch["input_ids"][b, 0][sel].tolist() == [ids[i] for i in tpl[b, 0][sel].tolist()]
    assert m.num_trainable_parameters() == table.numel() + 2 * (table.shape[1] ** 2 + table.shape[1]) // 2
    before = m.encode(SENTS)
    # with the table equal to the embeddings, the soft template encodes like the discrete one
    discrete = make_method("baseline", "bert", pooler="mask", prompt=copy.deepcopy(MANUAL), head="none")
    torch.testing.assert_close(before, discrete.encode(SENTS), atol=1e-5, rtol=1e-5)
    opt = torch.optim.SGD([p for p in m.parameters() if p.requires_grad], lr=1.0)
    m.train()
    m.loss_fn(m.embed(batch)).backward()
    opt.step()
    assert not torch.allclose(m.encode(SENTS), before)


def test_dcpcse_mlm_auxiliary_loss(tiny_mlm_dir):
    from cselab.methods.registry import method_class

    mlm = {"weight": 0.1, "decay": 0.95, "decay_steps": 100, "probability": 0.5, "lm_head": "tied"}
    m = method_class("dcpcse")(backbone={"name_or_path": str(tiny_mlm_dir), "family": "bert"},
                               model={"pooler": "cls", "tuning": _prefix()}, mlm=mlm)
    batch = m.train_collate()(SENTS)
    labels, masked = batch["mlm_labels"], batch["mlm_input_ids"]
    sel = labels != -100
    assert sel.any()
    assert torch.equal(labels[sel], batch["input_ids"][sel])
    cls_sep = torch.tensor([m.tokenizer.cls_token_id, m.tokenizer.sep_token_id, m.tokenizer.pad_token_id])
    assert not torch.isin(batch["input_ids"][sel], cls_sep).any()  # only sentence tokens are masked
    assert torch.equal(masked[~sel], batch["input_ids"][~sel])
    assert m.aux_mlm.weight(m.global_step) == pytest.approx(0.1)
    assert torch.isfinite(m.aux_mlm.loss(m.encoder, batch)) and m.aux_mlm.loss(m.encoder, batch) > 0
    # lm_head=tied: the MLM head's own layers train; the decoder tied to the word embeddings stays frozen
    # (the official untied decoder: tests/test_fidelity.py)
    head = m.encoder.mlm.cls
    assert head.predictions.transform.dense.weight.requires_grad
    assert not head.predictions.decoder.weight.requires_grad
    base = m.encoder.model.get_base_model()
    assert not any(p.requires_grad for p in base.parameters())


def test_mlm_needs_an_mlm_head(tiny_bert_dir, tmp_path):
    with pytest.raises(BackboneUnavailableError, match="no masked-LM head"):
        load_backbone(str(tiny_bert_dir), mlm_head=True)
    shutil.rmtree(tmp_path, ignore_errors=True)


def test_prompt_tuning_methods_require_their_tuning(make_method):
    with pytest.raises(ValueError, match="tuning=prefix"):
        make_method("dcpcse", "bert", pooler="cls")
    with pytest.raises(ValueError, match="tuning.pre_seq_len"):
        make_method("dcpcse", "bert", pooler="cls", tuning=_prefix(pre_seq_len=0))


def test_mlm_weight_schedule_matches_its_equation(tiny_mlm_dir):
    """DCPCSE: lambda = 0.1 * 0.95 ** (global_step / 100)."""
    from cselab.methods.registry import method_class

    m = method_class("dcpcse")(backbone={"name_or_path": str(tiny_mlm_dir), "family": "bert"},
                               model={"pooler": "cls", "tuning": _prefix()}, mlm={"weight": 0.1, "decay": 0.95, "decay_steps": 100})
    for step in (0, 1, 100, 250, 1000):
        assert m.aux_mlm.weight(step) == pytest.approx(0.1 * 0.95 ** (step / 100))


def test_prompt_tuned_training_resumes_from_its_checkpoint(make_method, tmp_path):
    m = make_method("promcse", "bert", pooler="cls", tuning=_prefix())
    loader = torch.utils.data.DataLoader(SENTS * 4, batch_size=4, collate_fn=m.train_collate())
    kwargs = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                  default_root_dir=tmp_path)
    trainer = L.Trainer(max_steps=2, **kwargs)
    trainer.fit(m, loader)
    path = tmp_path / "step2.ckpt"
    trainer.save_checkpoint(path)
    base_before = {k: v.clone() for k, v in m.encoder.model.get_base_model().state_dict().items()}
    resumed = make_method("promcse", "bert", pooler="cls", tuning=_prefix())
    trainer = L.Trainer(max_steps=4, **kwargs)
    trainer.fit(resumed, loader, ckpt_path=path, weights_only=False)
    assert trainer.global_step == 4
    for k, v in resumed.encoder.model.get_base_model().state_dict().items():
        assert torch.equal(v, base_before[k]), k  # the frozen backbone is the same and stays unchanged
    prompt = resumed.encoder.model.prompt_encoder["default"].embedding.weight
    assert not torch.equal(prompt, m.encoder.model.prompt_encoder["default"].embedding.weight)  # trained on


def test_mlm_masks_are_seeded_by_the_batch_and_survive_a_mid_epoch_resume(tiny_mlm_dir, tmp_path):
    """The masks are a function of ``mlm_seed`` and the batch: BERT's 15 % / 80-10-10 statistics, the same
    masks for the same batch in any process, other masks for another seed; and a loader resumed mid-epoch
    with 2 workers yields exactly the batches (masks included) of the uninterrupted loader."""
    from dataclasses import asdict

    from cselab.data.resume import DataPosition
    from cselab.data.unsup import UnsupDataModule
    from cselab.methods.registry import method_class

    mlm = {"weight": 0.1, "decay": 0.95, "decay_steps": 100, "probability": 0.15}
    m = method_class("dcpcse")(backbone={"name_or_path": str(tiny_mlm_dir), "family": "bert"},
                               model={"pooler": "cls", "tuning": _prefix()}, mlm=mlm)
    collate = m.train_collate()
    words = "a man is playing a guitar on the street while the cat sat on the mat near two dogs".split()
    rows = [" ".join(words[i % 7 : i % 7 + 6 + i % 5]) for i in range(400)]
    batch = collate(rows)
    sel = batch["mlm_labels"] != -100
    eligible = collate._sentence_mask(batch["input_ids"].shape, batch["sent_len"])
    assert sel.sum() / eligible.sum() == pytest.approx(0.15, abs=0.02)
    masked = batch["mlm_input_ids"][sel]
    assert (masked == m.tokenizer.mask_token_id).float().mean() == pytest.approx(0.8, abs=0.04)
    assert (masked == batch["input_ids"][sel]).float().mean() == pytest.approx(0.1, abs=0.04)
    again = collate(rows)
    assert torch.equal(again["mlm_input_ids"], batch["mlm_input_ids"])
    rotated = collate(rows[1:] + rows[:1])  # another batch (the same rows in another order): other masks
    assert not torch.equal(rotated["mlm_labels"][:-1], batch["mlm_labels"][1:])
    assert not torch.equal(m.train_collate(seed=1)(rows)["mlm_labels"], batch["mlm_labels"])

    corpus = tmp_path / "c.txt"
    corpus.write_text("\n".join(rows[:40]) + "\n")

    seeded = m.train_collate(seed=5)  # the run builds the collate with its seed (cselab.run.assemble)
    assert seeded.mlm_seed == 5 and seeded is not collate

    def batches(position=None):
        dm = UnsupDataModule(seeded, path=str(corpus), batch_size=4, num_workers=2, seed=5)
        dm.setup("fit")
        if position is not None:
            dm.load_state_dict({"data_position": asdict(position)})
        loader = dm.train_dataloader()
        loader.sampler.set_epoch(1)
        return [(b["input_ids"], b["mlm_input_ids"], b["mlm_labels"]) for b in loader]

    whole = batches()
    resumed = batches(DataPosition(epoch=1, batches=4, batch_size=4, world_size=1))
    assert len(resumed) == len(whole) - 4
    for got, want in zip(resumed, whole[4:], strict=True):
        for g, w in zip(got, want, strict=True):
            assert torch.equal(g, w)
