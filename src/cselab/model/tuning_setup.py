"""How an embedding spec's ``tuning`` (:class:`.spec.TuningSpec`) becomes the backbone's prompt module: the
frozen backbone, prefixes, the continuous template table or LoRA adapters (:mod:`.prompt_modules`), each with the
spec's options.  :meth:`.embedding.EmbeddingModel.add_prompt` calls it when a model is built or loaded."""

from __future__ import annotations

from collections.abc import Callable

from .backbone import Encoder
from .spec import TuningSpec


def add_prompt_module(backbone: Encoder, tuning: TuningSpec, soft_init_ids: Callable[[], list[int]]) -> None:
    """Add the prompt module of ``tuning`` to the untouched ``backbone`` (and freeze it unless ``full``);
    ``soft_init_ids()``: the token ids of the continuous template's slots (``soft_prompt`` only, read then).

    Raises:
        ValueError: a prefix option the backbone cannot take (names the ``tuning.*`` key).
    """
    name = tuning.name
    if name == "frozen":
        backbone.freeze_backbone()
    elif name == "prefix":
        backbone.add_prefix(tuning.pre_seq_len, variant=tuning.variant, positions=tuning.prefix_positions,
                            prefix_projection=tuning.prefix_projection,
                            prefix_hidden_size=tuning.prefix_hidden_size, dropout=tuning.dropout_value)
    elif name == "soft_prompt":
        backbone.add_soft_template(soft_init_ids())
    elif name == "lora":
        target = tuning.target_modules
        backbone.add_lora(r=tuning.r, alpha=tuning.alpha, dropout=tuning.dropout_value,
                          target_modules=list(target) if isinstance(target, tuple) else target, bias=tuning.bias)
