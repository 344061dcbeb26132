"""Representations that are not a pooler over the last layers, as plain ``encode(sentences) -> (N, D)``
functions scored by the same evaluator: static token-embedding averages (PromptBERT Table 5 / 11) and the top-k
MLM tokens at a template's [MASK] (Eq. 3, Table 9).  The analyses (``cselab.analysis``) build on them."""
