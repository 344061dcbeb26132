"""cselab.analysis.plots_data: the statistics the notebooks draw, on synthetic arrays and tiny random models."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from cselab.analysis.geometry import anisotropy
from cselab.analysis.plots_data import (
    cosine_density_by_gold_bin,
    geometry_summary,
    pair_cosines,
    representation_encoders,
    similarity_vs_gold,
    subsample_pairs,
    token_bias_pca,
    token_embedding_pca,
    token_frequencies,
    topk_comparison,
    wiki_sample_sentences,
)
from cselab.data.sts import STSPairs
from cselab.evaluation.align_uniform import alignment, uniformity
from cselab.evaluation.gold_bins import cosine_by_gold_bin, gold_bin_labels
from cselab.model.loading import load_backbone
from tests.conftest import SENTENCES

PAIRS = STSPairs(
    sent1=["a man is playing a guitar", "the cat sat on the mat", "birds fly", "a cat sat", "the dog ran"],
    sent2=["a man is playing a guitar", "the dog ran", "it is raining today", "cat and the cat", "a cat sat"],
    scores=[5.0, 1.2, 0.0, 4.2, 2.5],
    name="test",
)


def _hash_encode(dim: int = 8):
    """A deterministic fake encoder: one random vector per distinct sentence (same sentence, same vector)."""
    def encode(sentences: list[str]) -> torch.Tensor:
        rows = []
        for s in sentences:
            g = torch.Generator().manual_seed(sum(ord(c) * (i + 1) for i, c in enumerate(s)) % (2**31))
            rows.append(torch.randn(dim, generator=g))
        return torch.stack(rows) if rows else torch.zeros(0, dim)

    return encode


# ------------------------------------------------------------------------------------- token statistics


def test_token_frequencies_count_ids_without_special_tokens(bert_tokenizer):
    counts = token_frequencies(["the cat sat", "the cat"], bert_tokenizer)
    assert counts.shape == (len(bert_tokenizer),) and counts.dtype == np.int64
    the, cat, sat = bert_tokenizer.convert_tokens_to_ids(["the", "cat", "sat"])
    assert (counts[the], counts[cat], counts[sat]) == (2, 2, 1)
    assert counts[bert_tokenizer.cls_token_id] == 0 and counts.sum() == 5
    assert token_frequencies([], bert_tokenizer).sum() == 0
    assert token_frequencies(["the cat"], bert_tokenizer, vocab_size=3).shape == (3,)


def test_pca_recovers_the_main_axis_and_matches_svd():
    rng = np.random.default_rng(0)
    x = np.outer(rng.normal(size=200), [3.0, 4.0, 0.0]) + rng.normal(scale=0.01, size=(200, 3))
    out = token_embedding_pca(torch.tensor(x), 2)
    assert out["coords"].shape == (200, 2)
    np.testing.assert_allclose(np.abs(out["components"][0]), [0.6, 0.8, 0.0], atol=1e-3)
    assert out["explained_variance_ratio"][0] > 0.999
    np.testing.assert_allclose(out["coords"] @ out["components"] + out["mean"], x, atol=0.05)
    np.testing.assert_allclose(out["coords"].mean(0), 0.0, atol=1e-9)
    with pytest.raises(ValueError):
        token_embedding_pca(np.zeros((1, 3)))
    with pytest.raises(ValueError):
        token_embedding_pca(np.zeros((5, 3)), n_components=4)


def test_token_bias_pca_flags_subwords_and_correlates_norm_with_frequency():
    tokens = ["[PAD]", "the", "cat", "##s", "##ing", "dog", "ran", "a"]
    freq = np.array([0, 50, 10, 5, 2, 8, 1, 40])
    rng = np.random.default_rng(1)
    direction = rng.normal(size=(len(tokens), 6))
    emb = direction / np.linalg.norm(direction, axis=1, keepdims=True) / np.log(2 + freq)[:, None]  # frequent = short
    out = token_bias_pca(emb, freq, tokens, "bert", min_count=1, exclude_ids=[0])
    assert out["token_ids"].tolist() == [1, 2, 3, 4, 5, 6, 7]
    assert out["is_subword"].tolist() == [False, False, True, True, False, False, False]
    np.testing.assert_allclose(out["log_frequency"], np.log10(1 + freq[1:]))
    assert out["coords"].shape == (7, 2)
    assert out["spearman_norm_frequency"] == pytest.approx(-1.0)
    sampled = token_bias_pca(emb, freq, tokens, "bert", min_count=1, max_points=3, seed=0)
    assert len(sampled["token_ids"]) == 3 and set(sampled["token_ids"]) <= set(range(1, 8))
    roberta = token_bias_pca(emb, freq, ["x", "Ġthe", "cat", "Ġa", "s", "Ġdog", "ran", "Ġb"], "roberta")
    assert roberta["is_subword"].tolist() == [True, False, True, False, True, False, True, False]
    with pytest.raises(ValueError, match="agree"):
        token_bias_pca(emb, freq[:3], tokens)
    with pytest.raises(ValueError, match="count"):
        token_bias_pca(emb, freq, tokens, min_count=1000)


# ------------------------------------------------------------------------------------- pairs and bins


def test_gold_bins_half_open_with_the_last_closed():
    assert gold_bin_labels() == ["0-1", "1-2", "2-3", "3-4", "4-5"]
    assert gold_bin_labels([0, 2.5, 5]) == ["0-2.5", "2.5-5"]
    groups = cosine_by_gold_bin([0.1, 0.2, 0.3, 0.4, 0.5, 0.6], [0.0, 1.0, 0.99, 4.0, 5.0, 5.5])
    assert {k: v.tolist() for k, v in groups.items()} == {
        "0-1": [0.1, 0.3], "1-2": [0.2], "2-3": [], "3-4": [], "4-5": [0.4, 0.5]}  # 5.5 dropped
    with pytest.raises(ValueError):
        cosine_by_gold_bin([0.1], [0.1, 0.2])
    with pytest.raises(ValueError):
        cosine_by_gold_bin([0.1], [0.1], edges=[1, 0])


def test_density_integrates_to_one_and_handles_degenerate_bins():
    rng = np.random.default_rng(0)
    gold = rng.uniform(0, 5, size=400)
    cos = np.clip(gold / 5 + rng.normal(scale=0.1, size=400), -1, 1)
    out = cosine_density_by_gold_bin(cos, gold, grid=np.linspace(-2, 3, 2001))
    for label, dens in out["density"].items():
        assert out["count"][label] > 10
        assert np.trapezoid(dens, out["grid"]) == pytest.approx(1.0, abs=1e-3)
    means = list(out["mean"].values())
    assert means == sorted(means)  # higher gold, higher cosine
    narrow = cosine_density_by_gold_bin(0.9 + 0.05 * (cos - cos.min()) / np.ptp(cos), gold, grid="data")
    assert narrow["grid"][0] == pytest.approx(0.9 - 0.005) and narrow["grid"][-1] == pytest.approx(0.95 + 0.005)
    with pytest.raises(ValueError, match="grid"):
        cosine_density_by_gold_bin(cos, gold, grid="auto")
    single = cosine_density_by_gold_bin([0.5, 0.5], [4.5, 4.6])
    assert not single["density"]["4-5"].any() and single["count"]["0-1"] == 0 and math.isnan(single["mean"]["0-1"])


def test_similarity_vs_gold_correlations_and_bin_means():
    gold = np.array([0.5, 1.5, 2.5, 3.5, 4.5, 4.8])
    cos = np.array([0.1, 0.3, 0.2, 0.6, 0.9, 0.8])
    out = similarity_vs_gold(cos, gold)
    assert out["n"] == 6 and out["bin_labels"] == gold_bin_labels()
    assert out["spearman"] == pytest.approx(100 * (1 - 6 * 4 / (6 * 35)))  # rank differences 0,1,1,0,1,1
    assert out["pearson"] == pytest.approx(100 * np.corrcoef(cos, gold)[0, 1])
    np.testing.assert_allclose(out["bin_centers"], [0.5, 1.5, 2.5, 3.5, 4.5])
    np.testing.assert_allclose(out["bin_mean"], [0.1, 0.3, 0.2, 0.6, 0.85])
    assert out["bin_count"].tolist() == [1, 1, 1, 1, 2]
    with pytest.raises(ValueError):
        similarity_vs_gold([0.1], [1.0])


def test_subsample_and_pair_cosines_encode_each_sentence_once():
    sub = subsample_pairs(PAIRS, 3, seed=1)
    assert len(sub) == 3 and all(s in PAIRS.sent1 for s in sub.sent1)
    assert [PAIRS.sent1.index(s) for s in sub.sent1] == sorted(PAIRS.sent1.index(s) for s in sub.sent1)
    assert subsample_pairs(PAIRS, None).scores == PAIRS.scores and subsample_pairs(PAIRS, 99).sent2 == PAIRS.sent2
    seen: list[list[str]] = []
    base = _hash_encode()

    def encode(sentences):
        seen.append(list(sentences))
        return base(sentences)

    out = pair_cosines(encode, PAIRS)
    assert len(seen) == 1 and len(seen[0]) == len(set(seen[0])) == len(set(PAIRS.sent1 + PAIRS.sent2))
    assert out["cosine"][0] == pytest.approx(1.0)  # identical sentences
    a, b = base([PAIRS.sent1[1]]), base([PAIRS.sent2[1]])
    assert out["cosine"][1] == pytest.approx(float(torch.nn.functional.cosine_similarity(a, b)))
    assert out["gold"].tolist() == PAIRS.scores
    with pytest.raises(ValueError, match="one row per sentence"):
        pair_cosines(lambda s: torch.zeros(1, 3), PAIRS)


def test_geometry_summary_matches_the_geometry_functions():
    encode = _hash_encode()
    out = geometry_summary(encode, PAIRS, SENTENCES)
    sentences = list(dict.fromkeys(PAIRS.sent1 + PAIRS.sent2))
    assert out["anisotropy"] == pytest.approx(anisotropy(encode(SENTENCES)))
    assert out["uniformity"] == pytest.approx(uniformity(encode(sentences)))
    pos = [0, 3]  # gold 5.0 and 4.2
    x = encode([PAIRS.sent1[i] for i in pos])
    y = encode([PAIRS.sent2[i] for i in pos])
    assert out["alignment"] == pytest.approx(alignment(x, y))
    assert (out["n_pairs"], out["n_sentences"], out["n_corpus"]) == (2, len(sentences), len(SENTENCES))
    with pytest.raises(ValueError, match="gold"):
        geometry_summary(encode, PAIRS, SENTENCES, threshold=5.0)


# ------------------------------------------------------------------------------------- models and data


def test_representation_encoders_share_one_backbone(tiny_bert_dir):
    encoders = representation_encoders(str(tiny_bert_dir), ("avg", "cls_before_pooler", "static_avg", "mask"))
    assert list(encoders) == ["avg", "cls_before_pooler", "static_avg", "mask"]
    outs = {k: f(SENTENCES[:3]) for k, f in encoders.items()}
    assert all(v.shape == (3, 32) for v in outs.values())
    assert not torch.allclose(outs["avg"], outs["mask"])
    with pytest.raises(ValueError):
        representation_encoders(str(tiny_bert_dir), ("nope",))


def test_topk_comparison_both_columns(tiny_mlm_dir):
    encoder, tokenizer = load_backbone(str(tiny_mlm_dir), mlm_head=True)
    out = topk_comparison(encoder, tokenizer, ["a cat sat", "the dog ran"], k=3)
    assert out["sentences"] == ["a cat sat", "the dog ran"] and out["k"] == 3
    for column in ("without", "with"):
        assert len(out[column]) == 2 and all(len(row) == 3 for row in out[column])
        assert all(p1 >= p2 for row in out[column] for (_, p1), (_, p2) in zip(row, row[1:], strict=False))
    assert all(0 <= c <= 3 for c in out["changed"])
    plain_encoder, _ = load_backbone(str(tiny_mlm_dir))
    with pytest.raises(ValueError, match="masked-LM head"):
        topk_comparison(plain_encoder, tokenizer, ["a cat sat"])


def test_wiki_sample_sentences(tmp_path):
    folder = tmp_path / "wiki1m_sample"
    folder.mkdir()
    (folder / "wiki1m_for_simcse.head11914.txt").write_text("One two three\n\nfour five\nsix\n", encoding="utf-8")
    assert wiki_sample_sentences(tmp_path) == ["One two three", "four five", "six"]
    assert wiki_sample_sentences(tmp_path, lower=True, max_words=2) == ["one two", "four five", "six"]
    # the first 2 lines of the file, as the official --calc_anisotropy reads wiki1m (a blank one left out)
    assert wiki_sample_sentences(tmp_path, sample=2) == ["One two three"]
    assert len(wiki_sample_sentences(tmp_path, sample=2, seed=3, draw="random")) == 2
    with pytest.raises(ValueError, match="draw='last'"):
        wiki_sample_sentences(tmp_path, sample=2, draw="last")
    with pytest.raises(FileNotFoundError):
        wiki_sample_sentences(tmp_path / "missing")
