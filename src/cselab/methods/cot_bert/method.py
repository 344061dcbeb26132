"""CoT-BERT (Zhang et al. 2023): two-stage templates, extended InfoNCE, [PAD] template denoising.

The views are the prompt's ``train_views`` (anchor, positive, hard negative template around the same
sentence), the representation is the LAST [MASK] state (``prompt.mask_index=-1``), the bias is computed with
``denoise=pad`` ([PAD] placeholders of the sentence's length, see :mod:`cselab.model.template_bias`), the loss is
:class:`cselab.losses.cot_infonce.CoTInfoNCE`, and the test encodes the anchor template without denoising.
"""

from __future__ import annotations

from cselab.methods.promptbert.method import PromptBERT


class CoTBERT(PromptBERT):
    """CoT-BERT; unsupervised only (the paper has no supervised setting: ``setting=sup`` is refused)."""

    method_name = "cot_bert"
    settings = ("unsup",)
