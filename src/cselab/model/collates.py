"""Which template input each encoder of an embedding model gets (``train``, ``test``, ``dev``): the official
trainers' and evaluators' period rule, denoising, truncation and tokenization, per backbone family."""

from __future__ import annotations

from .backbone import Encoder
from .decoder_input import PromptCollate
from .spec import EmbeddingSpec
from .template_input import ViewCollate


def build_collate(spec: EmbeddingSpec, tokenizer, backbone: Encoder, kind: str, mlm_seed: int = 0,
                  pad_to_multiple_of: int | None = None) -> ViewCollate | PromptCollate:
    """The template input of ``kind`` (``train`` | ``test`` | ``dev``) for a model of ``spec`` on ``backbone``
    (:meth:`.embedding.EmbeddingModel.collate` caches it): a decoder's :class:`PromptCollate` (training truncates
    the sentence, ``max_seq_len``; test and dev apply the official evaluation sentence rules, ``eval_rules``, and
    never truncate: kongds/scaling_sentemb ``evaluation.py:197-209``, ``ft_llm.py:221-239``), else a
    :class:`ViewCollate` with the kind's period rule, denoising, truncation and tokenization; ``mlm_seed``,
    ``pad_to_multiple_of``: the training collate's MLM-mask seed and width multiple (:class:`ViewCollate`; a
    decoder's prompt collate takes neither).

    Raises:
        ValueError: an unknown ``kind``.
    """
    if kind not in ("train", "test", "dev"):
        raise ValueError(f"collate({kind!r}): expected train, test or dev")
    training = kind == "train"
    if backbone.is_decoder:
        return PromptCollate(tokenizer, spec.view_specs(kind),
                             max_seq_len=spec.max_seq_len if training else spec.eval_max_seq_len,
                             eval_rules=not training and spec.eval_rules, decode_cleanup=spec.decode_cleanup)
    if training:
        add_period, denoise, official = False, True, False
    elif kind == "test":
        add_period, denoise, official = spec.add_period_at_eval, spec.denoise_at_eval, True
    else:
        add_period, denoise, official = spec.dev_encoder.add_period, spec.dev_encoder.denoise, False
    return ViewCollate(
        tokenizer,
        spec.view_specs(kind),
        max_seq_len=spec.max_seq_len if training else spec.eval_max_seq_len,
        denoise=spec.denoise if denoise else "none",
        mask_index=spec.mask_index,
        add_period=add_period,
        position_offset=backbone.position_offset if spec.denoise_positions == "aligned" else 0,
        max_positions=backbone.max_positions,
        soft_templates=spec.soft_templates,
        official_test_tokenization=official,
        mlm_probability=spec.mlm_probability if training else 0.0,
        mlm_seed=mlm_seed,
        pad_to_multiple_of=pad_to_multiple_of,
        train_tokenization=spec.train_tokenization if training else "promptbert",
    )
