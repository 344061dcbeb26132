"""The numbers behind the analysis notebooks (``notebooks/*.ipynb``): pure functions returning arrays / dicts.

The notebooks only load, call these and draw; every statistic lives here (and is unit-tested):

* token-embedding bias (PromptBERT Fig. 1): :func:`token_frequencies` over a corpus, :func:`token_embedding_pca`
  and :func:`token_bias_pca` (2-D PCA of the static token embeddings with log frequency and the subword flag);
* geometry of representations: :func:`geometry_summary` (anisotropy on corpus sentences, alignment and
  uniformity on STS pairs, as :mod:`cselab.analysis.geometry` defines them) and :func:`representation_encoders`;
* STS-B scatter / densities (CoT-BERT Fig. 3, PromCSE Fig. 3): :func:`pair_cosines`, :func:`subsample_pairs`,
  :func:`cosine_density_by_gold_bin`, :func:`similarity_vs_gold` (the bins: :mod:`cselab.evaluation.gold_bins`);
* top-k [MASK] tokens with and without template denoising (PromptBERT Table 7): :func:`topk_comparison`;
* inputs: :func:`wiki_sample_sentences` (the wiki1m sample shipped in ``data/wiki1m_sample``).
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch
from scipy.stats import gaussian_kde, pearsonr, spearmanr

from cselab.analysis.corpus import read_corpus
from cselab.analysis.geometry import anisotropy
from cselab.analysis.representations import make_encode_fn
from cselab.data.sts import STSPairs
from cselab.evaluation.align_uniform import AlignUniformInputs
from cselab.evaluation.gold_bins import DEFAULT_GOLD_EDGES, cosine_by_gold_bin
from cselab.evaluation.sts import encode_pairs, spearman
from cselab.model.loading import load_backbone
from cselab.representations.static import is_subword
from cselab.representations.topk import TABLE7_SENTENCES, manual_template, topk_mask_tokens

#: the real wiki1m sample under the data directory (``data/wiki1m_sample``)
WIKI_SAMPLE = Path("wiki1m_sample") / "wiki1m_for_simcse.head11914.txt"


def wiki_sample_sentences(data_dir: str | os.PathLike, sample: int | None = None, seed: int = 0,
                          lower: bool = False, max_words: int | None = None, draw: str = "first") -> list[str]:
    """Sentences of the wiki1m sample (``<data_dir>/wiki1m_sample/...``, the first 11,914 lines of wiki1m): its
    first ``sample`` lines (``draw="first"``, as the official ``--calc_anisotropy`` reads wiki1m), or ``sample`` of
    them drawn with ``seed`` (``draw="random"``).

    Read as ``python -m cselab analysis --corpus`` reads (:func:`cselab.analysis.corpus.read_corpus`).

    Raises:
        FileNotFoundError: the sample is missing (names the path).
    """
    return read_corpus(Path(data_dir) / WIKI_SAMPLE, sample, seed, lower=lower, max_words=max_words, draw=draw)


# ------------------------------------------------------------------------------------- token embeddings


def token_frequencies(sentences: Sequence[str], tokenizer, vocab_size: int | None = None) -> np.ndarray:
    """How often each vocabulary id occurs when ``sentences`` are tokenized (no special tokens added).

    Args:
        sentences: the corpus (e.g. :func:`wiki_sample_sentences`).
        tokenizer: a Hugging Face tokenizer.
        vocab_size: length of the result (default ``len(tokenizer)``); ids beyond it are ignored.

    Returns:
        int64 array (V,): counts per token id.
    """
    size = int(vocab_size if vocab_size is not None else len(tokenizer))
    counts = np.zeros(size, dtype=np.int64)
    if not sentences:
        return counts
    for ids in tokenizer(list(sentences), add_special_tokens=False)["input_ids"]:
        ids = np.asarray(ids, dtype=np.int64)
        ids = ids[(ids >= 0) & (ids < size)]
        np.add.at(counts, ids, 1)
    return counts


def token_embedding_pca(embeddings: torch.Tensor | np.ndarray, n_components: int = 2) -> dict[str, np.ndarray]:
    """PCA of row vectors (e.g. the word-embedding matrix) by SVD of the centred matrix, in float64.

    Args:
        embeddings: (N, D), N >= 2.
        n_components: 1 <= k <= min(N, D).

    Returns:
        ``{"coords": (N, k) projections, "components": (k, D) unit principal axes (sign: largest |entry|
        positive), "explained_variance_ratio": (k,), "mean": (D,)}``.

    Raises:
        ValueError: not 2-D, fewer than 2 rows, or bad ``n_components``.
    """
    x = embeddings.detach().cpu().double().numpy() if isinstance(embeddings, torch.Tensor) else \
        np.asarray(embeddings, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] < 2:
        raise ValueError(f"token_embedding_pca: expected (N >= 2, D), got shape {x.shape}")
    if not 1 <= n_components <= min(x.shape):
        raise ValueError(f"n_components={n_components}: expected 1 <= k <= {min(x.shape)}")
    mean = x.mean(0)
    centred = x - mean
    _, s, vt = np.linalg.svd(centred, full_matrices=False)
    comps = vt[:n_components]
    signs = np.sign(comps[np.arange(n_components), np.abs(comps).argmax(1)])
    comps = comps * signs[:, None]
    var = s**2
    total = var.sum()
    ratio = var[:n_components] / total if total > 0 else np.zeros(n_components)
    return {"coords": centred @ comps.T, "components": comps, "explained_variance_ratio": ratio, "mean": mean}


def token_bias_pca(
    embeddings: torch.Tensor | np.ndarray,
    frequencies: np.ndarray,
    tokens: Sequence[str],
    family: str = "bert",
    min_count: int = 0,
    max_points: int | None = None,
    exclude_ids: Sequence[int] = (),
    seed: int = 0,
) -> dict[str, np.ndarray]:
    """PromptBERT Fig. 1: 2-D PCA of the static token embeddings with each token's frequency and subword flag.

    The PCA is fitted on every kept token (count >= ``min_count``, not in ``exclude_ids``, e.g. special tokens);
    ``max_points`` then draws that many of them (``seed``) for plotting.

    Args:
        embeddings: (V, D) word-embedding matrix (``encoder.model.get_input_embeddings().weight``).
        frequencies: (V,) counts (:func:`token_frequencies`).
        tokens: (V,) vocabulary strings (``tokenizer.convert_ids_to_tokens(range(V))``).
        family: ``bert`` (subword = ``##`` prefix) or ``roberta`` (no ``Ġ``), :func:`cselab.representations.static.is_subword`.

    Returns:
        ``{"token_ids", "coords" (n, 2), "frequency", "log_frequency" (log10(1 + count)), "is_subword" (bool),
        "norm" (L2 norm of the embedding), "explained_variance_ratio" (2,), "spearman_norm_frequency"}`` --
        the last is the rank correlation between norm and frequency over the kept tokens (PromptBERT: frequent
        tokens sit closer to the origin, a negative value).

    Raises:
        ValueError: sizes differ, or fewer than 2 tokens are kept.
    """
    emb = embeddings.detach().cpu().double().numpy() if isinstance(embeddings, torch.Tensor) else \
        np.asarray(embeddings, dtype=np.float64)
    freq = np.asarray(frequencies, dtype=np.int64)
    if not emb.shape[0] == freq.shape[0] == len(tokens):
        raise ValueError(f"token_bias_pca: {emb.shape[0]} embeddings, {freq.shape[0]} frequencies and "
                         f"{len(tokens)} tokens must agree")
    keep = freq >= min_count
    keep[np.asarray(list(exclude_ids), dtype=np.int64)] = False
    ids = np.flatnonzero(keep)
    if ids.size < 2:
        raise ValueError(f"token_bias_pca: only {ids.size} token(s) with count >= {min_count}")
    pca = token_embedding_pca(emb[ids], 2)
    norms = np.linalg.norm(emb[ids], axis=1)
    rho = float(spearmanr(norms, freq[ids])[0]) if np.unique(freq[ids]).size > 1 else float("nan")
    rows = np.arange(ids.size)
    if max_points is not None and max_points < ids.size:
        rows = np.sort(np.random.default_rng(seed).choice(ids.size, size=max_points, replace=False))
    chosen = ids[rows]
    return {
        "token_ids": chosen,
        "coords": pca["coords"][rows],
        "frequency": freq[chosen],
        "log_frequency": np.log10(1.0 + freq[chosen]),
        "is_subword": np.array([is_subword(tokens[i], family) for i in chosen], dtype=bool),
        "norm": norms[rows],
        "explained_variance_ratio": pca["explained_variance_ratio"],
        "spearman_norm_frequency": rho,
    }


# ------------------------------------------------------------------------------------- STS pairs


def subsample_pairs(pairs: STSPairs, n: int | None, seed: int = 0) -> STSPairs:
    """``n`` pairs drawn without replacement with ``random.Random(seed)`` (original order kept); all if None."""
    keep = (range(len(pairs)) if n is None or n >= len(pairs)
            else sorted(random.Random(seed).sample(range(len(pairs)), n)))
    return STSPairs([pairs.sent1[i] for i in keep], [pairs.sent2[i] for i in keep],
                    [pairs.scores[i] for i in keep], pairs.name)


def pair_cosines(encode: Callable[[list[str]], torch.Tensor], pairs: STSPairs) -> dict[str, np.ndarray]:
    """Cosine similarity of every pair (each distinct sentence encoded once, :func:`cselab.evaluation.sts.encode_pairs`,
    with SentEval's NaN handling, as the STS evaluator scores them), with the gold scores.

    Returns:
        ``{"cosine": (N,) float64, "gold": (N,) float64}``.

    Raises:
        ValueError: no pairs, or ``encode`` did not return one row per sentence.
    """
    return {"cosine": encode_pairs(encode, pairs.sent1, pairs.sent2).numpy(),
            "gold": np.asarray(pairs.scores, dtype=np.float64)}


def cosine_density_by_gold_bin(
    cosine: Sequence[float] | np.ndarray,
    gold: Sequence[float] | np.ndarray,
    edges: Sequence[float] = DEFAULT_GOLD_EDGES,
    grid: Sequence[float] | np.ndarray | str | None = None,
    bandwidth: float | str | None = None,
) -> dict[str, object]:
    """Gaussian kernel density of the cosine similarity per gold-score bin (PromCSE Fig. 3).

    Args:
        cosine, gold: (N,) per pair.
        edges: gold bin edges (:data:`DEFAULT_GOLD_EDGES`).
        grid: where to evaluate the densities: points, None (201 points over [-1, 1]) or ``"data"`` (201
            points over the range of ``cosine`` widened by 10 % each side: for anisotropic representations whose
            cosines all sit near 1).
        bandwidth: ``scipy.stats.gaussian_kde``'s ``bw_method`` (default Scott's rule).

    Returns:
        ``{"grid": (G,), "density": {label: (G,)}, "count": {label: int}, "mean": {label: float}}``; a bin with
        fewer than 2 distinct values gets a zero density (and a NaN mean when empty).
    """
    if isinstance(grid, str):
        if grid != "data":
            raise ValueError(f"grid={grid!r}: expected points, None or 'data'")
        c = np.asarray(cosine, dtype=np.float64)
        lo, hi = (float(c.min()), float(c.max())) if c.size else (-1.0, 1.0)
        pad = 0.1 * (hi - lo) if hi > lo else 0.05
        xs = np.linspace(lo - pad, hi + pad, 201)
    else:
        xs = np.linspace(-1.0, 1.0, 201) if grid is None else np.asarray(grid, dtype=np.float64)
    groups = cosine_by_gold_bin(cosine, gold, edges)
    density, count, mean = {}, {}, {}
    for label, values in groups.items():
        count[label] = int(values.size)
        mean[label] = float(values.mean()) if values.size else float("nan")
        if np.unique(values).size < 2:
            density[label] = np.zeros_like(xs)
        else:
            density[label] = gaussian_kde(values, bw_method=bandwidth)(xs)
    return {"grid": xs, "density": density, "count": count, "mean": mean}


def similarity_vs_gold(cosine: Sequence[float] | np.ndarray, gold: Sequence[float] | np.ndarray,
                       edges: Sequence[float] = DEFAULT_GOLD_EDGES) -> dict[str, object]:
    """Predicted similarity against gold (CoT-BERT Fig. 3): correlations and the mean cosine per gold bin.

    Returns:
        ``{"spearman", "pearson" (x 100, as the STS tables), "n", "bin_labels", "bin_centers", "bin_mean",
        "bin_std", "bin_count"}`` (NaN mean / std for an empty bin).

    Raises:
        ValueError: lengths differ, or fewer than 2 pairs.
    """
    cos, g = np.asarray(cosine, dtype=np.float64), np.asarray(gold, dtype=np.float64)
    if cos.shape != g.shape or cos.size < 2:
        raise ValueError(f"similarity_vs_gold: need >= 2 pairs of equal length, got {cos.shape} and {g.shape}")
    groups = cosine_by_gold_bin(cos, g, edges)
    e = np.asarray(edges, dtype=np.float64)
    constant = np.unique(cos).size < 2 or np.unique(g).size < 2
    return {
        "spearman": 100.0 * spearman(cos, g),
        "pearson": float("nan") if constant else 100.0 * float(pearsonr(cos, g)[0]),
        "n": int(cos.size),
        "bin_labels": list(groups),
        "bin_centers": (e[:-1] + e[1:]) / 2.0,
        "bin_mean": np.array([v.mean() if v.size else np.nan for v in groups.values()]),
        "bin_std": np.array([v.std() if v.size else np.nan for v in groups.values()]),
        "bin_count": np.array([v.size for v in groups.values()], dtype=np.int64),
    }


# ------------------------------------------------------------------------------------- geometry


def geometry_summary(encode: Callable[[list[str]], torch.Tensor], pairs: STSPairs, corpus: Sequence[str],
                     threshold: float = 4.0) -> dict[str, float]:
    """Anisotropy (PromptBERT Table 1, as the official code: :func:`cselab.analysis.geometry.anisotropy`) over
    ``corpus``; alignment (pairs with gold > ``threshold``) and uniformity
    (every distinct sentence of ``pairs``) as :func:`cselab.evaluation.align_uniform.align_uniform_stsb` computes them
    on STS-B (:class:`cselab.evaluation.align_uniform.AlignUniformInputs`).

    Returns:
        ``{"anisotropy", "alignment", "uniformity", "n_pairs" (positives), "n_sentences", "n_corpus"}``.

    Raises:
        ValueError: no pair above the threshold, fewer than 2 corpus sentences, or ``encode`` returned the wrong
        number of rows.
    """
    inputs = AlignUniformInputs.from_pairs(pairs, threshold)
    measured = inputs.measure(encode)
    corpus_emb = encode(list(corpus))
    if corpus_emb.shape[0] != len(corpus):
        raise ValueError(f"encode returned {corpus_emb.shape[0]} rows for {len(corpus)} corpus sentences")
    return {"anisotropy": anisotropy(corpus_emb), **measured, "n_corpus": float(len(corpus))}


def representation_encoders(
    backbone: str,
    representations: Sequence[str] = ("cls_before_pooler", "avg", "avg_first_last", "static_avg", "mask"),
    checkpoint: str | os.PathLike | None = None,
    family: str | None = None,
    batch_size: int = 32,
) -> dict[str, Callable[[list[str]], torch.Tensor]]:
    """``{name: encode}`` for several representations of ONE loaded backbone (plus a trained checkpoint).

    Args:
        backbone: hub id, folder or ``package:<module>`` (:func:`cselab.model.loading.load_backbone`).
        representations: names of ``python -m cselab analysis --pooler`` (SimCSE's poolers, ``mask`` = the
            manual template's [MASK] state, ``static_avg``; ``topk`` needs an MLM head).
        checkpoint: a cselab checkpoint: adds ``"checkpoint (<Method>)"`` = ``cselab.load(checkpoint).encode``.
        family: ``bert`` | ``roberta`` (default: from the config).
        batch_size: sentences per forward pass.

    Raises:
        ValueError: unknown representation.  BackboneUnavailableError: the backbone cannot be loaded.
    """
    encoder, tokenizer = load_backbone(backbone, family, mlm_head="topk" in representations)
    encoder.eval()
    out: dict[str, Callable[[list[str]], torch.Tensor]] = {
        name: make_encode_fn(encoder, tokenizer, name, batch_size=batch_size) for name in representations}
    if checkpoint is not None:
        import cselab

        method = cselab.load(checkpoint)
        out[f"checkpoint ({type(method).__name__})"] = lambda s: method.encode(s, batch_size=batch_size)
    return out


# ------------------------------------------------------------------------------------- top-k tokens


def topk_comparison(encoder, tokenizer, sentences: Sequence[str] | None = None, k: int = 5,
                    template: str | None = None) -> dict[str, object]:
    """PromptBERT Table 7: the top-k MLM tokens at [MASK] without and with template denoising, per sentence.

    Args:
        encoder: an Encoder loaded with ``mlm_head=True`` (e.g. ``package:cognition``).
        sentences: default :data:`cselab.representations.topk.TABLE7_SENTENCES`.
        k: tokens per sentence.
        template: default the manual template of the encoder's family.

    Returns:
        ``{"sentences", "template", "k", "without": [[(token, prob), ...] per sentence], "with": [...],
        "changed": [number of tokens of "with" not in "without", per sentence]}``.

    Raises:
        ValueError: no MLM head (see :func:`cselab.representations.topk.mlm_head`), or bad ``k``.
    """
    sents = list(TABLE7_SENTENCES if sentences is None else sentences)
    tpl = template or manual_template(encoder.family)
    plain = topk_mask_tokens(encoder, tokenizer, tpl, sents, k=k, denoise=False)
    denoised = topk_mask_tokens(encoder, tokenizer, tpl, sents, k=k, denoise=True)
    changed = [len({t for t, _ in d} - {t for t, _ in p}) for p, d in zip(plain, denoised, strict=True)]
    return {"sentences": sents, "template": tpl, "k": k, "without": plain, "with": denoised, "changed": changed}

