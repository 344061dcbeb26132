"""Which sentence-transformers modules express an embedding model exactly (the plain kind of exported folder,
:mod:`cselab.export`): :func:`plain_reason` says why a model needs ``st_module`` instead, :func:`plain_modules`
builds ``Transformer`` + ``Pooling`` (+ ``Dense``) for one that does not."""

from __future__ import annotations

from pathlib import Path

#: cselab poolers -> sentence-transformers ``Pooling`` modes (``cls``: then BERT's pooler layer as a ``Dense``)
ST_POOLING: dict[str, str] = {"cls_before_pooler": "cls", "avg": "mean", "cls": "cls"}


def plain_reason(model) -> str | None:
    """Why the embedding model ``model`` (:class:`cselab.model.embedding.EmbeddingModel`) needs ``st_module``,
    or ``None`` when plain sentence-transformers modules (``Transformer`` + ``Pooling`` + ``Dense``) compute
    exactly its test encoder (module docstring)."""
    from cselab.model.heads import MLPHead

    plan, backbone = model.describe(), model.backbone
    if backbone.is_decoder:
        return "a decoder LLM's prompt (the official evaluation sentence rules, left padding, the last token)"
    if backbone.tuning not in ("full", "frozen"):
        return {"prefix": "prefix tuning (past key values at every layer)",
                "soft_prompt": "a continuous template (soft prompt)",
                "lora": "unmerged LoRA adapters (export with --merge-lora for a plain backbone)"}.get(
                    backbone.tuning, f"tuning={backbone.tuning}")
    if plan["template"] is not None:
        return (f"the template {plan['template']!r} (whole-string tokenization"
                + (", the period rule" if plan["add_period"] else "")
                + (", template-bias subtraction" if plan["denoise"] != "none" else "")
                + (", the [MASK] state" if plan["pooler"] == "mask" else "") + ")")
    if plan["add_period"] or plan["denoise"] != "none":
        return "the period rule or template denoising at test"
    if plan["pooler"] not in ST_POOLING or plan["pool_layer"] != -1:
        return f"the pooler {plan['pooler']!r} (sentence-transformers pools the last layer by cls or mean only)"
    if plan["use_head"] and not isinstance(model.head, MLPHead):
        return f"the head {plan['head']} (LayerNorm eps and GELU of BERT's MLM transform)"
    if plan["pooler"] == "cls" and getattr(backbone.base_model, "pooler", None) is None:
        return "pooler=cls without the backbone's pooler layer"
    return None


def plain_modules(model, folder: Path) -> list:
    """The sentence-transformers modules of a model :func:`plain_reason` accepts: ``Transformer`` (the backbone
    and tokenizer written to ``folder``, ``max_seq_length`` = ``eval_max_seq_len`` or the backbone's positions,
    as the test encoder truncates), ``Pooling`` and, for SimCSE's MLP head at test or BERT's pooler layer,
    ``Dense`` (``Linear`` + ``Tanh``, the weights copied)."""
    from sentence_transformers.sentence_transformer.modules import Dense, Pooling, Transformer
    from torch import nn

    plan, backbone = model.describe(), model.backbone
    backbone.base_model.save_pretrained(folder)
    model.tokenizer.save_pretrained(folder)
    limit = model.spec.eval_max_seq_len or backbone.max_positions
    transformer = Transformer(str(folder), max_seq_length=int(limit), do_lower_case=False)
    dim = int(backbone.hidden_size)
    modules = [transformer, Pooling(dim, pooling_mode=ST_POOLING[plan["pooler"]])]
    linear = None
    if plan["pooler"] == "cls":  # BERT's pooler layer: tanh(W h_cls + b)
        linear = backbone.base_model.pooler.dense
    elif plan["use_head"]:  # SimCSE's MLPLayer: tanh(W h + b)
        linear = model.head.dense
    if linear is not None:
        modules.append(Dense(dim, dim, activation_function=nn.Tanh(),
                             init_weight=linear.weight.detach().clone(), init_bias=linear.bias.detach().clone()))
    return modules
