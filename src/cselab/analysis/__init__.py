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
:class:`cselab.evaluation.sts.STSEvaluator`.  Import each name from its module above (this package re-exports
nothing: one import path per name).
"""
