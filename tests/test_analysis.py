"""cselab.analysis on tiny random models: static avg, Table-11 removal, Eq. 3 top-k, Table 7, geometry, CLI."""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import math
import re
from pathlib import Path

import pytest
import torch

from cselab.analysis.corpus import read_corpus
from cselab.analysis.geometry import anisotropy
from cselab.analysis.representations import make_encode_fn
from cselab.cli.analysis import main
from cselab.evaluation.align_uniform import align_uniform_stsb, alignment, uniformity
from cselab.model.loading import load_backbone
from cselab.representations.static import (
    BIASED_TOKENS,
    biased_tokens_for,
    static_avg_encoder,
    static_token_ids,
)
from cselab.representations.topk import mask_logits, topk_mask_tokens, topk_token_encoder, topk_weights

#: every word is in the tiny BERT vocabulary and the tiny RoBERTa corpus (tests/conftest.py)
SENTENCES = [
    "a man is playing a guitar",
    "the cat sat on the mat",
    "two dogs are running in the park",
    "a woman is slicing an onion",
    "it is raining today",
    "the dog ran",
    "a cat sat",
    "birds fly",
]
TEMPLATE = '*cls*_This_sentence_:_"*sent_0*"_means*mask*.*sep+*'  # PromptBERT's manual template (BERT)


# ------------------------------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def bert_mlm_dir(tiny_bert_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random ``BertForMaskedLM`` saved with the tiny BERT tokenizer."""
    from transformers import AutoTokenizer, BertConfig, BertForMaskedLM

    d = tmp_path_factory.mktemp("tiny_bert_mlm")
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_bert_dir))
    torch.manual_seed(99)
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=128)
    model = BertForMaskedLM(config)
    with torch.no_grad():  # a sharper head than the random init, so that top-k rankings are not near-ties
        model.cls.predictions.bias.normal_(0.0, 1.0)
    model.save_pretrained(d)
    tokenizer.save_pretrained(d)
    return d


@pytest.fixture(scope="module")
def bert_mlm(bert_mlm_dir: Path):
    encoder, tokenizer = load_backbone(str(bert_mlm_dir), mlm_head=True)
    encoder.eval()
    return encoder, tokenizer


@pytest.fixture(scope="module")
def bert_plain(tiny_bert_dir: Path):
    encoder, tokenizer = load_backbone(str(tiny_bert_dir))
    encoder.eval()
    return encoder, tokenizer


@pytest.fixture(scope="module")
def roberta_plain(tiny_roberta_dir: Path):
    encoder, tokenizer = load_backbone(str(tiny_roberta_dir))
    encoder.eval()
    return encoder, tokenizer


def _static_weight(encoder) -> torch.Tensor:
    return encoder.model.embeddings.word_embeddings.weight.detach()


# ------------------------------------------------------------------------------------------ static avg


def test_static_avg_matches_manual_mean_with_special_tokens(bert_plain) -> None:
    encoder, tokenizer = bert_plain
    got = static_avg_encoder(encoder, tokenizer)(SENTENCES)
    w = _static_weight(encoder)
    for n, s in enumerate(SENTENCES):
        ids = tokenizer(s)["input_ids"]  # [CLS] ... [SEP]: the official plain static avg averages them too
        assert ids[0] == tokenizer.cls_token_id and ids[-1] == tokenizer.sep_token_id
        torch.testing.assert_close(got[n], w[ids].mean(0), atol=1e-6, rtol=0)
    # no position / type embeddings, no LayerNorm: differs from the embedding layer's output
    out = encoder.model.embeddings(input_ids=torch.tensor([tokenizer(SENTENCES[0])["input_ids"]]))
    assert not torch.allclose(got[0], out[0].mean(0), atol=1e-3)


def test_static_avg_without_special_tokens(bert_plain) -> None:
    encoder, tokenizer = bert_plain
    got = static_avg_encoder(encoder, tokenizer, include_special=False)(SENTENCES[:3])
    w = _static_weight(encoder)
    for n, s in enumerate(SENTENCES[:3]):
        ids = tokenizer(s, add_special_tokens=False)["input_ids"]
        torch.testing.assert_close(got[n], w[ids].mean(0), atol=1e-6, rtol=0)


def test_table11_lists() -> None:
    for name, tokens in BIASED_TOKENS.items():
        assert len(tokens) == 36 and len(set(tokens)) == 36, name
    assert BIASED_TOKENS["bert-base-uncased"] == BIASED_TOKENS["bert-base-cased"]
    assert {"man", "woman", "##s", "white", "playing"} <= set(BIASED_TOKENS["bert-base-uncased"])
    assert {"Ġman", "Ġwoman", "Ġplaying", "s", "i", "Ġby"} <= set(BIASED_TOKENS["roberta-base"])
    assert biased_tokens_for("google-bert/bert-base-cased", "bert") is BIASED_TOKENS["bert-base-cased"]
    assert biased_tokens_for("/some/folder", "roberta") is BIASED_TOKENS["roberta-base"]
    with pytest.raises(ValueError, match="family"):
        biased_tokens_for(None, "t5")


def test_bert_biased_removal_drops_exactly_listed_subword_punctuation(bert_plain) -> None:
    encoder, tokenizer = bert_plain
    s = "The man is playing guitars, sunny sky!"
    toks = tokenizer.convert_ids_to_tokens(tokenizer(s, add_special_tokens=False)["input_ids"])
    assert toks == ["the", "man", "is", "playing", "guitar", "##s", ",", "sunny", "sky", "!"]
    (ids,) = static_token_ids([s], tokenizer, "bert", remove_biased=True)
    # the, man, is, playing: Table 11; ##s: subword (and Table 11); , and !: punctuation; no [CLS]/[SEP]
    assert tokenizer.convert_ids_to_tokens(ids) == ["guitar", "sunny", "sky"]
    got = static_avg_encoder(encoder, tokenizer, remove_biased=True)([s, "the , ."])
    w = _static_weight(encoder)
    torch.testing.assert_close(got[0], w[ids].mean(0), atol=1e-6, rtol=0)
    # nothing left -> fall back to all the sentence's tokens
    fallback = tokenizer("the , .", add_special_tokens=False)["input_ids"]
    torch.testing.assert_close(got[1], w[fallback].mean(0), atol=1e-6, rtol=0)
    # include_special forces [CLS]/[SEP] back in
    (with_special,) = static_token_ids([s], tokenizer, "bert", remove_biased=True, include_special=True)
    assert with_special == [tokenizer.cls_token_id, *ids, tokenizer.sep_token_id]


def test_roberta_biased_removal_rule(roberta_plain) -> None:
    encoder, tokenizer = roberta_plain
    s = "a man is playing guitars ."
    toks = tokenizer.convert_ids_to_tokens(tokenizer(" " + s, add_special_tokens=False)["input_ids"])
    assert toks == ["Ġa", "Ġman", "Ġis", "Ġplaying", "Ġguitar", "s", "Ġ."]
    (ids,) = static_token_ids([s], tokenizer, "roberta", remove_biased=True)
    assert tokenizer.convert_ids_to_tokens(ids) == ["Ġguitar"]  # "s": continuation (no Ġ); "Ġ.": punctuation
    # case step: lowercase=True turns "The Dog" into the Table-11 tokens Ġthe Ġdog
    (low,) = static_token_ids(["The Dog ran"], tokenizer, "roberta", remove_biased=True, lowercase=True)
    assert tokenizer.convert_ids_to_tokens(low) == ["Ġran"]
    # every kept token obeys the rule, every dropped one breaks it, on all the test sentences
    listed = set(BIASED_TOKENS["roberta-base"])
    for sent in SENTENCES:
        all_ids = tokenizer(" " + sent, add_special_tokens=False)["input_ids"]
        verdict = [
            "Ġ" in t and t not in listed and re.search("[a-zA-Z0-9]", t) is not None
            for t in tokenizer.convert_ids_to_tokens(all_ids)
        ]
        (kept,) = static_token_ids([sent], tokenizer, "roberta", remove_biased=True)
        want = [i for i, ok in zip(all_ids, verdict, strict=True) if ok] or all_ids  # fallback: keep all
        assert kept == want, sent
    got = static_avg_encoder(encoder, tokenizer, remove_biased=True)([s])
    torch.testing.assert_close(got[0], _static_weight(encoder)[ids].mean(0), atol=1e-6, rtol=0)


# ------------------------------------------------------------------------------------------ top-k


def _direct_mask_hidden(encoder, tokenizer, sentence: str, denoise: bool) -> torch.Tensor:
    """[MASK] state by hand: the whole prompt string through the HF model (and the bias by hand)."""
    s = sentence if sentence[-1] in ".?\"'" else sentence + "."
    prefix = [tokenizer.cls_token_id, *tokenizer('This sentence : "', add_special_tokens=False)["input_ids"]]
    sent = tokenizer(s, add_special_tokens=False)["input_ids"]
    suffix = [*tokenizer('" means [MASK] .', add_special_tokens=False)["input_ids"], tokenizer.sep_token_id]
    full = tokenizer(f'This sentence : "{s}" means [MASK] .')["input_ids"]
    assert full == prefix + sent + suffix  # WordPiece: tokenizing the pieces = tokenizing the whole
    ids = torch.tensor([full])
    with torch.no_grad():
        last = encoder.mlm.bert(input_ids=ids).last_hidden_state[0]
        h = last[full.index(tokenizer.mask_token_id)]
        if not denoise:
            return h
        bias_ids = prefix + suffix
        pos = list(range(len(prefix))) + [len(prefix) + len(sent) + j for j in range(len(suffix))]
        bl = encoder.mlm.bert(input_ids=torch.tensor([bias_ids]), position_ids=torch.tensor([pos]))
        return h - bl.last_hidden_state[0, bias_ids.index(tokenizer.mask_token_id)]


def test_topk_weights_sum_to_one() -> None:
    logits = torch.randn(4, 50, generator=torch.Generator().manual_seed(0))
    w, idx = topk_weights(logits, 7)
    torch.testing.assert_close(w.sum(-1), torch.ones(4, dtype=w.dtype), atol=1e-6, rtol=0)
    p = torch.softmax(logits, -1)
    torch.testing.assert_close(w, p.gather(1, idx) / p.gather(1, idx).sum(-1, keepdim=True))
    assert (idx[:, 0] == logits.argmax(-1)).all()
    with pytest.raises(ValueError, match="k=0"):
        topk_weights(logits, 0)


def test_topk_encoder_k1_is_argmax_static_embedding(bert_mlm) -> None:
    encoder, tokenizer = bert_mlm
    sents = SENTENCES[:4]
    got = topk_token_encoder(encoder, tokenizer, TEMPLATE, k=1)(sents)
    w = _static_weight(encoder)
    for n, s in enumerate(sents):
        with torch.no_grad():
            logits = encoder.mlm.cls(_direct_mask_hidden(encoder, tokenizer, s, denoise=False))
        assert torch.equal(got[n], w[int(logits.argmax())].float())


@pytest.mark.parametrize("denoise", [False, True])
def test_topk_encoder_matches_eq3(bert_mlm, denoise: bool) -> None:
    encoder, tokenizer = bert_mlm
    k = 20
    sents = SENTENCES[:3]
    got = topk_token_encoder(encoder, tokenizer, TEMPLATE, k=k, denoise=denoise)(sents)
    w = _static_weight(encoder)
    for n, s in enumerate(sents):
        with torch.no_grad():
            p = torch.softmax(encoder.mlm.cls(_direct_mask_hidden(encoder, tokenizer, s, denoise)), -1)
        top = p.topk(k)
        want = sum(top.values[i] * w[top.indices[i]] for i in range(k)) / top.values.sum()
        torch.testing.assert_close(got[n], want, atol=1e-5, rtol=1e-5)


def test_topk_mask_tokens_with_and_without_denoising(bert_mlm) -> None:
    encoder, tokenizer = bert_mlm
    sents = ["i am sad.", "the man is playing the guitar"]
    plain = topk_mask_tokens(encoder, tokenizer, TEMPLATE, sents, k=5)
    den = topk_mask_tokens(encoder, tokenizer, TEMPLATE, sents, k=5, denoise=True)
    assert len(plain) == len(den) == 2 and all(len(r) == 5 for r in plain + den)
    assert plain != den
    for rows, denoise in ((plain, False), (den, True)):
        for s, row in zip(sents, rows, strict=True):
            with torch.no_grad():
                p = torch.softmax(encoder.mlm.cls(_direct_mask_hidden(encoder, tokenizer, s, denoise)), -1)
            top = p.topk(5)
            assert [t for t, _ in row] == tokenizer.convert_ids_to_tokens(top.indices.tolist())
            torch.testing.assert_close(torch.tensor([q for _, q in row]), top.values, atol=1e-5, rtol=1e-4)
            assert all(a >= b for (_, a), (_, b) in itertools.pairwise(row))  # decreasing probabilities
    logits = mask_logits(encoder, tokenizer, TEMPLATE, sents, denoise=True, batch_size=1)
    for n, s in enumerate(sents):
        with torch.no_grad():
            want = encoder.mlm.cls(_direct_mask_hidden(encoder, tokenizer, s, True))
        torch.testing.assert_close(logits[n], want, atol=1e-4, rtol=1e-4)
    # the mask representation with denoising = h - h_hat of the direct computation
    enc = make_encode_fn(encoder, tokenizer, "mask", TEMPLATE, denoise=True)
    torch.testing.assert_close(enc([sents[1]])[0], _direct_mask_hidden(encoder, tokenizer, sents[1], True),
                               atol=1e-5, rtol=1e-5)


def test_topk_on_roberta_mlm(tiny_roberta_dir: Path, tmp_path: Path) -> None:
    from transformers import AutoConfig, AutoTokenizer, RobertaForMaskedLM

    torch.manual_seed(7)
    RobertaForMaskedLM(AutoConfig.from_pretrained(str(tiny_roberta_dir))).save_pretrained(tmp_path)
    AutoTokenizer.from_pretrained(str(tiny_roberta_dir)).save_pretrained(tmp_path)
    encoder, tokenizer = load_backbone(str(tmp_path), mlm_head=True)
    assert encoder.family == "roberta" and encoder.position_offset == 2
    sents = ["a cat sat", "the dog ran on the mat"]
    for denoise in (False, True):
        got = topk_token_encoder(encoder, tokenizer, None, k=1, denoise=denoise)(sents)
        logits = mask_logits(encoder, tokenizer, "*cls*_This_sentence_:_'*sent_0*'_means*mask*.*sep+*", sents,
                             denoise=denoise)
        w = _static_weight(encoder)
        for n in range(2):
            assert torch.equal(got[n], w[int(logits[n].argmax())].float())
    rows = topk_mask_tokens(encoder, tokenizer, None, sents, k=3, denoise=True)
    assert [len(r) for r in rows] == [3, 3]


def test_no_mlm_head_raises_clear_error(bert_plain) -> None:
    encoder, tokenizer = bert_plain
    assert encoder.mlm is None
    with pytest.raises(ValueError, match=r"backbone .*mlm_head=True.*bert-base-uncased"):
        topk_token_encoder(encoder, tokenizer, TEMPLATE, k=5)
    with pytest.raises(ValueError, match="masked-LM head"):
        topk_mask_tokens(encoder, tokenizer, TEMPLATE, ["a cat sat"], k=5)


# ------------------------------------------------------------------------------------------ geometry


def _cal_avg_cosine(k: torch.Tensor) -> float:
    """PB ``evaluation.py:25-35`` (``cal_avg_cosine``), line by line on the CPU: for each row, the mean cosine
    with every row (itself included), averaged."""
    cos = torch.nn.CosineSimilarity(dim=-1)
    s = k[:100000]
    kk = [cos(s[i:i + 1], s).mean().item() for i in range(len(s))]
    return sum(kk) / len(kk)


def test_anisotropy_matches_the_official_cal_avg_cosine_and_eq1() -> None:
    """Default: the official ``cal_avg_cosine`` (all pairs, self-pairs included); ``include_self=False``: Eq. 1 as
    printed (distinct pairs, absolute value), a double loop."""
    g = torch.Generator().manual_seed(3)
    for x in (torch.randn(7, 5, generator=g), torch.randn(9, 4, generator=g) + 2.0, -torch.ones(3, 2)):
        x = x.double()
        n = x.shape[0]
        total = sum(float(torch.cosine_similarity(x[i], x[j], dim=0)) for i in range(n) for j in range(n) if i != j)
        assert anisotropy(x) == pytest.approx(_cal_avg_cosine(x), abs=1e-12)
        assert anisotropy(x) == pytest.approx((total + n) / (n * n), abs=1e-9)
        assert anisotropy(x, include_self=False) == pytest.approx(abs(total) / (n * n - n), abs=1e-9)
    spread = torch.randn(7, 5, generator=g).double()
    assert anisotropy(spread) != pytest.approx(anisotropy(spread, include_self=False), abs=1e-3)
    assert anisotropy(torch.ones(4, 3)) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="at least 2"):
        anisotropy(torch.ones(1, 3))


def test_alignment_uniformity_match_direct_formulas() -> None:
    g = torch.Generator().manual_seed(5)
    x, y = torch.randn(6, 4, generator=g).double(), torch.randn(6, 4, generator=g).double()
    xn, yn = x / x.norm(dim=1, keepdim=True), y / y.norm(dim=1, keepdim=True)
    want_align = sum(float((xn[i] - yn[i]).norm()) ** 2 for i in range(6)) / 6
    assert alignment(x, y) == pytest.approx(want_align, abs=1e-9)
    assert alignment(x, y, alpha=1) == pytest.approx(sum(float((xn[i] - yn[i]).norm()) for i in range(6)) / 6)
    pairs = [(i, j) for i in range(6) for j in range(i + 1, 6)]
    want_unif = math.log(sum(math.exp(-2 * float((xn[i] - xn[j]).norm()) ** 2) for i, j in pairs) / len(pairs))
    assert uniformity(x) == pytest.approx(want_unif, abs=1e-9)
    assert uniformity(x, chunk_size=2) == pytest.approx(want_unif, abs=1e-9)
    assert alignment(x, x) == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(ValueError, match="same shape"):
        alignment(x, y[:3])


def _fake_stsb(root: Path) -> Path:
    d = root / "senteval" / "downstream" / "STS" / "STSBenchmark"
    d.mkdir(parents=True)
    rows = [(4.8, "a man is playing a guitar", "a man plays a guitar"),
            (1.0, "the cat sat on the mat", "birds fly"),
            (4.2, "two dogs are running in the park", "dogs run in the park"),
            (4.0, "it is raining today", "the dog ran"),  # exactly 4.0: not a positive pair
            (3.0, "a man is playing a guitar", "a cat sat")]
    lines = [f"main-captions\tMSRvid\t2012test\t{i:04d}\t{y}\t{a}\t{b}" for i, (y, a, b) in enumerate(rows)]
    (d / "sts-test.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def test_align_uniform_stsb(bert_plain, tmp_path: Path) -> None:
    encoder, tokenizer = bert_plain
    root = _fake_stsb(tmp_path)
    enc = static_avg_encoder(encoder, tokenizer)
    res = align_uniform_stsb(enc, root)
    assert res["n_pairs"] == 2 and res["n_sentences"] == 9  # 10 sentences, one repeated
    x = enc(["a man is playing a guitar", "two dogs are running in the park"])
    y = enc(["a man plays a guitar", "dogs run in the park"])
    assert res["alignment"] == pytest.approx(alignment(x, y), abs=1e-6)
    everything = ["a man is playing a guitar", "the cat sat on the mat", "two dogs are running in the park",
                  "it is raining today", "a man plays a guitar", "birds fly", "dogs run in the park",
                  "the dog ran", "a cat sat"]
    assert res["uniformity"] == pytest.approx(uniformity(enc(everything)), abs=1e-6)


# ------------------------------------------------------------------------------------------ CLI


def _run_cli(argv: list[str]) -> dict:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(argv) == 0
    return json.loads(buf.getvalue())


def test_cli_anisotropy(bert_mlm_dir: Path, bert_mlm, tmp_path: Path) -> None:
    encoder, tokenizer = bert_mlm
    sents = SENTENCES[:5]
    out = _run_cli(["anisotropy", "--backbone", str(bert_mlm_dir), "--pooler", "static_avg", "--device", "cpu",
                    "--sentences", *sents, "--json"])
    assert out["n_sentences"] == 5
    assert out["anisotropy"] == pytest.approx(anisotropy(static_avg_encoder(encoder, tokenizer)(sents)), abs=1e-6)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(s.upper() for s in SENTENCES) + "\n\n", encoding="utf-8")
    first = read_corpus(corpus, sample=4, seed=1)  # the official: the first lines, lower-cased
    assert first == [s.lower() for s in SENTENCES[:4]]
    chosen = read_corpus(corpus, sample=4, seed=1, draw="random")
    assert len(chosen) == 4 and all(c in SENTENCES for c in chosen) and chosen != first
    for pooler in ("avg", "mask", "topk", "avg_first_last"):
        extra = ["--k", "10", "--denoise"] if pooler == "topk" else []
        out = _run_cli(["anisotropy", "--backbone", str(bert_mlm_dir), "--pooler", pooler, "--corpus", str(corpus),
                        "--sample", "4", "--random", "--seed", "1", "--device", "cpu", "--json", *extra])
        want = anisotropy(make_encode_fn(encoder, tokenizer, pooler, None, k=10, denoise=pooler == "topk")(chosen))
        assert out["n_sentences"] == 4 and out["anisotropy"] == pytest.approx(want, abs=1e-5), pooler
    out = _run_cli(["anisotropy", "--backbone", str(bert_mlm_dir), "--pooler", "avg", "--corpus", str(corpus),
                    "--sample", "4", "--distinct-pairs", "--device", "cpu", "--json"])
    encode = make_encode_fn(encoder, tokenizer, "avg", None)
    assert out["pairs"] == "distinct"
    assert out["anisotropy"] == pytest.approx(anisotropy(encode(first), include_self=False), abs=1e-5)


def test_cli_avg_pooler_matches_manual(bert_plain) -> None:
    encoder, tokenizer = bert_plain
    got = make_encode_fn(encoder, tokenizer, "avg")(SENTENCES[:3])
    for n, s in enumerate(SENTENCES[:3]):
        ids = torch.tensor([tokenizer(s)["input_ids"]])
        with torch.no_grad():
            want = encoder.model(input_ids=ids).last_hidden_state[0].mean(0)
        torch.testing.assert_close(got[n], want, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="--denoise"):
        make_encode_fn(encoder, tokenizer, "avg", denoise=True)


def test_cli_topk_tokens_and_align_uniform(bert_mlm_dir: Path, bert_mlm, tmp_path: Path) -> None:
    encoder, tokenizer = bert_mlm
    out = _run_cli(["topk-tokens", "--backbone", str(bert_mlm_dir), "--k", "3", "--denoise", "--device", "cpu",
                    "--json", "--template", TEMPLATE, "--sentences", "i am sad.", "a cat sat"])
    assert [r["sentence"] for r in out["rows"]] == ["i am sad.", "a cat sat"]
    want = topk_mask_tokens(encoder, tokenizer, TEMPLATE, ["i am sad.", "a cat sat"], k=3, denoise=True)
    assert [[t for t, _ in r["topk_denoised"]] for r in out["rows"]] == [[t for t, _ in r] for r in want]
    # text output, default sentences (Table 7) and template
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["topk-tokens", "--backbone", str(bert_mlm_dir), "--device", "cpu"]) == 0
    assert "the man is playing the piano." in buf.getvalue() and "top-5:" in buf.getvalue()
    root = _fake_stsb(tmp_path)
    res = _run_cli(["align-uniform", "--backbone", str(bert_mlm_dir), "--pooler", "static_avg", "--remove-biased",
                    "--data-dir", str(root), "--device", "cpu", "--json"])
    want = align_uniform_stsb(static_avg_encoder(encoder, tokenizer, remove_biased=True), root)
    assert res["alignment"] == pytest.approx(want["alignment"]) and res["n_pairs"] == 2


def test_cli_reports_missing_mlm_head(tiny_bert_dir: Path) -> None:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        assert main(["topk-tokens", "--backbone", str(tiny_bert_dir), "--device", "cpu"]) == 1
    assert "error: " in err.getvalue() and "masked-LM head" in err.getvalue()


def test_cli_needs_sentences(bert_mlm_dir: Path) -> None:
    with pytest.raises(SystemExit) as err, contextlib.redirect_stderr(io.StringIO()):
        main(["anisotropy", "--backbone", str(bert_mlm_dir)])
    assert err.value.code == 2


@pytest.mark.parametrize(("flags", "message"), [
    (["--include-self"], "--include-self is the default now"),
    (["--sample", "4", "--seed", "3"], "--seed seeds the --random draw only"),
])
def test_cli_anisotropy_names_the_new_spelling_of_an_old_flag(flags, message, tmp_path, capsys) -> None:
    """The old ``--include-self`` (now the default) and a ``--seed`` without ``--random`` (``--sample`` took a
    random draw before it took the first lines) are refused by name, before any model loads."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(SENTENCES), encoding="utf-8")
    with pytest.raises(SystemExit) as exit_info:
        main(["anisotropy", "--backbone", str(tmp_path / "no_model"), "--corpus", str(corpus), *flags])
    assert exit_info.value.code == 2 and message in capsys.readouterr().err
