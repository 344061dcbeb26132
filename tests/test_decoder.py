"""Decoder LLMs (PromptEOL, Pretended CoT, Knowledge Enhancement) on tiny random OPT / LLaMA / Qwen2 decoders.

The reference is the official code's rules, recomputed here by hand (its code is not vendored):
kongds/scaling_sentemb@8567aa0 ``evaluation.py:191-223`` (eval prompts, left padding with pad id 0, last token)
and ``ft_llm.py:221-239`` (training: the sentence cut to 32 tokens and decoded back), ZBWpro/PretCoTandKE@ad3a799
``settings.py:8-16`` (template strings) and ``evaluation.py:266-269`` (the layer read).
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
import yaml

from cselab.methods.checks import LEGACY_MODEL_KEYS
from cselab.model.decoder_input import PromptCollate, prompteol_sentence, split_prompt
from cselab.model.spec import ConfigError
from cselab.model.template_input import ViewSpec

ROOT = Path(__file__).resolve().parents[1]
KINDS = ("opt", "llama", "qwen2")

#: the official template strings, as the official scripts write them
OFFICIAL_TEMPLATES = {
    # kongds/scaling_sentemb train_llm.sh:4, eval_checkpoints.sh:41 (underscore = space)
    "prompteol": 'This_sentence_:_"*sent_0*"_means_in_one_word:"',
    # ZBWpro/PretCoTandKE settings.py:11-12, 15-16 (spaces written as spaces)
    "pretcot": 'After thinking step by step , this sentence : "*sent_0*" means in one word:"',
    "knowledge": 'The essence of a sentence is often captured by its main subjects and actions, while descriptive '
                 'terms provide additional but less central details. With this in mind , this sentence : '
                 '"*sent_0*" means in one word:"',
    "promptsth": 'This sentence : "*sent_0*" means something',
    "promptsum": 'This sentence : "*sent_0*" can be summarized as',
}
#: kongds/scaling_sentemb run_icl.sh:5 (opt-125m's demonstration, icl_examples.txt line 16)
OFFICIAL_ICL_OPT_125M = ('This_sentence_:_"A_man_is_smoking."_means_in_one_word:"Smoking".This_sentence_:_"*sent_0*"'
                         '_means_in_one_word:"')
#: the layer each prompt reads (PretCoT / KE: hidden_states[-2], ZBWpro/PretCoTandKE evaluation.py:266-267)
LAYERS = {"prompteol": -1, "pretcot": -2, "knowledge": -2, "promptsth": -1, "promptsum": -1}

SENTENCES = [
    "A man is playing a guitar",
    'He said "it is raining" today?',
    "Is the cat on the mat?",
    "The dog ran.",
    "ends with a quote'",
    'a "quoted" word',
    "x",
    "",
    "A woman is slicing an onion while the sun is shining over the little house by the river and the birds sing",
]


def official_eval_prompt(template: str, sentence: str) -> str:
    """The official evaluation prompt of ``sentence`` (evaluation.py:194-201), from its rules: the template's
    ``_`` read as spaces and its ``*cls*`` / ``*sep+*`` dropped; a sentence not ending in one of ``.?"'`` gets a
    period; double quotes become single quotes; a sentence then ending in ``?`` ends in ``.``; the sentence takes
    the place of ``*sent 0*`` and the whole prompt is stripped."""
    frame = template.replace("_", " ")
    for marker in ("*sep+*", "*cls*"):
        frame = frame.replace(marker, "")
    text = sentence
    if text and text[-1] not in ".?\"'":
        text = text + "."
    text = text.replace('"', "'")
    if text.endswith("?"):
        text = text[:-1] + "."
    return frame.replace("*sent 0*", text).strip()


def official_train_prompt(template: str, sentence: str, tokenizer, cutoff: int = 32) -> str:
    """The official training prompt (ft_llm.py:221-239): the sentence's first ``cutoff`` tokens without special
    tokens, decoded back, in the template; no sentence rule."""
    ids = tokenizer(sentence, add_special_tokens=False)["input_ids"][:cutoff]
    frame = template.replace("_", " ").replace("*sep+*", "").replace("*cls*", "")
    return frame.replace("*sent 0*", tokenizer.decode(ids)).strip()


def official_batch(tokenizer, prompts: list[str]) -> dict[str, torch.Tensor]:
    """``batch_encode_plus(padding=True)`` with left padding and pad id 0 (evaluation.py:143-144, 203-209)."""
    ids = [tokenizer(p)["input_ids"] for p in prompts]
    width = max(len(i) for i in ids)
    input_ids = torch.tensor([[0] * (width - len(i)) + i for i in ids])
    mask = torch.tensor([[0] * (width - len(i)) + [1] * len(i) for i in ids])
    return {"input_ids": input_ids, "attention_mask": mask}


def load_prompt(name: str) -> dict:
    return yaml.safe_load((ROOT / "conf" / "prompt" / f"{name}.yaml").read_text())


def make_decoder_method(path: Path, prompt: str = "prompteol", tuning: dict | None = None, setting: str = "sup",
                        loss: dict | None = None, **kwargs):
    from cselab.methods.prompteol.method import PromptEOL

    torch.manual_seed(0)
    model = {"pooler": "last_token", "head": "none", "prompt": load_prompt(prompt),
             "tuning": tuning or {"name": "lora", "r": 4, "alpha": 16, "dropout": 0.0, "target_modules": "all-linear"}}
    model.update({k: kwargs.pop(k) for k in list(kwargs) if k in LEGACY_MODEL_KEYS})
    return PromptEOL(backbone={"name_or_path": str(path), "family": "decoder"}, setting=setting, model=model,
                     loss=loss or {"name": "infonce", "temperature": 0.05}, **kwargs)


@pytest.fixture(scope="module")
def tokenizers(tiny_decoder_dirs):
    from transformers import AutoTokenizer

    return {k: AutoTokenizer.from_pretrained(p) for k, p in tiny_decoder_dirs.items()}


# ------------------------------------------------------------------------------------------ templates and ids

@pytest.mark.parametrize("name", sorted(OFFICIAL_TEMPLATES))
def test_prompt_configs_hold_the_official_strings(name):
    ours = load_prompt(name)["templates"]["decoder"]["view1"]
    before, after = split_prompt(ours)
    official = OFFICIAL_TEMPLATES[name].replace("_", " ").replace("*sent 0*", "[X]")
    assert before + "[X]" + after == official
    assert load_prompt(name)["layer"] == LAYERS[name]


def test_official_spelling_parses_like_the_readable_one():
    assert split_prompt(OFFICIAL_TEMPLATES["prompteol"]) == split_prompt(load_prompt("prompteol")["templates"]
                                                                          ["decoder"]["view1"])
    with pytest.raises(ValueError, match=r"\[MASK\]"):
        split_prompt('This sentence : "[X]" means [MASK] .')
    with pytest.raises(ValueError, match="exactly one"):
        split_prompt("no sentence slot")


def test_eval_sentence_rules():
    assert prompteol_sentence("a cat") == "a cat."
    assert prompteol_sentence('Is it "raining"?') == "Is it 'raining'."
    assert prompteol_sentence('he said "hi"') == "he said 'hi'"    # ends in " : no period; then " -> '
    assert prompteol_sentence("why?") == "why."
    assert prompteol_sentence("") == ""


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", ["prompteol", "pretcot", "knowledge"])
def test_eval_ids_and_left_padding_equal_the_official_batch(kind, name, tokenizers):
    tok = tokenizers[kind]
    collate = PromptCollate(tok, [ViewSpec("text", load_prompt(name)["templates"]["decoder"]["view1"])],
                            eval_rules=True)
    prompts = [official_eval_prompt(OFFICIAL_TEMPLATES[name], s) for s in SENTENCES]
    assert collate.prompts(SENTENCES) == prompts
    ids = collate.tokenize(SENTENCES)
    assert ids == [tok(p)["input_ids"] for p in prompts]
    batch = collate.build({"text": ids})
    expected = official_batch(tok, prompts)
    assert torch.equal(batch["input_ids"][:, 0], expected["input_ids"])
    assert torch.equal(batch["attention_mask"][:, 0], expected["attention_mask"])
    assert (batch["rep_index"] == batch["input_ids"].shape[-1] - 1).all()
    bos = tok.bos_token_id
    if kind == "qwen2":  # no BOS, and never an EOS
        assert all(i[0] != tok.eos_token_id and i[-1] != tok.eos_token_id for i in ids)
    else:
        assert all(i[0] == bos for i in ids) and all(i[-1] != tok.eos_token_id for i in ids)
    # the prompt's last token is the closing quote of `word:"` (or a token ending in it)
    assert all(tok.decode(i[-1:]).endswith('"') for i in ids)


@pytest.mark.parametrize("kind", KINDS)
def test_whole_prompt_tokenization_differs_from_piecewise(kind, tokenizers):
    """Why the prompt is ONE string: a byte-level BPE merges across the sentence / template boundary."""
    tok = tokenizers[kind]
    collate = PromptCollate(tok, [ViewSpec("text", load_prompt("prompteol")["templates"]["decoder"]["view1"])],
                            eval_rules=True)
    before, after = collate.parts[0]
    whole = collate.tokenize(["The dog ran."])[0]
    special = tok("x")["input_ids"][:-len(tok("x", add_special_tokens=False)["input_ids"])]
    pieces = special + [t for text in (before.strip(), "The dog ran.", after)
                        for t in tok(text, add_special_tokens=False)["input_ids"]]
    assert tok.decode(whole) == tok.decode(pieces)
    prompt = collate.prompts(["The dog ran."])[0]
    pretokens = [p for p, _ in tok.backend_tokenizer.pre_tokenizer.pre_tokenize_str(prompt)]
    assert "Ġran.\"" in pretokens or '."' in pretokens   # the sentence's period and the template's quote: one piece
    merged = tok.convert_tokens_to_ids('."')
    if merged is not None and merged != tok.unk_token_id:  # the BPE learned the merge: the ids differ
        assert whole != pieces


@pytest.mark.parametrize("kind", KINDS)
def test_training_prompt_truncates_only_the_sentence(kind, tokenizers):
    tok = tokenizers[kind]
    template = load_prompt("prompteol")["templates"]["decoder"]["view1"]
    long = " ".join(["the quick brown fox jumps over the lazy dog"] * 8) + ' and "quotes"?'
    examples = [{"sent0": long, "sent1": 'a "short" one?', "hard_neg": "x"}]
    views = [ViewSpec("sent0", template), ViewSpec("sent1", template), ViewSpec("hard_neg", template)]
    train = PromptCollate(tok, views, max_seq_len=32, eval_rules=False)
    batch = train(examples)
    for v, field in enumerate(("sent0", "sent1", "hard_neg")):
        prompt = official_train_prompt(OFFICIAL_TEMPLATES["prompteol"], examples[0][field], tok)
        ids = tok(prompt)["input_ids"]
        row = batch["input_ids"][0, v][batch["attention_mask"][0, v].bool()].tolist()
        assert row == ids
    assert len(tok(long, add_special_tokens=False)["input_ids"]) > 32
    assert '"short" one?' in train.prompts(['a "short" one?'], 1)[0]   # no eval rule in training
    assert train.prompts([long])[0].endswith('means in one word:"')     # the template is never cut
    test = PromptCollate(tok, [ViewSpec("text", template)], eval_rules=True)
    assert "lazy dog and 'quotes'." in test.prompts([long])[0]          # no truncation at evaluation


def test_training_decode_cleanup_is_the_2023_default_when_asked(tokenizers):
    """OPT's 2023 tokenizers cleaned up spaces on decode (`` .`` -> ``.``); transformers 5 does not for BPE."""
    tok = tokenizers["opt"]
    template = load_prompt("prompteol")["templates"]["decoder"]["view1"]
    sentence = "A man , who is here , is n't sad ."
    clean = PromptCollate(tok, [ViewSpec("text", template)], max_seq_len=32, decode_cleanup=True)
    raw = PromptCollate(tok, [ViewSpec("text", template)], max_seq_len=32, decode_cleanup=False)
    assert clean.prompts([sentence]) == ["This sentence : \"A man, who is here, isn't sad.\" means in one word:\""]
    assert raw.prompts([sentence]) == [f'This sentence : "{sentence}" means in one word:"']


def test_icl_template_is_the_official_demonstration():
    from hydra import compose, initialize_config_dir

    import cselab.io.config  # noqa: F401  (resolvers)

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=["method=prompteol", "prompt=prompteol_icl", "backbone=opt_125m"])
        other = compose("config", overrides=["method=prompteol", "prompt=prompteol_icl", "backbone=opt_2_7b"])
    ours = cfg.prompt.templates.decoder.view1
    assert ours == OFFICIAL_ICL_OPT_125M.replace("_", " ").replace("*sent 0*", "[X]")
    # run_icl.sh:8: opt-2.7b's demonstration, icl_examples.txt line 59
    assert '"A jockey riding a horse." means in one word:"Equestrian".This' in other.prompt.templates.decoder.view1
    collate = PromptCollate(None, [ViewSpec("text", ours)], eval_rules=True)
    assert collate.prompts(["Two dogs play"]) == [official_eval_prompt(OFFICIAL_ICL_OPT_125M, "Two dogs play")]
    # prompt=custom takes an official icl_examples.txt line as it is (the demonstration search is a sweep of those)
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        custom = compose("config", overrides=["method=prompteol", "backbone=tiny_opt", "prompt=custom",
                                              f"prompt.template='{OFFICIAL_ICL_OPT_125M}'"])
    assert split_prompt(custom.prompt.templates.decoder.view1) == split_prompt(ours)


def test_icl_file_reads_one_template_per_line_for_the_demonstration_search(tmp_path):
    """``prompt=icl_file prompt.file=... prompt.line=N``: line N (1-based) of a file of official templates, as the
    official search reads icl_examples.txt (evaluation.py:238-242); a sweep over ``prompt.line`` is the search."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    import cselab.io.config  # noqa: F401  (resolvers)
    from cselab.run.spec import RunSpec

    lines = ['This_sentence_:_"*sent_0*"_means_in_one_word:"', OFFICIAL_ICL_OPT_125M, "", "last"]
    (tmp_path / "icl.txt").write_text("\n".join(lines) + "\n")

    def compose_line(line):
        with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
            return compose("config", overrides=["method=prompteol", "backbone=tiny_opt", "method.train=false",
                                                "prompt=icl_file", f"prompt.file={tmp_path / 'icl.txt'}",
                                                f"prompt.line={line}"])

    cfg = compose_line(2)
    RunSpec.from_config(cfg)
    view = cfg.prompt.templates.decoder.view1
    assert view == OFFICIAL_ICL_OPT_125M
    collate = PromptCollate(None, [ViewSpec("text", view)], eval_rules=True)
    assert collate.prompts(["Two dogs play"]) == [official_eval_prompt(OFFICIAL_ICL_OPT_125M, "Two dogs play")]
    assert compose_line(1).prompt.templates.decoder.view1 == lines[0]
    for line, why in ((3, "line 3 is empty"), (5, "has 4 lines .1-based.; line 5 is out of range")):
        with pytest.raises(Exception, match=why):
            OmegaConf.to_container(compose_line(line).prompt, resolve=True)
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        missing = compose("config", overrides=["method=prompteol", "prompt=icl_file", "prompt.file=/nonexistent.txt"])
    with pytest.raises(Exception, match="prompt.file='/nonexistent.txt': no such file"):
        OmegaConf.to_container(missing.prompt, resolve=True)


# ------------------------------------------------------------------------------------------ the representation

@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", ["prompteol", "pretcot"])
def test_last_token_embedding_equals_a_hand_computation(kind, name, tiny_decoder_dirs, tokenizers):
    """cselab's encode (length-sorted, left-padded batches) == the model run on each official prompt alone, read
    at the last position of hidden_states[layer]; and == the official left-padded batch of all prompts."""
    from transformers import AutoModel

    method = make_decoder_method(tiny_decoder_dirs[kind], prompt=name, tuning={"name": "frozen"})
    ours = method.encode(SENTENCES, batch_size=4)
    model = AutoModel.from_pretrained(tiny_decoder_dirs[kind]).eval()
    tok, layer = tokenizers[kind], LAYERS[name]
    prompts = [official_eval_prompt(OFFICIAL_TEMPLATES[name], s) for s in SENTENCES]
    with torch.no_grad():
        alone = torch.stack([model(**tok(p, return_tensors="pt"), output_hidden_states=True).hidden_states[layer][0, -1]
                             for p in prompts])
        batched = model(**official_batch(tok, prompts), output_hidden_states=True).hidden_states[layer][:, -1]
    assert ours.shape == (len(SENTENCES), model.config.hidden_size)
    torch.testing.assert_close(ours, alone, atol=1e-5, rtol=1e-4)
    if kind == "opt":  # positions follow the mask; rotary models shift them with the padding (official default)
        torch.testing.assert_close(ours, batched, atol=1e-5, rtol=1e-4)
    if layer == -2:  # the penultimate entry, before the final norm: not the last layer's state
        with torch.no_grad():
            last = model(**tok(prompts[0], return_tensors="pt")).last_hidden_state[0, -1]
        assert not torch.allclose(last, ours[0], atol=1e-3)


def test_avg_baseline_is_the_masked_mean(tiny_decoder_dirs, tokenizers):
    from transformers import AutoModel

    method = make_decoder_method(tiny_decoder_dirs["llama"], tuning={"name": "frozen"})
    method.model.respec(pooler="avg")
    ours = method.encode(SENTENCES[:3])
    model = AutoModel.from_pretrained(tiny_decoder_dirs["llama"]).eval()
    prompts = [official_eval_prompt(OFFICIAL_TEMPLATES["prompteol"], s) for s in SENTENCES[:3]]
    with torch.no_grad():
        alone = torch.stack([model(**tokenizers["llama"](p, return_tensors="pt")).last_hidden_state[0].mean(0)
                             for p in prompts])
    torch.testing.assert_close(ours, alone, atol=1e-5, rtol=1e-4)


# ------------------------------------------------------------------------------------------ LoRA training

NLI = [{"sent0": f"a man number {i} is playing a guitar", "sent1": f"someone {i} plays music",
        "hard_neg": f"nobody {i} is playing"} for i in range(6)]


@pytest.mark.parametrize("kind", KINDS)
def test_lora_step_changes_only_the_adapters(kind, tiny_decoder_dirs):
    method = make_decoder_method(tiny_decoder_dirs[kind], tuning={"name": "lora", "r": 4, "alpha": 16,
                                                                  "dropout": 0.05, "target_modules": "all-linear"})
    method.train()
    trainable = {n for n, p in method.named_parameters() if p.requires_grad}
    assert trainable and all(".lora_A." in n or ".lora_B." in n for n in trainable)
    names = {n.split(".lora_")[0].rsplit(".", 1)[-1] for n in trainable}
    assert {"q_proj", "v_proj"} <= names and any(n in names for n in ("fc1", "down_proj"))
    before = {n: p.detach().clone() for n, p in method.named_parameters()}
    optimizer = torch.optim.AdamW([p for p in method.parameters() if p.requires_grad], lr=1e-2)
    batch = method.train_collate()(NLI)
    assert batch["input_ids"].shape[:2] == (6, 3)
    loss = method.loss_fn(method.embed(batch))
    loss.backward()
    optimizer.step()
    for n, p in method.named_parameters():
        if n in trainable:
            continue
        assert torch.equal(p, before[n]), f"{n} changed"   # the base stays bit for bit
    assert any(not torch.equal(p, before[n]) for n, p in method.named_parameters() if ".lora_B." in n)
    assert torch.isfinite(loss)


def test_activation_checkpointing_keeps_the_lora_gradients(tiny_decoder_dirs):
    grads = []
    for checkpointing in (False, True):
        method = make_decoder_method(tiny_decoder_dirs["llama"], tuning={"name": "lora", "r": 4, "alpha": 16,
                                                                         "dropout": 0.0})
        method.train()
        if checkpointing:
            method.encoder.enable_activation_checkpointing()
        torch.manual_seed(1)
        method.loss_fn(method.embed(method.train_collate()(NLI))).backward()
        grads.append({n: p.grad.clone() for n, p in method.named_parameters() if p.requires_grad})
    assert grads[0].keys() == grads[1].keys()
    for n in grads[0]:
        torch.testing.assert_close(grads[0][n], grads[1][n], atol=1e-6, rtol=1e-4)


LOSSES = {
    "infonce": {"_target_": "cselab.losses.infonce.InfoNCE", "name": "infonce", "temperature": 0.05},
    "cot_infonce": {"_target_": "cselab.losses.cot_infonce.CoTInfoNCE", "name": "cot_infonce", "temperature": 0.05},
    "infonce_eh": {"_target_": "cselab.losses.energy_hinge.InfoNCEWithEnergyHinge", "name": "infonce_eh",
                   "temperature": 0.05, "margin": 0.2, "eh_weight": 10.0},
}


@pytest.mark.parametrize("loss", sorted(LOSSES))
def test_each_loss_trains_the_adapters_on_decoder_embeddings(loss, tiny_decoder_dirs):
    method = make_decoder_method(tiny_decoder_dirs["opt"], loss=copy.deepcopy(LOSSES[loss]))
    method.train()
    z = method.embed(method.train_collate()(NLI))
    assert z.shape == (6, 3, 32)
    value = method.loss_fn(z)
    value.backward()
    assert torch.isfinite(value) and value > 0
    grads = [p.grad for n, p in method.named_parameters() if ".lora_B." in n]  # A gets none while B = 0
    assert grads and all(g is not None and torch.isfinite(g).all() for g in grads)
    assert any(g.abs().sum() > 0 for g in grads)


def test_unsup_setting_uses_the_prompt_twice(tiny_decoder_dirs):
    method = make_decoder_method(tiny_decoder_dirs["opt"], setting="unsup")
    batch = method.train_collate()(["a man is playing a guitar", "two dogs run"])
    assert batch["input_ids"].shape[:2] == (2, 2)
    assert torch.equal(batch["input_ids"][:, 0], batch["input_ids"][:, 1])


# ------------------------------------------------------------------------------------------ save / load / export

@pytest.mark.parametrize("kind", ["opt", "qwen2"])
def test_save_load_round_trip_keeps_lora(kind, tiny_decoder_dirs, tmp_path):
    from cselab.model.embedding import EmbeddingModel

    method = make_decoder_method(tiny_decoder_dirs[kind])
    with torch.no_grad():
        for n, p in method.named_parameters():
            if ".lora_B." in n:
                p.normal_(0, 0.1)   # a trained adapter (B starts at zero)
    before = method.encode(SENTENCES)
    method.model.save(tmp_path / "m")
    loaded = EmbeddingModel.load(tmp_path / "m")
    assert loaded.backbone.tuning == "lora"
    torch.testing.assert_close(loaded.encode(SENTENCES), before, atol=1e-6, rtol=1e-5)
    frozen = make_decoder_method(tiny_decoder_dirs[kind]).encode(SENTENCES)
    assert not torch.allclose(frozen, before, atol=1e-4)       # the adapters do change the embedding
    loaded.merge_lora()
    assert loaded.backbone.tuning == "full" and not any("lora" in n for n, _ in loaded.named_parameters())
    torch.testing.assert_close(loaded.encode(SENTENCES), before, atol=1e-5, rtol=1e-4)


def test_cselab_load_of_a_lora_checkpoint_is_quiet_and_checks_the_adapters(tiny_decoder_dirs, tmp_path):
    """A LoRA checkpoint holds only the adapters (the backbone comes from its name_or_path): ``cselab.load`` gives
    the same embeddings without Lightning's warning about the frozen keys, and refuses a checkpoint that lacks an
    adapter tensor, naming it."""
    import warnings

    import lightning as L

    import cselab

    method = make_decoder_method(tiny_decoder_dirs["opt"])
    with torch.no_grad():
        for n, p in method.named_parameters():
            if ".lora_B." in n:
                p.normal_(0, 0.1)
    trainer = L.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, default_root_dir=tmp_path)
    trainer.strategy.connect(method)
    trainer.save_checkpoint(tmp_path / "m.ckpt")
    ckpt = torch.load(tmp_path / "m.ckpt", weights_only=False)
    assert ckpt["state_dict"] and all("lora_" in k for k in ckpt["state_dict"])
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        loaded = cselab.load(tmp_path / "m.ckpt")
    assert not [w for w in seen if "not in the checkpoint" in str(w.message)]
    torch.testing.assert_close(loaded.encode(SENTENCES), method.encode(SENTENCES), atol=1e-6, rtol=1e-5)
    dropped = sorted(ckpt["state_dict"])[0]
    del ckpt["state_dict"][dropped]
    torch.save(ckpt, tmp_path / "partial.ckpt")
    with pytest.raises(ValueError, match="1 trained tensors of PromptEOL are not in the checkpoint, e.g. "
                                         + dropped.replace(".", r"\.")):
        cselab.load(tmp_path / "partial.ckpt")


@pytest.mark.parametrize("merge", [False, True])
def test_sentence_transformers_export(merge, tiny_decoder_dirs, tmp_path):
    pytest.importorskip("sentence_transformers")
    from sentence_transformers import SentenceTransformer

    from cselab.export import export

    method = make_decoder_method(tiny_decoder_dirs["llama"], prompt="pretcot")
    with torch.no_grad():
        for n, p in method.named_parameters():
            if ".lora_B." in n:
                p.normal_(0, 0.1)
    result = export(method, tmp_path / "st", merge_lora=merge, verify=SENTENCES[:6])
    assert result["max_abs_diff"] < 1e-5
    assert result["pooler"] == "last_token" and result["pool_layer"] == -2
    loaded = SentenceTransformer(str(tmp_path / "st"), device="cpu", trust_remote_code=True)
    weights = (tmp_path / "st" / "cselab_model.json").read_text()
    assert ('"merged"' in weights) == merge
    theirs = loaded.encode(SENTENCES[:3], convert_to_tensor=True).float()
    torch.testing.assert_close(theirs, method.encode(SENTENCES[:3]), atol=1e-5, rtol=1e-4)


# ------------------------------------------------------------------------------------------ refusals

def test_refusals_name_why(tiny_decoder_dirs, tiny_bert_dir):
    from cselab.methods.cot_bert.method import CoTBERT
    from cselab.methods.registry import method_class
    from cselab.model.loading import load_backbone

    path = {"name_or_path": str(tiny_decoder_dirs["opt"]), "family": "decoder"}
    cot = yaml.safe_load((ROOT / "conf" / "prompt" / "cot_bert.yaml").read_text())
    with pytest.raises(ConfigError, match="Pretended CoT"):
        CoTBERT(backbone=path, model={"pooler": "mask", "prompt": cot, "denoise": "none", "head": "none"})
    with pytest.raises(ConfigError, match="method.denoise=pad on backbone.family=decoder"):
        make_decoder_method(tiny_decoder_dirs["opt"], denoise="pad")
    with pytest.raises(ConfigError, match="tuning=prefix on backbone.family=decoder"):
        make_decoder_method(tiny_decoder_dirs["opt"], tuning={"name": "prefix", "pre_seq_len": 4}, train=False)
    with pytest.raises(ConfigError, match="tuning=prefix conflicts with method=prompteol"):
        make_decoder_method(tiny_decoder_dirs["opt"], tuning={"name": "prefix", "pre_seq_len": 4})
    with pytest.raises(ConfigError, match="needs a decoder LLM"):
        from cselab.methods.prompteol.method import PromptEOL

        PromptEOL(backbone={"name_or_path": str(tiny_bert_dir), "family": "bert"},
                  model={"pooler": "last_token", "head": "none", "prompt": load_prompt("prompteol")})
    for name in ("esimcse", "sncse", "diffcse"):  # encoder-only methods name their families, not "a decoder LLM"
        with pytest.raises(ConfigError, match=f"method={name} runs on BERT / RoBERTa-like encoders "
                                              r"\(backbone.family=bert\|roberta\), got .* of family decoder"):
            method_class(name)(backbone=path, model={"pooler": "cls", "head": "mlp"})
    with pytest.raises(ValueError, match="backbone.family=decoder"):
        load_backbone(str(tiny_decoder_dirs["opt"]), family="bert")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="backbone.load_in_4bit=true needs a CUDA GPU"):
            load_backbone(str(tiny_decoder_dirs["opt"]), load_in_4bit=True)


def test_missing_real_decoder_fails_at_once_offline(monkeypatch):
    from cselab.model.loading import BackboneUnavailableError, load_backbone

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", "/nonexistent-cselab-hf-home")
    with pytest.raises(BackboneUnavailableError, match="tiny_opt"):
        load_backbone("facebook/opt-1.3b")


def test_direct_inference_adds_no_adapters(tiny_decoder_dirs):
    method = make_decoder_method(tiny_decoder_dirs["opt"], train=False)
    assert not any("lora" in n for n, _ in method.named_parameters())
    assert method.num_trainable_parameters() == 0
