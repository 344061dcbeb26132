"""DCPCSE (Jiang et al., EMNLP 2022 Findings: deep continuous prompts, P-tuning v2): SimCSE's views and [CLS] +
MLP with ``tuning=prefix`` on a frozen backbone, and the auxiliary MLM loss (``method.mlm``, on for RoBERTa unsup as
the paper).  The behaviour lives in the shared base (``tuning``, ``mlm``); the class gives the name and checks that
the configuration is the method's (``tunings``, :func:`cselab.methods.checks.check_method`)."""

from __future__ import annotations

from cselab.methods.simcse.method import SimCSE


class DCPCSE(SimCSE):
    """DCPCSE: ``tuning=prefix``; ``mlm`` on for RoBERTa unsup (paper)."""

    method_name = "dcpcse"
    tunings = ("prefix",)
