"""SimCSE (Gao et al. 2021): dropout views (unsup) or NLI triplets with hard negatives (sup), InfoNCE.

Official behaviour kept (docs/fidelity.md): [CLS] + MLP (Linear + Tanh) in training; unsup evaluates WITHOUT the MLP
(``cls_before_pooler``, ``mlp_only_train=true``), sup keeps it (``cls``).  The two unsup views are the same
tokens, encoded in one forward pass of 2B rows so that dropout draws two masks.
"""

from __future__ import annotations

from cselab.methods.base import ContrastiveMethod


class SimCSE(ContrastiveMethod):
    """SimCSE; all behaviour is the base's default views (``text`` twice, or sent0 / sent1 / hard_neg)."""

    method_name = "simcse"
