"""A saved run's config, read once: :class:`SavedRunConfig` is what the apps (the report, the published-row
labels, the transfer tables, the model card) need from the resolved Hydra config a run saved in ``results.json``
(``"config"``) or ``.hydra/config.yaml``.

Every dotted key of that YAML layout, every old layout's spelling and every default is written here once
(:data:`SOURCES` and the field defaults of :class:`SavedRunConfig`); the apps read fields, not dotted strings.
:func:`config_value` stays for the keys a user names (``cselab report --group-by method.name,...``) and the
lists of keys a table prints (the model card's ``CONFIG_KEYS``, the report's ``BASE_KEYS``).

Old layouts (a run directory keeps the config it was saved with):

* before commit ``c3a16a2`` (2026-11-23) ``pooler``, ``denoise`` and ``train`` were top-level keys; since then
  they are ``method.pooler``, ``method.denoise`` and ``method.train``.  The new key wins when both are present.
* ``method.mlm`` was a bool in old runs; now it is ``null`` or the MLM options mapping (``method.mlm_config``,
  ``conf/method/dcpcse.yaml``).  Both read as one bool (:attr:`SavedRunConfig.mlm`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

__all__ = ["SOURCES", "SavedRunConfig", "config_value"]

_ABSENT = object()


def config_value(cfg: Mapping | None, dotted: str, default: Any = None) -> Any:
    """``cfg["a"]["b"]`` for ``"a.b"``, or ``default`` when a level is missing or not a mapping.  Never raises."""
    node: Any = cfg
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return default
        node = node[part]
    return node


#: field of :class:`SavedRunConfig` -> the dotted keys it is read from, the current layout first, then the old
#: layouts' spellings (the first key present wins, even when its value is null; none present: the field default)
SOURCES: dict[str, tuple[str, ...]] = {
    "method": ("method.name",),
    "backbone": ("backbone.name",),
    "backbone_name_or_path": ("backbone.name_or_path",),
    "setting": ("setting.name",),
    "loss": ("loss.name",),
    "loss_margin": ("loss.margin",),
    "ranking": ("loss.ranking",),
    "positive_negative_term": ("loss.positive_negative_term",),
    "prompt": ("prompt.name",),
    "prompt_template": ("prompt.template",),
    "train_views": ("prompt.train_views",),
    "pooler": ("method.pooler", "pooler"),          # top-level before c3a16a2
    "denoise": ("method.denoise", "denoise"),       # top-level before c3a16a2
    "train": ("method.train", "train"),             # top-level before c3a16a2
    "topk": ("method.topk",),
    "topk_denoise": ("method.topk_denoise",),
    "tuning_variant": ("tuning.variant",),
    "pre_seq_len": ("tuning.pre_seq_len",),
    "mlm": ("method.mlm",),
    "whitening": ("eval.whitening",),
}


@dataclass(frozen=True)
class SavedRunConfig:
    """What the apps read from a saved run config; the defaults below are those of a key the config lacks.

    Names (``method`` ... ``pooler``, ``denoise``) are kept as the run saved them (not coerced), so a
    hand-edited ``results.json`` is labelled as before; the fields turned into one type say how below.

    Attributes:
        method, backbone, setting: ``method.name``, ``backbone.name``, ``setting.name`` (``None`` if absent).
        backbone_name_or_path: ``backbone.name_or_path`` (a Hub id or a folder).
        loss: ``loss.name``.
        loss_margin: ``loss.margin`` as a float (PromCSE's Energy-based Hinge margin; default 0.2, the paper's);
            ``None`` when the saved value is not a number.
        ranking: ``loss.ranking`` (RankCSE: ``"listnet"`` default, or ``"listmle"``).
        positive_negative_term: ``loss.positive_negative_term`` (CoT-BERT); False only for a saved ``false``.
        prompt, prompt_template, train_views: ``prompt.name``, ``prompt.template``, ``prompt.train_views``.
        pooler, denoise: ``method.pooler``, ``method.denoise`` (old runs: top-level ``pooler``, ``denoise``).
        train: ``method.train`` (old runs: top-level ``train``); False only for a saved ``false`` (PromptEOL's
            no-fine-tuning runs).
        topk, topk_denoise: ``method.topk`` (default 200, PromptBERT Table 9), ``method.topk_denoise`` (bool).
        tuning_variant, pre_seq_len: ``tuning.variant`` (PromCSE prompt type), ``tuning.pre_seq_len``.
        mlm: ``method.mlm`` as a bool (absent / null: off; a mapping of MLM options: on unless empty; old runs'
            bool as is); ``None`` when the saved value is none of these.
        whitening: ``eval.whitening.enabled`` (BERT-whitening at evaluation; False unless the node is a mapping
            with a true ``enabled``); whitening_fit_on: its ``fit_on`` (default ``"nli"``); whitening_k: its
            ``k`` (``None``: every dimension).
    """

    method: str | None = None
    backbone: str | None = None
    backbone_name_or_path: str | None = None
    setting: str | None = None
    loss: str | None = None
    loss_margin: float | None = 0.2
    ranking: str | None = "listnet"
    positive_negative_term: bool = True
    prompt: str | None = None
    prompt_template: str | None = None
    train_views: Any = None
    pooler: str | None = None
    denoise: str | None = None
    train: bool = True
    topk: int | None = 200
    topk_denoise: bool = False
    tuning_variant: str | None = None
    pre_seq_len: int | None = None
    mlm: bool | None = False
    whitening: bool = False
    whitening_fit_on: str = "nli"
    whitening_k: int | None = None

    @classmethod
    def from_config(cls, config: Mapping | SavedRunConfig | None) -> SavedRunConfig:
        """Read a saved config (``results.json``'s ``"config"`` / ``.hydra/config.yaml``) once.

        Args:
            config: the resolved config as a nested mapping; ``None`` or ``{}`` give every default; a
                :class:`SavedRunConfig` is returned as is.

        Never raises: a missing key (or a level that is not a mapping) gives the field's default.
        """
        if isinstance(config, SavedRunConfig):
            return config
        defaults = {f.name: f.default for f in fields(cls)}
        values = {name: next((v for key in keys if (v := config_value(config, key, _ABSENT)) is not _ABSENT),
                             defaults[name]) for name, keys in SOURCES.items()}
        try:
            values["loss_margin"] = float(values["loss_margin"])
        except (TypeError, ValueError, OverflowError):  # not a number
            values["loss_margin"] = None
        values["positive_negative_term"] = values["positive_negative_term"] is not False
        values["train"] = values["train"] is not False
        values["topk_denoise"] = bool(values["topk_denoise"])
        mlm = values["mlm"]
        values["mlm"] = bool(mlm) if mlm is None or isinstance(mlm, Mapping | bool) else None
        node = values.pop("whitening")
        if isinstance(node, Mapping):
            values.update(whitening=bool(node.get("enabled")), whitening_fit_on=node.get("fit_on", "nli"),
                          whitening_k=node.get("k"))
        return cls(**values)
