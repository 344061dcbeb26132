"""The official code's behaviours of the fidelity ledger (docs/fidelity.md), each against an expectation computed
here independently of the code under test: a hand loop, a hand-built input, or weights read from the checkpoint
file itself.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from safetensors.torch import load_file

import cselab.io.config  # noqa: F401  (resolvers)
from cselab.methods.losses import build_loss
from cselab.model.loading import BackboneUnavailableError
from tests.conftest import build_method

ROOT = Path(__file__).resolve().parents[1]
CONF = str(ROOT / "conf")
SENTS = ["a man is playing a guitar", "the cat sat on the mat", "two dogs are running in the park",
         "it is raining today", "birds fly", "a woman is slicing an onion"]
EXPERIMENTS = sorted(p.relative_to(ROOT / "conf" / "experiment").with_suffix("").as_posix()
                     for p in (ROOT / "conf" / "experiment").rglob("*.yaml") if p.stem != "demo")


def _cfg(overrides: list[str]):
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        return compose("config", overrides=overrides)


def _build(overrides: list[str], path: Path, family: str = "bert"):
    torch.manual_seed(0)
    return build_method(_cfg([*overrides, f"backbone.name_or_path={path}", f"backbone.family={family}"]))


@pytest.fixture(scope="module")
def tiny_roberta_mlm_dir(tiny_roberta_dir, tmp_path_factory):
    """A tiny random RobertaForMaskedLM (LM head included) with the tiny byte-level BPE tokenizer."""
    from transformers import AutoTokenizer, RobertaConfig, RobertaForMaskedLM

    path = tmp_path_factory.mktemp("tiny_roberta_mlm")
    tok = AutoTokenizer.from_pretrained(tiny_roberta_dir)
    torch.manual_seed(0)
    RobertaForMaskedLM(RobertaConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=64, max_position_embeddings=130, pad_token_id=1,
                                     bos_token_id=0, eos_token_id=2)).save_pretrained(path)
    tok.save_pretrained(path)
    return path


# ------------------------------------------------------------------------------------ 1. head initialisation
@pytest.mark.parametrize("overrides", [
    ["method=simcse"], ["method=simcse", "setting=sup"], ["method=promptbert"], ["method=cot_bert"],
    ["method=dcpcse"], ["method=promcse", "setting=sup"], ["method=scpcse"],
], ids=lambda o: " ".join(o))
def test_heads_start_as_the_official_init_weights(overrides, tiny_mlm_dir):
    """Official ``cl_init`` -> ``init_weights``: Linear N(0, initializer_range), bias 0 (SimCSE models.py:95)."""
    model = _build(overrides, tiny_mlm_dir)
    std = model.encoder.model.config.initializer_range if not hasattr(model.encoder.model, "get_base_model") \
        else model.encoder.model.get_base_model().config.initializer_range
    linears = [m for m in model.head.modules() if isinstance(m, torch.nn.Linear)]
    assert linears
    for lin in linears:
        assert torch.count_nonzero(lin.bias) == 0
        # 1024 draws of N(0, 0.02): the sample std is within 10 % with overwhelming probability; PyTorch's
        # default U(+-1/sqrt(32)) has std 0.102
        assert lin.weight.std().item() == pytest.approx(std, rel=0.1)
        assert lin.weight.mean().abs().item() < 3 * std / math.sqrt(lin.weight.numel()) * 2


def test_pytorch_head_init_is_kept_as_an_option(tiny_mlm_dir):
    model = _build(["method=simcse", "+method.head_init=pytorch"], tiny_mlm_dir)
    assert torch.count_nonzero(model.head.dense.bias) > 0
    assert model.head.dense.weight.std().item() > 0.05  # U(+-1/sqrt(32)): std 0.102


def test_prefix_projection_starts_as_the_official_init_weights(tiny_mlm_dir):
    """DCPCSE / PromCSE ``prefix_projection``: the projection MLP's Linears are N(0, 0.02), bias 0 too
    (dcpcse/models.py:128 ``cl_init`` -> ``init_weights`` covers ``prefix_encoder.trans``)."""
    model = _build(["method=dcpcse", "tuning.prefix_projection=true", "tuning.prefix_hidden_size=64"], tiny_mlm_dir)
    encoder = model.encoder.model.prompt_encoder[model.encoder.model.active_adapter]
    linears = [m for m in encoder.transform if isinstance(m, torch.nn.Linear)]
    assert len(linears) == 2
    for lin in linears:
        assert torch.count_nonzero(lin.bias) == 0
        assert lin.weight.std().item() == pytest.approx(0.02, rel=0.1)
    assert encoder.embedding.weight.std().item() == pytest.approx(0.02, rel=0.15)


# --------------------------------------------------------------------- 3. the pretrained MLM-head transform
@pytest.mark.parametrize("overrides", [["method=promptbert", "setting=sup"], ["method=optiprompt"]],
                         ids=["promptbert-sup", "optiprompt"])
def test_bert_mlm_transform_head_starts_from_the_checkpoint(overrides, tiny_mlm_dir):
    """Prompt-BERT train.py:581-584: ``model.mlp = BertForMaskedLM.from_pretrained(...).cls.predictions.transform``;
    the expectation is read from the checkpoint FILE, not through transformers."""
    model = _build(overrides, tiny_mlm_dir)
    saved = load_file(str(tiny_mlm_dir / "model.safetensors"))
    prefix = "cls.predictions.transform."
    for name, tensor in model.head.state_dict().items():
        torch.testing.assert_close(tensor, saved[prefix + name], rtol=0, atol=0, msg=name)
    assert isinstance(model.head.activation, torch.nn.GELU)


def test_pretrained_mlm_head_refused_clearly_without_an_mlm_head(tiny_bert_dir):
    with pytest.raises(BackboneUnavailableError, match="method.head_init=bert"):
        _build(["method=promptbert", "setting=sup"], tiny_bert_dir)


# ------------------------------------------------------------------------------------ 4. the dev encoder
def _official_mask_states(path: Path, ids: list[list[int]], positions: list[list[int]] | None, mask_id: int):
    """Hand-run forward of the raw Hugging Face model (eval mode): the last [MASK] state of each row."""
    from transformers import AutoModel

    model = AutoModel.from_pretrained(path).eval()
    out = []
    with torch.no_grad():
        for k, row in enumerate(ids):
            kwargs = {"input_ids": torch.tensor([row])}
            if positions is not None:
                kwargs["position_ids"] = torch.tensor([positions[k]])
            h = model(**kwargs).last_hidden_state[0]
            out.append(h[[i for i, t in enumerate(row) if t == mask_id][-1]])
    return torch.stack(out)


def test_promptbert_dev_encoder_is_the_official_trainer_batcher(tiny_mlm_dir):
    """prompt_bert/trainers.py:105-116 -> models.py:290-368 (unsup, ``--mask_embedding_sentence_delta``):
    ``[CLS] bs s es [SEP]`` WITHOUT the period rule, minus the template-only [MASK] state whose suffix positions
    are shifted by len(s); the test encoder (evaluation.py) appends "." and subtracts nothing."""
    from transformers import AutoTokenizer

    model = _build(["method=promptbert"], tiny_mlm_dir)
    tok = AutoTokenizer.from_pretrained(tiny_mlm_dir)
    bs = tok.encode('This sentence of "', add_special_tokens=False)  # view 1, official train.py:617-629
    es = tok.encode('"means' + tok.mask_token + ".", add_special_tokens=False)
    sents = tok(SENTS, add_special_tokens=False)["input_ids"]
    rows = [[tok.cls_token_id, *bs, *s, *es, tok.sep_token_id] for s in sents]
    h = _official_mask_states(tiny_mlm_dir, rows, None, tok.mask_token_id)
    template = [tok.cls_token_id, *bs, *es, tok.sep_token_id]
    delta_pos = [[*range(len(bs) + 1), *(p + len(s) for p in range(len(bs) + 1, len(template)))] for s in sents]
    delta = _official_mask_states(tiny_mlm_dir, [template] * len(sents), delta_pos, tok.mask_token_id)
    torch.testing.assert_close(model.encode(SENTS, encoder="dev"), h - delta, rtol=1e-5, atol=1e-5)
    periods = tok([s + "." for s in SENTS], add_special_tokens=False)["input_ids"]
    rows = [[tok.cls_token_id, *bs, *s, *es, tok.sep_token_id] for s in periods]
    test = _official_mask_states(tiny_mlm_dir, rows, None, tok.mask_token_id)
    torch.testing.assert_close(model.encode(SENTS), test, rtol=1e-5, atol=1e-5)
    # eval.dev_encoder=test: checkpoint selection on the test encoder
    plain = _build(["method=promptbert", "eval.dev_encoder=test"], tiny_mlm_dir)
    torch.testing.assert_close(plain.encode(SENTS, encoder="dev"), test, rtol=1e-5, atol=1e-5)


def test_cot_bert_dev_encoder_has_no_period_and_no_bias(tiny_mlm_dir):
    """CoT-BERT trainers.py:78-91 with ``--mask_embedding_sentence_delta_no_delta_eval``: no period, no bias."""
    model = _build(["method=cot_bert"], tiny_mlm_dir)
    nop = _build(["method=cot_bert", "prompt.add_period_at_eval=false"], tiny_mlm_dir)
    torch.testing.assert_close(model.encode(SENTS, encoder="dev"), nop.encode(SENTS), rtol=0, atol=0)
    assert not torch.allclose(model.encode(SENTS, encoder="dev"), model.encode(SENTS))


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_every_paper_config_composes_to_the_official_behaviour(name):
    """Items 1, 3, 4, 6, 7 and F3-F6, C6, SN10, SN12, L21 of the ledger as the paper rows compose them."""
    cfg = _cfg([f"experiment={name}"])
    method, family, setting = cfg.method.name, cfg.backbone.family, cfg.setting.name
    assert cfg.eval.dev_encoder == "official"
    expected_head_init = "pretrained_mlm" if (method, setting, family) in {
        ("promptbert", "sup", "bert"), ("optiprompt", "unsup", "bert")} else "bert"
    assert cfg.method.get("head_init", "bert") == expected_head_init
    spec = OmegaConf.to_container(cfg.module, resolve=True)["model"]["dev_encoder"]  # what the module receives
    if method == "promptbert":
        assert spec == {"add_period": False, "denoise": True}
    elif method in ("cot_bert", "optiprompt"):
        assert spec == {"add_period": False, "denoise": False}
    else:
        assert spec is None
    if method == "cot_bert":
        assert (cfg.data.batch_size, cfg.loss.groups, cfg.negatives) == (256, 2, "per_device")
    else:
        assert cfg.loss.groups == 1
    # SN10: SNCSE's cl_forward gathers nothing (SN models:145-149): each GPU's InfoNCE over its own batch (the
    # behaviour: tests/test_ddp.py::test_per_device_negatives_use_the_local_batch); the others gather (SC
    # simcse/models.py:171-192)
    assert cfg.negatives == ("per_device" if method in ("cot_bert", "sncse") else "global")
    if method == "dcpcse" and cfg.method.mlm:
        assert cfg.method.mlm.lm_head == "untied"
    # F4, F5: the HF Trainer's optimizer and clipping (transformers 4.2.1: transformers.AdamW, no weight decay, no
    # warm-up, max_grad_norm 1.0; PromptEOL: warmup_steps=100, SE ft_llm.py:472)
    assert (cfg.optim.adamw, cfg.optim.weight_decay, cfg.optim.warmup_ratio) == ("transformers", 0.0, 0.0)
    assert cfg.optim.warmup_steps == (100 if method == "prompteol" else 0)
    assert cfg.trainer.gradient_clip_val == 1.0 and cfg.trainer.get("gradient_clip_algorithm") in (None, "norm")
    # F6, SN12: STS-B dev (the checkpoint selection) every 125 steps (--eval_steps 125; SNCSE --save_steps 125);
    # OptiPrompt every 1000 (PB run.sh:61, ES=1000); PromptEOL's checkpoints every 50 (SE train_llm.sh:19)
    if cfg.method.train:
        assert cfg.trainer.val_check_interval == {"optiprompt": 1000, "prompteol": 50}.get(method, 125)
    # F3: no truncation at evaluation (the SentEval batcher); BERT-whitening's encoder: 64 tokens (W7)
    assert cfg.eval.max_seq_len == (64 if name.startswith("whitening/") else None)
    # L21, #4: equal dev scores -- the HF Trainer keeps the first best (SC simcse/trainers.py:163-170), PromptEOL's
    # evaluation.py the later one at two decimals (:292, :308)
    prompteol_rule = method == "prompteol" and cfg.method.train
    assert (cfg.eval.best_on_tie, cfg.eval.best_decimals) == (("last", 2) if prompteol_rule else ("first", None))
    # C6: CoT-BERT's seed 0 and --dataloader_drop_last (CoT code-for-BERT/train.py:513-514)
    assert (cfg.seed, cfg.data.drop_last) == ((0, True) if method == "cot_bert" else (42, False))


# The paper rows an official run script trains, with that script's flags: (global batch = GPUs x
# --per_device_train_batch_size, --learning_rate, --num_train_epochs, --pre_seq_len), read from the script itself
# (docs/fidelity.md, DC7).  Several GPUs run under torch.distributed.launch with gathered negatives (one global
# batch), except CoT-BERT's DataParallel pair (2 x 128 in 2 loss groups, #6).
OFFICIAL_SCRIPTS = {
    # SC run_unsup_example.sh:11-13; run_sup_example.sh:6, 18, 22-24 (4 GPUs x 128)
    "simcse/unsup_bert_base": (64, 3e-5, 1, None),
    "simcse/sup_bert_base": (512, 5e-5, 3, None),
    # PB run.sh:91-96 (unsup-bert), :73-78 (unsup-roberta), :125-130 and :109-114 (sup: 4 GPUs x 128), :56-62
    # (bert-optiprompt)
    "promptbert/unsup_bert_base": (256, 1e-5, 1, None),
    "promptbert/unsup_roberta_base": (256, 1e-5, 1, None),
    "promptbert/sup_bert_base": (512, 5e-5, 3, None),
    "promptbert/sup_roberta_base": (512, 5e-5, 3, None),
    "optiprompt/unsup_bert_base": (256, 3e-5, 5, None),
    # CoT code-for-BERT/train.py:30, 491-493; code-for-RoBERTa/train.py:30, 487-489 (2 GPUs x 128, DataParallel)
    "cot_bert/unsup_bert_base": (256, 1e-5, 1, None),
    "cot_bert/unsup_roberta_base": (256, 1e-5, 1, None),
    # DC @ fea587b (the last commit before the repository became PromCSE's): run_unsup_example.sh:7-21;
    # run_sup_example.sh:6, 18, 22-24, 31 (2 GPUs x 256, 5 epochs: the paper's Table 4 says 256 and 10)
    "dcpcse/unsup_bert_base": (256, 3e-2, 1, 16),
    "dcpcse/sup_roberta_large": (512, 5e-3, 5, 10),
    # PC run_unsup_example.sh:7-21; run_sup_example.sh:7, 19, 23-25, 32 (2 GPUs x 256, "+EH")
    "promcse/unsup_bert_base": (256, 3e-2, 1, 16),
    "promcse/sup_eh_roberta_large": (512, 5e-3, 10, 10),
}


@pytest.mark.parametrize("name", sorted(OFFICIAL_SCRIPTS))
def test_paper_rows_train_with_the_official_run_scripts_flags(name):
    """DC7: each paper row that an official script trains composes to that script's batch, learning rate, epochs and
    prefix length (a row with no script keeps its paper table's values)."""
    cfg = _cfg([f"experiment={name}"])
    prefix = cfg.tuning.pre_seq_len if cfg.tuning.name == "prefix" else None
    assert (cfg.data.batch_size, cfg.optim.lr, cfg.trainer.max_epochs, prefix) == OFFICIAL_SCRIPTS[name]
    assert cfg.negatives == ("per_device" if name.startswith("cot_bert/") else "global")
    assert cfg.loss.temperature == 0.05 and cfg.max_seq_len == 32  # --temp 0.05, --max_seq_length 32


def test_evaluation_encodes_the_whole_sentence(tiny_mlm_dir):
    """F3: the SentEval batcher tokenizes with ``padding=True`` and no ``max_length`` (PB ``trainers.py:107-111``):
    a sentence longer than the 32 training tokens is encoded whole: its test embedding is the backbone's own
    [CLS] state of all its tokens (SimCSE unsup: ``cls_before_pooler``), not that of its first 32."""
    from transformers import AutoModel, AutoTokenizer

    words = ("the quick brown fox jumps over the lazy dog while two cats watch from a sunny window and a bird "
             "sings in the old oak tree near the quiet river bank on a warm summer afternoon").split()
    sentence = " ".join(words)
    tok = AutoTokenizer.from_pretrained(tiny_mlm_dir)
    ids = tok([sentence], return_tensors="pt")
    assert ids["input_ids"].shape[1] > 40  # longer than max_seq_len (32)
    backbone = AutoModel.from_pretrained(tiny_mlm_dir).eval()
    with torch.no_grad():
        whole = backbone(**ids).last_hidden_state[:, 0]
        first_32 = backbone(**tok([sentence], return_tensors="pt", max_length=32, truncation=True)).last_hidden_state[:, 0]
    method = _build(["method=simcse"], tiny_mlm_dir)
    got = method.encode([sentence])
    torch.testing.assert_close(got, whole, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(got, first_32, atol=1e-4)
    truncated = _build(["method=simcse", "eval.max_seq_len=32"], tiny_mlm_dir).encode([sentence])  # the option
    torch.testing.assert_close(truncated, first_32, rtol=1e-5, atol=1e-6)


def test_the_callback_selects_checkpoints_with_the_dev_encoder():
    from cselab.evaluation.callback import STSCallback

    calls = []

    class Module:
        def encode(self, sentences, batch_size=None, encoder="test"):
            calls.append(encoder)
            return torch.zeros(len(sentences), 2)

    class Evaluator:
        def evaluate_detailed(self, encode, tasks, split, aggregation, progress):
            encode(["a"])
            return SimpleNamespace(scores={t: 0.0 for t in tasks}, tasks={})

    cb = STSCallback.__new__(STSCallback)
    cb.batch_size, cb.evaluator, cb.aggregation, cb.progress_every_s = None, Evaluator(), "all", 60.0
    cb._score(None, Module(), ("stsb",), "dev")
    cb._score(None, Module(), ("stsb",), "test")
    assert calls == ["dev", "test"]


# ------------------------------------------------------------------------------------ 6. loss groups
def _infonce_loop(z: torch.Tensor, tau: float) -> torch.Tensor:
    """SimCSE's unsup InfoNCE written as a loop over anchors: -log e^{cos(i,i+)/tau} / sum_j e^{cos(i,j+)/tau}."""
    losses = []
    for i in range(z.shape[0]):
        sims = torch.stack([F.cosine_similarity(z[i, 0], z[j, 1], dim=0) for j in range(z.shape[0])]) / tau
        losses.append(-(sims[i] - torch.logsumexp(sims, 0)))
    return torch.stack(losses).mean()


def test_loss_groups_average_the_groups_own_losses():
    """CoT-BERT's 2 x 128 DataParallel step (code-for-BERT/train.py:30): each replica's loss over its own
    contiguous chunk, the replicas' losses averaged by the Trainer."""
    torch.manual_seed(0)
    z = torch.randn(8, 2, 16)
    grouped = build_loss({"name": "infonce", "temperature": 0.05, "groups": 2})
    expected = (_infonce_loop(z[:4], 0.05) + _infonce_loop(z[4:], 0.05)) / 2
    torch.testing.assert_close(grouped(z), expected, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(grouped(z), _infonce_loop(z, 0.05))
    cot = build_loss({"name": "cot_infonce", "temperature": 0.05})
    cot2 = build_loss({"name": "cot_infonce", "temperature": 0.05, "groups": 2})
    z3 = torch.randn(8, 3, 16)
    torch.testing.assert_close(cot2(z3), (cot(z3[:4]) + cot(z3[4:])) / 2)
    with pytest.raises(ValueError, match="loss.groups"):
        build_loss({"name": "infonce", "groups": 0})


# ------------------------------------------------------------- 7. DCPCSE RoBERTa + MLM: the untied LM head
def test_dcpcse_roberta_mlm_trains_an_untied_copy_of_the_lm_head(tiny_roberta_mlm_dir):
    """Official RobertaForCL (dcpcse/models.py:429-430, 446-447): the LM head is built after freezing and nothing
    ties it, so its decoder is a trainable copy of the pretrained one; the tied frozen decoder is an option."""
    overrides = ["method=dcpcse", "backbone=roberta_base"]
    model = _build(overrides, tiny_roberta_mlm_dir, family="roberta")
    head = model.encoder.mlm.lm_head
    emb = model.encoder.mlm.roberta.embeddings.word_embeddings.weight
    saved = load_file(str(tiny_roberta_mlm_dir / "model.safetensors"))
    pretrained_decoder = saved.get("lm_head.decoder.weight", saved["roberta.embeddings.word_embeddings.weight"])
    assert head.decoder.weight is not emb and head.decoder.weight.requires_grad and not emb.requires_grad
    torch.testing.assert_close(head.decoder.weight.detach(), pretrained_decoder, rtol=0, atol=0)
    cfg = model.encoder.mlm.config
    v, d = cfg.vocab_size, cfg.hidden_size
    prefix = cfg.num_hidden_layers * 2 * d * int(model.tuning.pre_seq_len)
    lm_head = v * d + v + d * d + d + 2 * d  # decoder, bias, dense, layer norm
    assert model.num_trainable_parameters() == prefix + (d * d + d) + lm_head
    tied = _build([*overrides, "method.mlm_config.lm_head=tied"], tiny_roberta_mlm_dir, family="roberta")
    assert tied.num_trainable_parameters() == prefix + (d * d + d) + lm_head - v * d
    # one SGD step moves the decoder copy, never the frozen word embeddings
    batch = model.train_collate()([{"text": s} for s in SENTS])
    before_emb, before_dec = emb.detach().clone(), head.decoder.weight.detach().clone()
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.training_step(batch, 0).backward()
    opt.step()
    assert torch.equal(emb, before_emb) and not torch.equal(head.decoder.weight, before_dec)


# ----------------------------------------------------------- SimCSE --do_mlm: the official auxiliary MLM (S3)
def test_simcse_do_mlm_adds_the_official_auxiliary_loss(tiny_mlm_dir):
    """SC ``train.py:107-116, 173-176, 371-373`` and ``simcse/models.py:140-152, 215-219, 283-284``: with
    ``--do_mlm`` the BERT LM head is loaded from the checkpoint's ``cls.predictions`` into a head of its own (its
    decoder a trainable copy, not the word embeddings), and loss = CL + 0.1 * CE(lm_head(encoder(mlm_input_ids,
    attention_mask).last_hidden_state), mlm_labels) at every step (no decay); off by default."""
    from tests.conftest import no_dropout

    assert _build(["method=simcse"], tiny_mlm_dir).aux_mlm is None
    model = _build(["method=simcse", "method.mlm=${method.mlm_config}"], tiny_mlm_dir)
    predictions = model.encoder.mlm.cls.predictions
    saved = load_file(str(tiny_mlm_dir / "model.safetensors"))
    emb = model.encoder.model.get_input_embeddings().weight
    expected = {**{k[len("cls.predictions."):]: v for k, v in saved.items() if k.startswith("cls.predictions.")},
                "decoder.weight": saved.get("cls.predictions.decoder.weight",
                                            saved["bert.embeddings.word_embeddings.weight"])}
    for name, tensor in predictions.state_dict().items():
        key = "bias" if name == "decoder.bias" and name not in expected else name
        torch.testing.assert_close(tensor, expected[key], rtol=0, atol=0, msg=name)
    assert predictions.decoder.weight is not emb and predictions.decoder.weight.requires_grad and emb.requires_grad
    assert model.aux_mlm.weight(0) == model.aux_mlm.weight(10_000) == pytest.approx(0.1)
    no_dropout(model)
    batch = model.train_collate()([{"text": s} for s in SENTS])
    assert (batch["mlm_labels"] != -100).any()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        total = model.training_step(batch, 0).detach()
        aux, model.aux_mlm = model.aux_mlm, None
        contrastive = model.training_step(batch, 0).detach()
        model.aux_mlm = aux
        b, v, t = batch["mlm_input_ids"].shape
        hidden = model.encoder.mlm.bert(input_ids=batch["mlm_input_ids"].view(b * v, t),
                                        attention_mask=batch["attention_mask"].view(b * v, t)).last_hidden_state
        scores = predictions(hidden)
        mlm = F.cross_entropy(scores.view(-1, scores.shape[-1]), batch["mlm_labels"].view(-1), ignore_index=-100)
    torch.testing.assert_close(total, contrastive + 0.1 * mlm.detach(), rtol=1e-5, atol=1e-6)
    assert float(mlm.detach()) > 0


def test_a_simcse_run_saved_before_do_mlm_resumes_unchanged_and_turning_it_on_is_a_change():
    """``method.mlm`` / ``method.mlm_config`` are new keys of ``conf/method/simcse.yaml``: a run saved without them
    (no MLM) resumes with the same command; ``method.mlm='${method.mlm_config}'`` is a change of that run."""
    from cselab.callbacks.run_config import config_changes

    now = OmegaConf.to_container(_cfg(["method=simcse"]), resolve=True)
    saved = {**now, "method": {k: v for k, v in now["method"].items() if k not in ("mlm", "mlm_config")}}
    assert config_changes(saved, now) == []
    with_mlm = OmegaConf.to_container(_cfg(["method=simcse", "method.mlm=${method.mlm_config}"]), resolve=True)
    assert {key for key, _, _ in config_changes(saved, with_mlm)} >= {"method.mlm.weight", "method.mlm.lm_head"}


# -------------------------------------------------------------- 8. one prefix draw for the CL and MLM passes
def test_dcpcse_contrastive_and_mlm_pass_share_one_prefix_draw(tiny_roberta_mlm_dir):
    """dcpcse/models.py:161, 193: ``past_key_values = cls.get_prompt(...)`` once; both passes use it."""
    model = _build(["method=dcpcse", "backbone=roberta_base"], tiny_roberta_mlm_dir, family="roberta")
    model.train()
    prompt_encoder = model.encoder.model.prompt_encoder[model.encoder.model.active_adapter]
    seen: list[torch.Tensor] = []
    prompt_encoder.register_forward_hook(lambda m, a, out: seen.append(out.detach().clone()))
    batch = model.train_collate()([{"text": s} for s in SENTS])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.training_step(batch, 0)
    assert len(seen) == 2  # the contrastive pass and the MLM pass
    torch.testing.assert_close(seen[0], seen[1], rtol=0, atol=0)
    assert (seen[0] == 0).any()  # dropout 0.1 was drawn
    seen.clear()
    n = batch["input_ids"].shape[0] * batch["input_ids"].shape[1]
    model.encoder.model.get_prompt(batch_size=n)
    model.encoder.model.get_prompt(batch_size=n)
    assert not torch.equal(seen[0], seen[1])  # outside a step, each forward draws its own mask


# ------------------------------------------------------------------ 5. the test encoder's official token ids
def test_roberta_test_encoder_tokenizes_the_official_whole_string(tiny_roberta_mlm_dir):
    """Prompt-BERT evaluation.py:194-202: the test batcher appends "." and tokenizes the whole template string
    with the sentence inside; the in-training dev batcher (models.py:307-335) wraps the sentence's own ids."""
    from transformers import AutoTokenizer

    model = _build(["method=promptbert", "backbone=roberta_base"], tiny_roberta_mlm_dir, family="roberta")
    tok = AutoTokenizer.from_pretrained(tiny_roberta_mlm_dir)
    official = "*cls*_This_sentence_:_'_*sent_0*_'_means*mask*.*sep+*"  # run.sh:80
    text = official.replace("*mask*", tok.mask_token).replace("_", " ").replace("*sep+*", "").replace("*cls*", "")
    sents = ["a cat sat", "the dog ran"]
    test = model.eval_collate(sents)["input_ids"][:, 0]
    for row, s in zip(test, sents, strict=True):
        expected = tok(text.replace("*sent 0*", s + ".").strip())["input_ids"]
        assert row[row != tok.pad_token_id].tolist() == expected
    bs = tok.encode("This sentence : '", add_special_tokens=False)  # train.py:625-629: prefix stripped
    es = tok.encode(" ' means" + tok.mask_token + ".", add_special_tokens=False)
    dev = model.dev_collate(sents)["input_ids"][:, 0]
    for row, s in zip(dev, sents, strict=True):
        expected = [tok.cls_token_id, *bs, *tok.encode(s, add_special_tokens=False), *es, tok.sep_token_id]
        assert row[row != tok.pad_token_id].tolist() == expected


def test_every_ledger_row_has_its_own_id():
    """A row is cited by its id (``D7``, ``SN10``) in code and tests: no two rows of docs/fidelity.md share one
    (the DCPCSE rows were D1-D6 beside DiffCSE's D1-D15 until they became DC1-DC7)."""
    ids = [line.split("|")[1].strip() for line in (ROOT / "docs" / "fidelity.md").read_text(encoding="utf-8").splitlines()
           if line.startswith("| ") and not line.startswith("| # |") and not line.startswith("|---")]
    ids = [i for i in ids if i and i[0] in "#ABCDEFGHIJKLMNOPQRSTUVWXYZ" and any(c.isdigit() for c in i)]
    assert len(ids) > 100
    assert sorted(i for i in set(ids) if ids.count(i) > 1) == []
