"""What the MLM head predicts at the template's [MASK] (PromptBERT Eq. 3, Table 7, Table 9).

* :func:`topk_token_encoder` -- PromptBERT Eq. 3, the "avg. Top-200 tokens" row of Table 9::

      h = sum_{v in V_top-k} W_v P(v = [MASK] | h_[MASK]) / sum_{v in V_top-k} P(v = [MASK] | h_[MASK])

  ``P(. | h_[MASK])`` is the MLM head's softmax over the WHOLE vocabulary at the [MASK] position, ``V_top-k``
  its k most probable tokens, and the weights are those probabilities renormalised to sum to 1 over the top k
  (equivalently a softmax over the top-k logits).  ``W_v`` is the STATIC embedding of token ``v``: row ``v`` of
  the input word-embedding matrix (``model.embeddings.word_embeddings``; for BERT/RoBERTa it is tied to the MLM
  decoder).  Every vocabulary entry may be in the top k (special tokens are not filtered; the paper says
  nothing about filtering).
* :func:`topk_mask_tokens` -- Table 7: the k most probable tokens at [MASK] with their probabilities.

Template denoising (``denoise=True``; Table 7 right column, Table 9 "denoising" column).  The paper defines
template denoising only as Eq. 4's ``h_i - h_hat_i`` and says (Sec. 6.1) that it "removes the bias from
templates and improves the quality of top-k tokens predicted by MLM head"; the released code parses
``--mlm_head_predict`` but never uses it.  Here, precisely: ``h_hat`` is PromptBERT's position-denoising bias
(:mod:`cselab.model.template_bias`, ``mode="position"``) -- the last-layer [MASK] state of the template ALONE
(``[CLS] prefix suffix [SEP]``) with the suffix's position ids shifted by the sentence length L, so the template
tokens keep the positions they have in the real input (depends only on template and L) -- and the MLM head is
applied to the difference of last-layer hidden states::

      logits = MLMHead(h_[MASK] - h_hat_L)          (the head's transform + decoder, bias included)

i.e. the bias is subtracted in HIDDEN space, before the head, not from the logits.  The same probabilities then
feed Eq. 3 (``topk_token_encoder``) or the top-k list (``topk_mask_tokens``).

Inputs follow PromptBERT's non-fine-tuned evaluation (docs/fidelity.md): the sentence is tokenized alone, wrapped in
the template (``[CLS] prefix sentence suffix [SEP]``), "." appended when it does not end in ``. ? " '``, no
truncation beyond the backbone's maximum length.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from cselab.model.embedding import EmbeddingModel
from cselab.model.spec import EmbeddingSpec

#: PromptBERT's manual template without fine-tuning (Table 4 best, Table 5 "manual", Table 7, Table 9), in the
#: official mini-language so the token ids equal the official ones (RoBERTa quotes with ').
MANUAL_TEMPLATES: dict[str, str] = {
    "bert": '*cls*_This_sentence_:_"*sent_0*"_means*mask*.*sep+*',
    "roberta": "*cls*_This_sentence_:_'*sent_0*'_means*mask*.*sep+*",
}

#: The sentences of PromptBERT Table 7.
TABLE7_SENTENCES: tuple[str, ...] = (
    "i am sad.",
    "i am not happy.",
    "the man is playing the guitar.",
    "the man is playing the piano.",
)


def manual_template(family: str) -> str:
    """The manual template for a backbone family (``bert`` | ``roberta``)."""
    return MANUAL_TEMPLATES["roberta" if family == "roberta" else "bert"]


def _backbone_name(encoder) -> str:
    cfg = getattr(encoder.model, "config", None)
    return str(getattr(cfg, "_name_or_path", "") or getattr(cfg, "name_or_path", "") or type(encoder.model).__name__)


def mlm_head(encoder) -> Callable[[torch.Tensor], torch.Tensor]:
    """The masked-LM head of a backbone loaded with ``mlm_head=True``: (..., D) hidden -> (..., V) logits.

    BERT-like models: ``mlm.cls`` (transform = dense + GELU + LayerNorm, then the tied decoder + bias);
    RoBERTa-like: ``mlm.lm_head`` (dense + GELU + LayerNorm + decoder).

    Raises:
        ValueError: ``encoder.mlm`` is None (the message names the backbone and how to get a head), or the
            masked-LM model has neither ``cls`` nor ``lm_head``.
    """
    mlm = getattr(encoder, "mlm", None)
    if mlm is None:
        raise ValueError(
            f"backbone {_backbone_name(encoder)!r} was loaded without a masked-LM head (Encoder.mlm is None); "
            "the top-k [MASK] token analysis (PromptBERT Eq. 3 / Table 7) needs one: load it with "
            "load_backbone(name_or_path, mlm_head=True) from an MLM-capable checkpoint, e.g. bert-base-uncased "
            "or roberta-base (sentence-transformers checkpoints such as all-MiniLM-L6-v2 have no MLM head)"
        )
    for attr in ("cls", "lm_head"):
        head = getattr(mlm, attr, None)
        if isinstance(head, torch.nn.Module):
            return head
    raise ValueError(f"backbone {_backbone_name(encoder)!r}: masked-LM model {type(mlm).__name__} has neither "
                     "a `cls` nor an `lm_head` module; cannot apply its MLM head to a hidden state")


def mask_model(encoder, tokenizer, template: str, denoise: bool = False, batch_size: int = 64,
               add_period: bool = True) -> EmbeddingModel:
    """The embedding model whose test encoder is the [MASK] representation of ``template`` on the raw backbone:
    ``pooler=mask``, no head, ``add_period`` the period rule, ``denoise`` the position-denoising bias
    subtracted with the template tokens at their real positions (``denoise_positions=aligned``, module
    docstring), fp32, ``batch_size`` sentences a batch.  The same template input as ``method=baseline
    method.pooler=mask`` (the official test tokenization of the whole templated string)."""
    spec = EmbeddingSpec(family=encoder.family, pooler="mask", head="none", train_views=[("text", template)],
                         eval_view=("text", template), add_period_at_eval=add_period,
                         denoise="position" if denoise else "none", denoise_at_eval=denoise,
                         denoise_positions="aligned", eval_batch_size=batch_size, eval_precision="32")
    return EmbeddingModel(encoder, tokenizer, None, spec, apply_tuning=False)


def _head_chunks(head: torch.nn.Module, encoder, tokenizer, template: str, sentences: Sequence[str], denoise: bool,
                 batch_size: int, add_period: bool):
    """``(start, logits)``: the MLM head (in eval mode, its mode restored after) on consecutive chunks of
    ``batch_size`` rows from row ``start`` of the last-layer states at the template's representation [MASK]
    (``h_[MASK]``, or ``h_[MASK] - h_hat_L`` with ``denoise``, module docstring): the test encoder of
    :func:`mask_model` (the one inference path: its ``represent``, no head, in eval mode, its train/eval mode
    restored after), rows in input order; (b, V) float32 logits (so that they stay small)."""
    h = mask_model(encoder, tokenizer, template, denoise, batch_size, add_period).encode(sentences)
    param = next(head.parameters())
    was_training = head.training
    head.eval()
    try:
        for start in range(0, h.shape[0], batch_size):
            yield start, head(h[start : start + batch_size].to(param.device, param.dtype)).float()
    finally:
        head.train(was_training)


@torch.no_grad()
def mask_logits(
    encoder,
    tokenizer,
    template: str,
    sentences: Sequence[str],
    denoise: bool = False,
    batch_size: int = 64,
    add_period: bool = True,
) -> torch.Tensor:
    """MLM-head logits at the template's [MASK]: (N, V) float32, ``MLMHead(h_[MASK] [- h_hat_L])``.

    Memory is N x V floats: for large N use :func:`topk_token_encoder` / :func:`topk_mask_tokens`, which reduce
    each batch to its top k.

    Raises:
        ValueError: the backbone has no MLM head (see :func:`mlm_head`).
    """
    head = mlm_head(encoder)  # fail before any forward pass
    vocab = encoder.model.embeddings.word_embeddings.weight.shape[0]
    chunks = _head_chunks(head, encoder, tokenizer, template, sentences, denoise, batch_size, add_period)
    parts = [logits.cpu() for _, logits in chunks]
    return torch.cat(parts) if parts else torch.zeros(0, vocab)


def topk_weights(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Eq. 3's weights: softmax over the full vocabulary, top k kept, renormalised to sum to 1.

    Args:
        logits: (N, V).
        k: 1 <= k <= V.

    Returns:
        ``(weights, indices)``, both (N, k); ``weights[n].sum() == 1``; indices by decreasing probability.

    Raises:
        ValueError: k out of range.
    """
    vocab = logits.shape[-1]
    if not 1 <= k <= vocab:
        raise ValueError(f"k={k}: expected 1 <= k <= vocabulary size {vocab}")
    probs = torch.softmax(logits.float(), dim=-1)
    top = probs.topk(k, dim=-1)
    return top.values / top.values.sum(-1, keepdim=True), top.indices


def topk_token_encoder(
    encoder,
    tokenizer,
    template: str | None = None,
    k: int = 200,
    denoise: bool = False,
    batch_size: int = 64,
    add_period: bool = True,
) -> Callable[[list[str]], torch.Tensor]:
    """PromptBERT Eq. 3 (Table 9 "avg. Top-200 tokens") as an ``encode`` function.

    Args:
        encoder: an Encoder loaded with ``mlm_head=True``.
        tokenizer: its tokenizer.
        template: readable or official template with one [MASK]; ``None`` = :data:`MANUAL_TEMPLATES` for the
            encoder's family.
        k: number of top tokens (paper: 200).
        denoise: feed ``h_[MASK] - h_hat_L`` to the MLM head (Table 9 "denoising" column; module docstring).
        batch_size: sentences per forward pass.
        add_period: PromptBERT's evaluation period rule.

    Returns:
        ``encode(sentences: list[str]) -> Tensor[N, D]`` float32 on CPU: ``sum_v w_v W_v`` with ``w`` from
        :func:`topk_weights` and ``W`` the input word-embedding matrix.

    Raises:
        ValueError: no MLM head (names the backbone, suggests an MLM-capable checkpoint), or bad ``k``.
    """
    head = mlm_head(encoder)  # fail at construction, not at the first call
    tpl = template or manual_template(encoder.family)
    weight = encoder.model.embeddings.word_embeddings.weight
    if not 1 <= k <= weight.shape[0]:
        raise ValueError(f"k={k}: expected 1 <= k <= vocabulary size {weight.shape[0]}")

    @torch.no_grad()
    def encode(sentences: list[str]) -> torch.Tensor:
        static = weight.detach().float()
        parts = []
        for _, logits in _head_chunks(head, encoder, tokenizer, tpl, sentences, denoise, batch_size, add_period):
            w, top = topk_weights(logits, k)  # (b, k), renormalised over the top k
            parts.append((w.unsqueeze(-1) * static[top]).sum(1).cpu())  # sum_v w_v W_v
        return torch.cat(parts) if parts else torch.zeros(0, static.shape[1])

    return encode


def topk_mask_tokens(
    encoder,
    tokenizer,
    template: str | None,
    sentences: Sequence[str],
    k: int = 10,
    denoise: bool = False,
    batch_size: int = 64,
    add_period: bool = True,
) -> list[list[tuple[str, float]]]:
    """PromptBERT Table 7: the k most probable tokens at the template's [MASK], per sentence.

    Args:
        template: as :func:`topk_token_encoder` (``None`` = the manual template).
        sentences: raw sentences (Table 7: :data:`TABLE7_SENTENCES`).
        k: tokens per sentence (Table 7: 5).
        denoise: "after template denoising": ``MLMHead(h_[MASK] - h_hat_L)`` (module docstring).

    Returns:
        Per sentence, ``[(token, probability), ...]`` by decreasing probability; ``token`` is the vocabulary
        string (``convert_ids_to_tokens``: ``##ing`` for WordPiece pieces, ``Ġword`` for RoBERTa words) and
        ``probability`` the softmax over the FULL vocabulary (not renormalised over the k).

    Raises:
        ValueError: no MLM head, or bad ``k``.
    """
    tpl = template or manual_template(encoder.family)
    head = mlm_head(encoder)
    vocab = encoder.model.embeddings.word_embeddings.weight.shape[0]
    if not 1 <= k <= vocab:
        raise ValueError(f"k={k}: expected 1 <= k <= vocabulary size {vocab}")
    out: list[list[tuple[str, float]]] = [[] for _ in sentences]
    with torch.no_grad():
        for start, logits in _head_chunks(head, encoder, tokenizer, tpl, sentences, denoise, batch_size,
                                          add_period):
            top = torch.softmax(logits, dim=-1).topk(k, dim=-1)
            for i, values, indices in zip(range(start, start + len(logits)), top.values.tolist(),
                                          top.indices.tolist(), strict=True):
                out[i] = list(zip(tokenizer.convert_ids_to_tokens(indices), values, strict=True))
    return out
