"""Analyses of non-fine-tuned (or trained) backbones from PromptBERT (Jiang et al. 2022) and SimCSE.

* :mod:`cselab.representations.static` -- static token-embedding averages (Table 5 "static avg." and "static remove
  biases avg."; the Table 11 frequent-token lists as data).
* :mod:`cselab.representations.topk` -- the MLM head at the template's [MASK]: Eq. 3 top-k token representation
  (Table 9) and the top-k predicted tokens (Table 7), with or without template denoising.
* :mod:`cselab.analysis.geometry` -- anisotropy (Eq. 1); alignment and uniformity (Wang & Isola 2020) and the
  STS-B alignment / uniformity protocol are :mod:`cselab.evaluation.align_uniform`'s (the training callback's too).
* :mod:`cselab.analysis.plots_data` -- the numbers behind ``notebooks/*.ipynb`` (token-embedding PCA by
  frequency, cosine by gold bin, similarity vs gold, geometry summaries, top-k with / without denoising).
* :mod:`cselab.analysis.representations` -- one ``encode`` per ``--pooler`` representation of a raw backbone;
  :mod:`cselab.analysis.corpus` -- corpus sentences as the official ``--calc_anisotropy`` reads them.
* ``cselab analysis {anisotropy,topk-tokens,align-uniform}`` (:mod:`cselab.cli.analysis`) -- the command line.

Every ``*_encoder`` returns ``encode(list[str]) -> Tensor[N, D]`` (float32, CPU), the interface of
:class:`cselab.evaluation.sts.STSEvaluator`.
"""

from cselab.analysis.geometry import anisotropy
from cselab.analysis.plots_data import (
    DEFAULT_GOLD_EDGES,
    WIKI_SAMPLE,
    cosine_by_gold_bin,
    cosine_density_by_gold_bin,
    geometry_summary,
    gold_bin_labels,
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
from cselab.evaluation.align_uniform import align_uniform_stsb, alignment, uniformity
from cselab.representations.static import (
    BERT_PUNCTUATION,
    BIASED_TOKENS,
    biased_tokens_for,
    is_punctuation,
    is_subword,
    static_avg,
    static_avg_encoder,
    static_token_ids,
)
from cselab.representations.topk import (
    MANUAL_TEMPLATES,
    TABLE7_SENTENCES,
    mask_logits,
    mask_states,
    mlm_head,
    topk_mask_tokens,
    topk_token_encoder,
    topk_weights,
)

__all__ = [
    "BERT_PUNCTUATION",
    "BIASED_TOKENS",
    "DEFAULT_GOLD_EDGES",
    "MANUAL_TEMPLATES",
    "TABLE7_SENTENCES",
    "WIKI_SAMPLE",
    "align_uniform_stsb",
    "alignment",
    "anisotropy",
    "biased_tokens_for",
    "cosine_by_gold_bin",
    "cosine_density_by_gold_bin",
    "geometry_summary",
    "gold_bin_labels",
    "is_punctuation",
    "is_subword",
    "mask_logits",
    "mask_states",
    "mlm_head",
    "pair_cosines",
    "representation_encoders",
    "similarity_vs_gold",
    "static_avg",
    "static_avg_encoder",
    "static_token_ids",
    "subsample_pairs",
    "token_bias_pca",
    "token_embedding_pca",
    "token_frequencies",
    "topk_comparison",
    "topk_mask_tokens",
    "topk_token_encoder",
    "topk_weights",
    "uniformity",
    "wiki_sample_sentences",
]
