"""SNCSE (Wang and Dou 2023) against its official code (Sense-GVT/SNCSE at faa013e).

Which numbers come from where:

* RUN: the negations of :data:`PARSES` and the loss / gradients of :func:`test_loss_and_gradients_equal_the_
  official_cl_forward` were printed by ``scripts/sncse_official_reference.py``, which executes the official
  ``generate_soft_negative_samples.py:9-54`` (spaCy replaced by a stub returning these parses) and
  ``SNCSE/simcse/models.py:89-188`` ``cl_forward`` (the encoder replaced by a stub returning fixed [MASK] states);
* TRANSCRIBED: the training inputs (:func:`official_features`, ``train_SNCSE.py:489-536``), the test strings
  (``bert_prediction.py:67-70``, passed to the real tokenizer as the official script does) and the lookup rule
  (``train_SNCSE.py:510-516``).
"""

from __future__ import annotations

import json
import string
import warnings
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir

import cselab.io.config  # noqa: F401  (resolvers)
from cselab.methods.sncse.loss import InfoNCEWithBML, bidirectional_margin
from cselab.methods.sncse.negation import (
    ParsedSentence,
    RuleParser,
    negate_with_rule,
    read_soft_negatives,
    soft_negative_pair,
    write_soft_negatives,
)
from tests.conftest import build_method

CONF = str(Path(__file__).resolve().parents[1] / "conf")

# ------------------------------------------------------------------------------------------------ negation rules
#: (tokens, deps, tags, lemmas) as spaCy would give them -> the official function's output (RUN)
PARSES = [
    ((["He", "is", "not", "happy", "."], ["nsubj", "ROOT", "neg", "acomp", "punct"],
      ["PRP", "VBZ", "RB", "JJ", "."], ["he", "be", "not", "happy", "."]), "He is happy ."),
    ((["She", "has", "been", "working", "."], ["nsubj", "aux", "aux", "ROOT", "punct"],
      ["PRP", "VBZ", "VBN", "VBG", "."], ["she", "have", "be", "work", "."]), "She has not been working ."),
    ((["He", "likes", "cats", "."], ["nsubj", "ROOT", "dobj", "punct"], ["PRP", "VBZ", "NNS", "."],
      ["he", "like", "cat", "."]), "He does not like cats ."),
    ((["They", "run", "fast", "."], ["nsubj", "ROOT", "advmod", "punct"], ["PRP", "VBP", "RB", "."],
      ["they", "run", "fast", "."]), "They do not run fast ."),
    ((["He", "ran", "home", "."], ["nsubj", "ROOT", "advmod", "punct"], ["PRP", "VBD", "RB", "."],
      ["he", "run", "home", "."]), "He did not run home ."),
    ((["It", "Was", "red", "."], ["nsubj", "ROOT", "acomp", "punct"], ["PRP", "VBD", "JJ", "."],
      ["it", "be", "red", "."]), "It Was not red ."),
    ((["YMCA", "in", "South", "Australia"], ["ROOT", "prep", "compound", "pobj"], ["NNP", "IN", "NNP", "NNP"],
      ["YMCA", "in", "South", "Australia"]), "Not YMCA in South Australia"),
    ((["Go", "if", "you", "can"], ["ROOT", "mark", "nsubj", "aux"], ["VB", "IN", "PRP", "MD"],
      ["go", "if", "you", "can"]), "Not Go if you can"),
    ((["He", "does", "n't", "know", "."], ["nsubj", "aux", "neg", "ROOT", "punct"], ["PRP", "VBZ", "RB", "VB", "."],
      ["he", "do", "not", "know", "."]), "He does not n't know ."),
    ((["Not", "now", ",", "not", "ever"], ["neg", "advmod", "punct", "neg", "ROOT"], ["RB", "RB", ",", "RB", "RB"],
      ["not", "now", ",", "not", "ever"]), "Not now , ever"),
    ((["The", "book", "was", "written", "."], ["det", "nsubjpass", "auxpass", "ROOT", "punct"],
      ["DT", "NN", "VBD", "VBN", "."], ["the", "book", "be", "write", "."]), "The book was not written ."),
    ((["Hello"], ["intj"], ["UH"], ["hello"]), "Not Hello"),
]


@pytest.mark.parametrize(("parse", "expected"), PARSES)
def test_negation_rules_equal_the_official_code(parse, expected) -> None:
    assert negate_with_rule(ParsedSentence(*(tuple(x) for x in parse)))[0] == expected


def test_negation_rejects_lists_of_different_lengths() -> None:
    with pytest.raises(ValueError, match="differ in length"):
        negate_with_rule(ParsedSentence(("a", "b"), ("ROOT",), ("NN", "NN"), ("a", "b")))[0]


@pytest.mark.parametrize(("sentence", "expected"), [
    ("It is not red.", "It is red ."),                                 # rule 1: the first "not" deleted
    ("I cannot swim.", "I can swim ."),                                # spaCy splits "cannot" -> can not
    ("She has eaten the cake.", "She has not eaten the cake ."),       # have + participle: auxiliary
    ("She has a dog.", "Not She has a dog ."),                         # have as the verb: no auxiliary -> "Not"
    ("He doesn't like \"cats\", does he?", "He does not n't like \" cats \" , does he ?"),
    ("The results were published in 1851.", "The results were not published in 1851 ."),
    ("YMCA in South Australia", "Not YMCA in South Australia"),       # no verb: the official fallback
    ("Australia's history", "Not Australia 's history"),
])
def test_rule_parser_substitute(sentence, expected) -> None:
    assert negate_with_rule(RuleParser()(sentence))[0] == expected


def test_cli_writes_the_official_format_and_the_loader_reads_it(tmp_path, capsys) -> None:
    from cselab.cli.data import main as data_main

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("It is red.\n\n  She was here  \nYMCA in South Australia\n", encoding="utf-8")
    out = tmp_path / "sn.jsonl"
    assert data_main(["soft-negatives", "--corpus", str(corpus), "--out", str(out)]) == 0
    assert "3 sentences" in capsys.readouterr().out
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert rows == [["It is red.", "It is not red ."], ["She was here", "She was not here"],
                    ["YMCA in South Australia", "Not YMCA in South Australia"]]
    assert read_soft_negatives(out) == dict(rows)
    assert data_main(["soft-negatives", "--corpus", str(tmp_path / "none.txt")]) == 1
    bad = tmp_path / "bad.jsonl"
    bad.write_text('["a", "b"]\n{"a": 1}\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad.jsonl:2: expected a JSON list"):
        read_soft_negatives(bad)
    with pytest.raises(ValueError, match="expected rules or spacy"):
        write_soft_negatives(corpus, out, __import__("cselab.methods.sncse.negation", fromlist=["build_parser"]).build_parser("stanza"))


def test_official_training_pair_and_lookup() -> None:
    """``train_SNCSE.py:510-516``: the period rule first, then the lookup BY the ruled sentence (TRANSCRIBED)."""
    negations = {"He is here.": "He is not here .", "He is here": "He is not here", "Wow!": "Not Wow !"}
    assert soft_negative_pair("He is here.", negations) == ("He is here.", "He is not here .")
    # the raw line has no final punctuation: the lookup key is "He is here ." -> not in the file
    assert soft_negative_pair("He is here", negations) == ("He is here .", "Not He is here .")
    assert soft_negative_pair("Wow!", negations) == ("Wow!", "Not Wow !")
    assert soft_negative_pair("a (b)", {}) == ("a (b)", "Not a (b)")   # ")" is punctuation
    assert soft_negative_pair("ends with space ", {}) == ("ends with space  .", "Not ends with space  .")


# ------------------------------------------------------------------------------------------------ the loss
def _official_inputs() -> torch.Tensor:
    """The (B=6, 3, D=8) float64 [MASK] states of scripts/sncse_official_reference.py."""
    g = torch.Generator().manual_seed(0)
    z1 = torch.randn(6, 8, generator=g, dtype=torch.float64)
    z2 = z1 + 0.8 * torch.randn(6, 8, generator=g, dtype=torch.float64)
    z3 = z1 + torch.linspace(0.2, 2.5, 6, dtype=torch.float64)[:, None] * torch.randn(6, 8, generator=g,
                                                                                      dtype=torch.float64)
    return torch.stack([z1, z2, z3], 1)


#: lambda -> (loss, dL/dz[:, :, 0], |dL/dz|) printed by the official cl_forward (RUN)
OFFICIAL_LOSS = {
    1e-3: (0.035699398705442614,
           [[0.004323447029406806, 0.0016755332849755443, -1.3325438211125419e-06],
            [1.7060324324886635e-05, -0.012094364624772593, -4.824568583822474e-06],
            [0.2182890987594326, -0.031007056196698246, 9.949321894255783e-06],
            [-0.020914396413935693, -0.009010700952558381, 0.0],
            [-1.7878533631832225e-05, 5.1125283840109513e-05, 1.5340352686526182e-06],
            [3.847117623530267e-06, -2.2024840633825802e-05, -4.052792163300904e-06]], 0.3696697229082942),
    5e-4: (0.03562025439096535, None, 0.36964043406852015),
    1.0: (0.19382973903103004,
          [[0.02899152064766108, 0.003975933122240132, -0.0013325438211125307],
           [0.01711343246726219, -0.018419354479561615, -0.004824568583822471],
           [0.23519534187641467, -0.04887506016652831, 0.009949321894255785],
           [-0.020914396413935693, -0.009010700952558381, 0.0],
           [-0.017707212936752793, 0.014307798547283904, 0.0015340352686526184],
           [-0.009783027461104554, 0.005313060149472946, -0.0040527921633009036]], 0.46313807288938214),
}


@pytest.mark.parametrize("weight", list(OFFICIAL_LOSS))
def test_loss_and_gradients_equal_the_official_cl_forward(weight) -> None:
    z = _official_inputs().requires_grad_(True)
    loss = InfoNCEWithBML(temperature=0.05, alpha=0.1, beta=0.3, bml_weight=weight)(z)
    loss.backward()
    value, grad0, norm = OFFICIAL_LOSS[weight]
    assert float(loss.detach()) == pytest.approx(value, rel=1e-12)
    assert float(z.grad.norm()) == pytest.approx(norm, rel=1e-10)
    if grad0 is not None:
        torch.testing.assert_close(z.grad[:, :, 0], torch.tensor(grad0, dtype=torch.float64), rtol=1e-9, atol=1e-15)


def test_bml_covers_both_margins_and_the_band() -> None:
    """The fixed inputs put rows above -alpha, inside [-beta, -alpha] and below -beta: each BML branch is pinned."""
    z = _official_inputs()
    delta = torch.cosine_similarity(z[:, 0], z[:, 2], dim=1) - torch.cosine_similarity(z[:, 0], z[:, 1], dim=1)
    assert (delta > -0.1).any() and ((delta < -0.1) & (delta > -0.3)).any() and (delta < -0.3).any()
    expected = (torch.relu(delta + 0.1) + torch.relu(-delta - 0.3)).mean()
    assert float(bidirectional_margin(z, 0.1, 0.3)) == pytest.approx(float(expected), rel=1e-12)
    # the soft negative never enters the InfoNCE denominator (official); the switch adds it
    plain = InfoNCEWithBML(bml_weight=0.0)(z)
    with_neg = InfoNCEWithBML(bml_weight=0.0, soft_negative_in_infonce=True)(z)
    assert float(with_neg) > float(plain)


def test_loss_refuses_bad_arguments() -> None:
    with pytest.raises(ValueError, match="alpha <= beta"):
        InfoNCEWithBML(alpha=0.4, beta=0.3)
    with pytest.raises(ValueError, match="bml_weight"):
        InfoNCEWithBML(bml_weight=-1)
    with pytest.raises(ValueError, match="method=sncse"):
        InfoNCEWithBML()(torch.randn(4, 2, 8))


# ------------------------------------------------------------------------------------------------ the method
def _compose(*overrides: str):
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        return compose("config", overrides=list(overrides))


def test_paper_configs() -> None:
    bert = _compose("experiment=sncse/unsup_bert_base")
    assert (bert.hp.batch_size, bert.hp.lr, bert.hp.epochs) == (256, 1e-5, 1)
    assert bert.loss.bml_weight == 1e-3 and (bert.loss.alpha, bert.loss.beta, bert.loss.temperature) == (0.1, 0.3, 0.05)
    assert bert.negatives == "per_device" and bert.max_seq_len == 32 and bert.data.path == "wiki1m_for_simcse.txt"
    assert bert.data.datamodule._target_ == "cselab.methods.sncse.data.SoftNegativeDataModule"
    assert bert.data.soft_negatives is None
    roberta = _compose("experiment=sncse/unsup_roberta_base")
    assert roberta.loss.bml_weight == 5e-4 and roberta.hp.batch_size == 256
    minilm = _compose("method=sncse")
    assert (minilm.hp.batch_size, minilm.hp.lr, minilm.loss.bml_weight) == (64, 1e-5, 1e-3)
    assert _compose("method=sncse", "backbone=bert_large").hp.lr == 5e-6


def official_features(tokenizer, sentence: str, negation: dict[str, str], roberta: bool,
                      max_seq_length: int = 32) -> list[list[int]]:
    """``train_SNCSE.py:489-536`` (Different_Prompt_Negation) TRANSCRIBED: the three id lists."""
    punctuation = list(string.punctuation)
    tok = lambda s: tokenizer.convert_tokens_to_ids(tokenizer.tokenize(s))  # noqa: E731
    s1, ss1 = tok('This sentence : " '), tok('This sentence of " ')
    s2 = tokenizer.encode(' " means <mask> .')[1:-1] if roberta else tok(' " means [MASK] .')
    budget, budget1 = max_seq_length - len(s1) - len(s2) - 2, max_seq_length - len(ss1) - len(s2) - 2
    if sentence.strip()[-1] not in punctuation:
        sentence = sentence + " ."
    negation_sentence = negation.get(sentence, "Not " + sentence)
    if negation_sentence.strip()[-1] not in punctuation:
        negation_sentence = negation_sentence + " ."
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    return [[cls, *s1, *tok(sentence)[:budget], *s2, sep], [cls, *ss1, *tok(sentence)[:budget1], *s2, sep],
            [cls, *ss1, *tok(negation_sentence)[:budget1], *s2, sep]]


SENTENCES = ["a man is playing a guitar", "the cat sat on the mat.", "two dogs are running in the park and the "
             "birds fly over the river while a woman is slicing an onion in the kitchen", "it is raining today!"]


def _sncse(directory: Path, family: str):
    torch.manual_seed(0)
    return build_method(_compose("method=sncse", f"backbone.name_or_path={directory}", f"backbone.family={family}"))


@pytest.fixture(scope="module")
def sncse_bert(tiny_bert_dir):
    return _sncse(tiny_bert_dir, "bert")


@pytest.fixture(scope="module")
def sncse_roberta(tiny_roberta_dir):
    return _sncse(tiny_roberta_dir, "roberta")


@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_training_inputs_equal_the_official_features(family, request) -> None:
    method = request.getfixturevalue(f"sncse_{family}")
    tok = method.tokenizer
    negations = {s: negate_with_rule(RuleParser()(s))[0] for s in SENTENCES}
    from cselab.methods.sncse.data import SoftNegativeCollate

    batch = SoftNegativeCollate(method.train_collate(), negations)([{"text": s} for s in SENTENCES])
    assert batch["input_ids"].shape[:2] == (4, 3)
    for b, s in enumerate(SENTENCES):
        expected = official_features(tok, s, negations, roberta=family == "roberta")
        for v in range(3):
            n = int(batch["attention_mask"][b, v].sum())
            assert batch["input_ids"][b, v, :n].tolist() == expected[v], (s, v)
            assert batch["input_ids"][b, v, batch["rep_index"][b, v]] == tok.mask_token_id
    assert int(batch["attention_mask"][2].sum(-1).max()) == 32   # the long sentence: cut to 32 in all
    if family == "roberta":  # the official prefix ends in a lone "Ġ" (tokenize('This sentence : " '))
        assert tok.convert_ids_to_tokens(batch["input_ids"][0, 0, :6].tolist())[-1] == "\u0120"


@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_test_encoder_is_the_official_prediction_script(family, request) -> None:
    """``bert_prediction.py:15-33,67-71`` / ``roberta_prediction.py``: the whole string through the tokenizer, the
    [MASK] state of the bare model, no MLP."""
    method = request.getfixturevalue(f"sncse_{family}").eval()
    tok = method.tokenizer
    texts = [s + " ." if s.strip()[-1] not in string.punctuation else s for s in SENTENCES]
    texts = ['This sentence : " ' + s + ' " means ' + tok.mask_token + " ." for s in texts]
    inputs = tok(texts, padding=True, truncation=True, return_tensors="pt")
    with torch.no_grad():
        hidden = method.encoder.model(**inputs).last_hidden_state
    expected = hidden[inputs["input_ids"] == tok.mask_token_id]
    got = method.encode(SENTENCES)
    torch.testing.assert_close(got, expected.float(), rtol=1e-5, atol=1e-5)
    batch = method.eval_collate(SENTENCES)
    for b in range(len(SENTENCES)):
        n = int(batch["attention_mask"][b, 0].sum())
        assert batch["input_ids"][b, 0, :n].tolist() == inputs["input_ids"][b][inputs["attention_mask"][b] == 1].tolist()
    method.train()


def test_training_loss_is_infonce_bml_of_the_mlp_mask_states(sncse_bert) -> None:
    """Dropout off: the step's loss = InfoNCE + lambda BML of MLP([MASK] state) (``models.py:132-159``)."""
    method = sncse_bert
    negations = {s: negate_with_rule(RuleParser()(s))[0] for s in SENTENCES}
    from cselab.methods.sncse.data import SoftNegativeCollate

    batch = SoftNegativeCollate(method.train_collate(), negations)([{"text": s} for s in SENTENCES])
    method.train()  # the MLP is a training-time head: train mode, dropout off
    rates = {m: m.p for m in method.modules() if isinstance(m, torch.nn.Dropout)}
    for m in rates:
        m.p = 0.0
    b, v, t = batch["input_ids"].shape
    ids, mask = batch["input_ids"].view(b * v, t), batch["attention_mask"].view(b * v, t)
    with torch.no_grad():
        h = method.encoder.model(input_ids=ids, attention_mask=mask).last_hidden_state[ids == method.tokenizer.mask_token_id]
        z = method.head(h).view(b, v, -1)
        expected = InfoNCEWithBML(bml_weight=1e-3)(z)
        loss, _, size = method.forward_loss(batch)
    for m, p in rates.items():
        m.p = p
    assert size == 4
    assert float(loss) == pytest.approx(float(expected), rel=1e-5)


def test_datamodule_rows_and_refusals(tmp_path, monkeypatch) -> None:
    from cselab.methods.sncse.data import SoftNegativeDataModule

    corpus = tmp_path / "c.txt"
    corpus.write_text("".join(f"sentence number {i} is here\n" for i in range(10)), encoding="utf-8")
    seen = []

    def collate(rows):
        seen.extend(rows)
        return {"input_ids": torch.zeros(len(rows), 3, 1)}

    dm = SoftNegativeDataModule(collate, soft_negatives=str(tmp_path / "missing.jsonl"), path=str(corpus),
                                batch_size=4)
    with pytest.raises(FileNotFoundError, match=r"data.soft_negatives.*cselab data soft-negatives"):
        dm.setup("fit")
    other = tmp_path / "other.jsonl"
    other.write_text('["another corpus", "not another corpus"]\n', encoding="utf-8")
    dm = SoftNegativeDataModule(collate, soft_negatives=str(other), path=str(corpus), batch_size=4)
    with pytest.raises(ValueError, match="negates none"):
        dm.setup("fit")
    monkeypatch.chdir(tmp_path)
    write_soft_negatives(corpus, tmp_path / "soft_negatives" / "c.txt.jsonl", RuleParser())
    for streaming in (False, True):
        seen.clear()
        dm = SoftNegativeDataModule(collate, soft_negatives=None, path="c.txt", data_dir=str(tmp_path), batch_size=4,
                                    streaming=streaming)
        assert dm.soft_negatives == "soft_negatives/c.txt.jsonl"
        dm.setup("fit")
        for _ in dm.train_dataloader():
            pass
        assert sorted(r["text"] for r in seen) == sorted(f"sentence number {i} is here ." for i in range(10))
        # the corpus lines lack a final mark: the official lookup by "... ." misses, the negative is "Not ... ."
        assert all(r["soft_neg"] == "Not " + r["text"] for r in seen)
    pair = tmp_path / "p.jsonl"  # a file keyed by the ruled sentence is found
    pair.write_text(json.dumps(["sentence number 1 is here .", "sentence number 1 is not here ."]) + "\n")
    assert soft_negative_pair("sentence number 1 is here", read_soft_negatives(pair))[1] == \
        "sentence number 1 is not here ."


def test_published_rows() -> None:
    """SNCSE's published averages (arXiv:2201.05979 abstract), found by the report's lookup."""
    from cselab.report.published import load_published, lookup

    rows = load_published()
    assert lookup(rows, "sncse", "bert_base", "unsup").scores["avg"] == 78.97
    assert lookup(rows, "sncse", "roberta_base", "unsup").scores["avg"] == 79.23
    assert lookup(rows, "sncse", "bert_base", "unsup").source == "SNCSE abstract (avg of the 7 STS tasks)"


@pytest.mark.integration
def test_minilm_short_run_then_compare_with_simcse(tmp_path, short_stsb_data_dir, minilm_simcse_run) -> None:
    """The embedded MiniLM: SNCSE on the soft negatives of the embedded corpus, then ``cselab compare`` against the
    shared SimCSE run of the same seed and settings (``MINILM_SHORT_RUN``: 4 steps, STS-B dev and test, their first
    120 pairs)."""
    from cselab.cli.compare import main as compare_main
    from tests.conftest import MINILM_SHORT_RUN, run_py

    corpus = short_stsb_data_dir / "wiki1m_sample" / "wiki1m_for_simcse.head11914.txt"
    negatives = tmp_path / "soft_negatives.jsonl"
    write_soft_negatives(corpus, negatives, RuleParser())
    results = run_py(tmp_path / "sncse", "method=sncse", *MINILM_SHORT_RUN, f"data.soft_negatives={negatives}",
                     data_dir=short_stsb_data_dir)
    assert results["global_step"] == 4 and 0 < results["test"]["stsb"] < 100
    assert results["config"]["method"]["name"] == "sncse"
    assert compare_main([str(tmp_path / "sncse"), str(minilm_simcse_run), "--n-resamples", "200"]) == 0


def test_export_is_the_official_test_encoder(tiny_bert_dir, tmp_path) -> None:
    """``cselab export`` of a trained SNCSE checkpoint: the sentence-transformers folder encodes as
    ``bert_prediction.py`` (template 1, the ` .` rule, the bare [MASK] state, no MLP)."""
    import lightning as L
    from sentence_transformers import SentenceTransformer

    import cselab
    from cselab.export import export
    from cselab.methods.sncse.data import SoftNegativeCollate

    method = _sncse(tiny_bert_dir, "bert")
    negations = {s: negate_with_rule(RuleParser()(s))[0] for s in SENTENCES}
    loader = torch.utils.data.DataLoader([{"text": s} for s in SENTENCES], batch_size=2,
                                         collate_fn=SoftNegativeCollate(method.train_collate(), negations))
    trainer = L.Trainer(max_steps=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, default_root_dir=tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(method, loader)
    ckpt = tmp_path / "m.ckpt"
    trainer.save_checkpoint(ckpt)
    probes = [*SENTENCES, "a question?", "no final mark"]
    info = export(str(ckpt), tmp_path / "st", verify=probes)
    assert not info["use_head"] and "period rule" in info["st_module_reason"]
    model = SentenceTransformer(str(tmp_path / "st"), device="cpu", trust_remote_code=info["trust_remote_code"])
    theirs = model.encode(probes, convert_to_tensor=True).float().cpu()
    loaded = cselab.load(str(ckpt))
    tok = loaded.tokenizer
    texts = ['This sentence : " ' + (s + " ." if s.strip()[-1] not in string.punctuation else s) + ' " means [MASK] .'
             for s in probes]
    inputs = tok(texts, padding=True, truncation=True, return_tensors="pt")
    with torch.no_grad():
        official = loaded.encoder.model.eval()(**inputs).last_hidden_state[inputs["input_ids"] == tok.mask_token_id]
    torch.testing.assert_close(theirs, official.float(), rtol=1e-5, atol=1e-5)


def test_period_rule_and_train_tokenization_are_checked_by_name() -> None:
    from cselab.model.spec import ConfigError, EmbeddingSpec
    from cselab.model.template import append_period, append_period_spaced, period_rule

    assert period_rule("sncse") is append_period_spaced and period_rule(True) is append_period
    assert period_rule(False) is None
    assert [append_period_spaced(s) for s in ("a b", "a b!", "a (b)", "a b ", "")] == \
        ["a b .", "a b!", "a (b)", "a b  .", ""]
    with pytest.raises(ConfigError, match="prompt.add_period_at_eval"):
        EmbeddingSpec(add_period_at_eval="sncs")
    with pytest.raises(ConfigError, match="prompt.train_tokenization"):
        EmbeddingSpec(train_tokenization="simcse")
