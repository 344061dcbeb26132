"""The papers' published STS numbers (``published.yaml``): load, validate, look up, and map a config to a row.

All scores are Spearman correlations x 100, as the papers print them.  ``published.yaml`` holds one entry per
printed row (schema below); :func:`load_published` validates it and raises :class:`PublishedDataError` naming
the entry and the key on any problem.  :func:`lookup` finds the row for a
``(method, backbone, setting, variant)``; :func:`variant_of` maps a resolved run config to the ``variant`` it
reproduces (``None`` = the paper's default recipe).

Entry schema (every key other than those marked optional is required; unknown keys are errors)::

    method:   str                  config method.name: simcse, promptbert, cot_bert, dcpcse, scpcse, promcse, baseline,
                                   rankcse, prompteol (PromptEOL, Pretended CoT and Knowledge Enhancement on decoder LLMs)
    backbone: bert_base | bert_large | roberta_base | roberta_large | a decoder of :data:`DECODER_BACKBONES`
    setting:  unsup | sup
    variant:  str | null           null = the paper's default recipe; else the ablation row's name
    scores:   {sts12, sts13, sts14, sts15, sts16, stsb, sickr, avg: float in [0, 100] | null}   (all 8 keys)
    std:      {<score key>: float >= 0}              optional, the paper's "+-" (over seeds)
    dev:      {stsb: float in [0, 100]}              optional, STS-B dev (rows reported on dev only)
    extra:    {str: float}                           optional, other numbers of the row (CxC, anisotropy, ...)
    source:   {paper: promptbert | cot-bert | dcpcse | promcse | prompteol | pretcot | sncse, table: str}
    note, erratum, derived: str                      optional; erratum = a known inconsistency of the paper,
                                                     derived = how a number stated only in words was computed
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from cselab.report.saved_config import SavedRunConfig

#: the seven STS test tasks, in the papers' column order (same as ``cselab.evaluation.sts.TEST_TASKS``)
TASKS: tuple[str, ...] = ("sts12", "sts13", "sts14", "sts15", "sts16", "stsb", "sickr")
#: the eight score columns: the seven tasks and their plain mean
SCORE_KEYS: tuple[str, ...] = (*TASKS, "avg")
#: column headers as the papers print them
COLUMN_NAMES: dict[str, str] = {
    "sts12": "STS12", "sts13": "STS13", "sts14": "STS14", "sts15": "STS15", "sts16": "STS16",
    "stsb": "STS-B", "sickr": "SICK-R", "avg": "Avg",
}
#: the decoder LLMs of the PromptEOL and PretCoT / KE rows (``conf/backbone/<name>.yaml``, ``family: decoder``)
DECODER_BACKBONES: tuple[str, ...] = (
    "opt_125m", "opt_350m", "opt_1_3b", "opt_2_7b", "opt_6_7b", "opt_13b", "opt_30b", "opt_66b",
    "llama_7b", "llama_13b", "llama_30b", "llama2_7b", "mistral_7b", "qwen2_0_5b", "gpt2")
BACKBONES: tuple[str, ...] = ("bert_base", "bert_large", "roberta_base", "roberta_large", *DECODER_BACKBONES)
SETTINGS: tuple[str, ...] = ("unsup", "sup")
#: source paper id -> display name (the first four ids are the file stems in shared/papers; the two decoder-LLM
#: papers are not there: PromptEOL's rows come from its official README, the PretCoT / KE rows second-hand)
PAPERS: dict[str, str] = {
    "promptbert": "PromptBERT", "cot-bert": "CoT-BERT", "dcpcse": "DCPCSE", "promcse": "PromCSE",
    "prompteol": "PromptEOL", "pretcot": "PretCoT/KE", "sncse": "SNCSE",
}
#: a method's own paper: preferred by :func:`lookup` when several papers print the same row
OWN_PAPER: dict[str, str] = {
    "promptbert": "promptbert", "baseline": "promptbert", "cot_bert": "cot-bert",
    "dcpcse": "dcpcse", "scpcse": "dcpcse", "promcse": "promcse", "prompteol": "prompteol",
    "sncse": "sncse",
}
DEFAULT_PATH = Path(__file__).with_name("published.yaml")

_REQUIRED = ("method", "backbone", "setting", "variant", "scores", "source")
_OPTIONAL = ("std", "dev", "extra", "note", "erratum", "derived")


class PublishedDataError(ValueError):
    """``published.yaml`` is malformed; the message names the file, the entry and the key."""


@dataclass(frozen=True)
class PublishedRow:
    """One printed row of a paper.  Scores are Spearman x 100; ``None`` where the paper omits the column."""

    method: str
    backbone: str
    setting: str
    variant: str | None
    scores: dict[str, float | None]
    source_paper: str
    source_table: str
    std: dict[str, float] = field(default_factory=dict)
    dev: dict[str, float] = field(default_factory=dict)
    extra: dict[str, float] = field(default_factory=dict)
    note: str | None = None
    erratum: str | None = None
    derived: str | None = None
    index: int = 0   # position in the file (0-based): the last tie-break of :func:`lookup`

    @property
    def key(self) -> tuple[str, str, str, str | None]:
        """``(method, backbone, setting, variant)``, the matching key."""
        return (self.method, self.backbone, self.setting, self.variant)

    @property
    def source(self) -> str:
        """Short citation, e.g. ``"PromptBERT Table 6"``."""
        return f"{PAPERS.get(self.source_paper, self.source_paper)} {self.source_table}"

    def n_reported(self) -> int:
        """How many of the 8 score columns the paper reports (non-null)."""
        return sum(v is not None for v in self.scores.values())


def _fail(where: str, msg: str) -> PublishedDataError:
    return PublishedDataError(f"{where}: {msg}")


def _number(value: Any, where: str, lo: float | None = 0.0, hi: float | None = 100.0) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _fail(where, f"expected a number, got {value!r}")
    value = float(value)
    if not math.isfinite(value):
        raise _fail(where, f"expected a finite number, got {value!r}")
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        raise _fail(where, f"{value} is outside [{lo}, {hi}] (scores are Spearman x 100)")
    return value


def _mapping(value: Any, where: str) -> Mapping:
    if not isinstance(value, Mapping):
        raise _fail(where, f"expected a mapping, got {type(value).__name__}")
    return value


def _text(value: Any, where: str, allow_none: bool = False) -> str | None:
    if value is None and allow_none:
        return None
    if not isinstance(value, str) or not value.strip():
        raise _fail(where, f"expected a non-empty string, got {value!r}")
    return value


def parse_entry(raw: Any, index: int, where: str = "published.yaml") -> PublishedRow:
    """Validate one raw YAML entry and return it as a :class:`PublishedRow`.

    Args:
        raw: the entry as loaded by ``yaml.safe_load`` (a mapping, schema in the module docstring).
        index: its 0-based position in ``entries`` (used in messages and as the last lookup tie-break).
        where: the file name, for messages.

    Raises:
        PublishedDataError: missing / unknown keys, a backbone or setting outside the allowed values, a score
            that is not a number in [0, 100], a negative std, an unknown source paper, or a row without any
            number; the message names the entry (index and key) and the offending field.
    """
    loc = f"{where} entry #{index}"
    raw = _mapping(raw, loc)
    loc = f"{loc} ({raw.get('method')}/{raw.get('backbone')}/{raw.get('setting')}/variant={raw.get('variant')!r})"
    missing = [k for k in _REQUIRED if k not in raw]
    if missing:
        raise _fail(loc, f"missing key(s) {missing}")
    unknown = sorted(set(raw) - set(_REQUIRED) - set(_OPTIONAL))
    if unknown:
        raise _fail(loc, f"unknown key(s) {unknown}; allowed: {list(_REQUIRED + _OPTIONAL)}")
    method = _text(raw["method"], f"{loc} method")
    if raw["backbone"] not in BACKBONES:
        raise _fail(loc, f"backbone={raw['backbone']!r}: expected one of {list(BACKBONES)}")
    if raw["setting"] not in SETTINGS:
        raise _fail(loc, f"setting={raw['setting']!r}: expected one of {list(SETTINGS)}")
    variant = _text(raw["variant"], f"{loc} variant", allow_none=True)

    scores_raw = _mapping(raw["scores"], f"{loc} scores")
    bad = sorted(set(scores_raw) ^ set(SCORE_KEYS))
    if bad:
        raise _fail(f"{loc} scores", f"needs exactly the keys {list(SCORE_KEYS)} (null where not reported); "
                                     f"wrong or missing: {bad}")
    scores = {k: None if scores_raw[k] is None else _number(scores_raw[k], f"{loc} scores.{k}")
              for k in SCORE_KEYS}

    std: dict[str, float] = {}
    for k, v in _mapping(raw.get("std") or {}, f"{loc} std").items():
        if k not in SCORE_KEYS:
            raise _fail(f"{loc} std", f"unknown column {k!r}; expected one of {list(SCORE_KEYS)}")
        if scores[k] is None:
            raise _fail(f"{loc} std.{k}", "a std without its score")
        std[k] = _number(v, f"{loc} std.{k}", lo=0.0, hi=100.0)
    dev: dict[str, float] = {}
    for k, v in _mapping(raw.get("dev") or {}, f"{loc} dev").items():
        if k != "stsb":
            raise _fail(f"{loc} dev", f"unknown dev task {k!r}; only 'stsb' is reported by the papers")
        dev[k] = _number(v, f"{loc} dev.{k}")
    extra = {str(k): _number(v, f"{loc} extra.{k}", lo=None, hi=None)
             for k, v in _mapping(raw.get("extra") or {}, f"{loc} extra").items()}
    if all(v is None for v in scores.values()) and not dev:
        raise _fail(loc, "no number at all (every score is null and there is no dev score)")

    source = _mapping(raw["source"], f"{loc} source")
    if set(source) != {"paper", "table"}:
        raise _fail(f"{loc} source", f"needs exactly the keys ['paper', 'table'], got {sorted(source)}")
    if source["paper"] not in PAPERS:
        raise _fail(f"{loc} source.paper", f"{source['paper']!r}: expected one of {list(PAPERS)}")
    table = _text(str(source["table"]) if source["table"] is not None else None, f"{loc} source.table")
    return PublishedRow(
        method=method, backbone=raw["backbone"], setting=raw["setting"], variant=variant, scores=scores,
        source_paper=source["paper"], source_table=table, std=std, dev=dev, extra=extra,
        note=_text(raw.get("note"), f"{loc} note", allow_none=True),
        erratum=_text(raw.get("erratum"), f"{loc} erratum", allow_none=True),
        derived=_text(raw.get("derived"), f"{loc} derived", allow_none=True),
        index=index,
    )


def load_published(path: str | Path | None = None) -> list[PublishedRow]:
    """Load and validate ``published.yaml`` (default: the one packaged beside this module).

    Returns:
        the rows in file order.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        PublishedDataError: not YAML, no ``entries`` list, an invalid entry (see :func:`parse_entry`), or the
            same ``(method, backbone, setting, variant)`` twice from the same paper table.
    """
    path = Path(path) if path is not None else DEFAULT_PATH
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        raise PublishedDataError(f"{path}: not valid YAML ({err})") from err
    if not isinstance(data, Mapping) or not isinstance(data.get("entries"), list):
        raise PublishedDataError(f"{path}: expected a mapping with an 'entries' list")
    rows = [parse_entry(raw, i, where=path.name) for i, raw in enumerate(data["entries"])]
    seen: dict[tuple, int] = {}
    for row in rows:
        k = (*row.key, row.source_paper, row.source_table)
        if k in seen:
            raise PublishedDataError(
                f"{path.name} entries #{seen[k]} and #{row.index}: the same row {row.key} twice in {row.source}")
        seen[k] = row.index
    return rows


def lookup(
    rows: Iterable[PublishedRow], method: str, backbone: str, setting: str, variant: str | None = None,
    paper: str | None = None,
) -> PublishedRow | None:
    """The published row for ``(method, backbone, setting, variant)``, or ``None`` if no paper prints it.

    Several papers may print the same row (SimCSE is quoted by all four).  Preference: ``paper`` if given
    (a source paper id, e.g. ``"promcse"``), else the method's own paper (:data:`OWN_PAPER`); then the row
    reporting the most columns; then the first in file order.  Never raises for an unknown key.
    """
    matches = [r for r in rows if r.key == (method, backbone, setting, variant)]
    if not matches:
        return None
    preferred = paper or OWN_PAPER.get(method)
    return min(matches, key=lambda r: (r.source_paper != preferred, -r.n_reported(), r.index))


def avg_mismatch(row: PublishedRow) -> float | None:
    """Printed Avg minus the mean of the 7 printed tasks (``None`` unless all 8 are printed); Spearman x 100.

    Rounding to 2 decimals alone keeps ``|mismatch| <= 0.01``; larger values are the papers' errata.
    """
    values = [row.scores[t] for t in TASKS]
    if row.scores["avg"] is None or any(v is None for v in values):
        return None
    return row.scores["avg"] - sum(values) / len(values)


# ------------------------------------------------------------------------------------ config -> variant

#: prompt config names (``prompt.name``) that ARE an ablation row, per method.  Future prompt files for the
#: CoT-BERT Table 3 templates should use these names (or add theirs here).
PROMPT_VARIANTS: dict[tuple[str, str], str] = {
    ("cot_bert", "cot_bert_only_prefix"): "only prefix",
    ("cot_bert", "cot_bert_only_suffix"): "only suffix",
    ("cot_bert", "cot_bert_irrelevant_prefix"): "irrelevant prefix + suffix",
    ("cot_bert", "cot_bert_static_prefix"): "static prefix + suffix",
    ("cot_bert", "cot_bert_suffix_prefix"): "suffix + prefix",
}
#: method=baseline (no fine-tuning): pooler -> PromptBERT Table 5 / Table 1 row
BASELINE_POOLER_VARIANTS: dict[str, str] = {
    "avg": "last avg.",
    "static_avg": "static avg.",
    "static_avg_debiased": "static remove biases avg.",
    "avg_first_last_legacy": "first-last avg.",   # the 56.70 row averaged the embedding layer and the last
    "avg_first_last": "first-last avg. (layer 1)",  # SimCSE's post-Jan-2022 definition: no published row
    "avg_top2": "top-2 avg.",
    "cls": "[CLS]",
    "cls_before_pooler": "[CLS] (before pooler)",
}
#: the official DCPCSE / PromCSE default of the auxiliary MLM loss: on for RoBERTa unsup only
_MLM_DEFAULT = {("unsup", "roberta_base"): True, ("unsup", "roberta_large"): True}
#: PromCSE Table 3 prompt types (``tuning.variant``); "deep" (every layer) is the default
PROMPT_TYPE_VARIANTS: dict[str, str] = {
    "layer_shared": "layer-shared soft prompt",
    "input_layer": "input-layer soft prompt",
}
#: ``eval.whitening.fit_on`` -> its name in a variant (BERT-whitening, Su et al. 2021)
WHITENING_FIT_NAMES: dict[str, str] = {"nli": "NLI", "target": "target", "wiki": "wiki"}


def variant_of(config: Mapping[str, Any] | SavedRunConfig | None) -> str | None:
    """The published ``variant`` a resolved run config (or its :class:`SavedRunConfig`) reproduces
    (:func:`recipe_variant`), followed by ``" + whitening (<corpus>)"`` (``, k=<k>`` when it keeps fewer
    dimensions) for a run with ``eval.whitening`` enabled (BERT-whitening rows: ``"first-last avg. (layer 1) +
    whitening (NLI)"``; a whitened SimCSE run: ``"whitening (NLI)"``)."""
    saved = SavedRunConfig.from_config(config)
    recipe = recipe_variant(saved)
    if not saved.whitening:
        return recipe
    fit_on, k = saved.whitening_fit_on, saved.whitening_k
    whitening = f"whitening ({WHITENING_FIT_NAMES.get(fit_on, fit_on)})" + (f", k={k}" if k else "")
    return whitening if recipe is None else f"{recipe} + {whitening}"


def recipe_variant(config: Mapping[str, Any] | SavedRunConfig | None) -> str | None:
    """The published ``variant`` of a run config's recipe (whitening aside); ``None`` = the paper's default recipe.

    Args:
        config: the resolved Hydra config as stored in ``results.json`` ("config") or ``.hydra/config.yaml``, or
            its :class:`cselab.report.saved_config.SavedRunConfig` (which reads old layouts' keys too).

    Rules, in order (first match wins; extend here when a method gains an ablation switch):

    * loss ``infonce_eh`` / ``energy_hinge`` (PromCSE's Energy-based Hinge): ``"+EH"`` at the paper's margin
      ``loss.margin`` = 0.2, else ``"+EH (m=<margin>)"`` (PromCSE Table 4).
    * ``method.name == "baseline"`` (no fine-tuning): a ``[MASK]`` pooler with a prompt ->
      ``"prompt (manual)"`` for ``promptbert_manual`` (``+ denoising`` when ``denoise != none``), else
      ``"template: <prompt.name>"``; other poolers via :data:`BASELINE_POOLER_VARIANTS` (``avg`` ->
      ``"last avg."``, ``avg_first_last_legacy`` -> ``"first-last avg."``, ...).
    * ``method.name == "prompteol"`` (decoder LLMs): ``method.train`` false -> ``"no fine-tuning: <prompt.name>"``
      (``prompteol``, ``prompteol_icl``, ``pretcot``, ``knowledge``); fine-tuned with ``promptsth`` /
      ``promptsum`` -> ``"template: <prompt.name>"``; fine-tuned with PromptEOL's template -> ``None``.
    * rankcse: ``loss.ranking`` listmle -> ``"listMLE"`` (the printed row is RankCSE_listNet).
    * ``(method, prompt.name)`` in :data:`PROMPT_VARIANTS` (CoT-BERT Table 3 templates).
    * cot_bert: ``loss.positive_negative_term`` false -> ``"without a(i+,j-)"`` (Table 4);
      ``denoise`` ``none`` / ``position`` -> ``"without denoise"`` / ``"position denoise"`` (Table 6).
    * promptbert (unsup): the two training views equal -> ``"same template (dropout)"``; different views
      without denoising -> ``"different templates"`` (Table 8).
    * dcpcse / promcse: ``tuning.variant`` in :data:`PROMPT_TYPE_VARIANTS` (PromCSE Table 3);
      ``method.mlm`` differing from the paper default -> ``"w/ MLM"`` / ``"w/o MLM"`` (DCPCSE Table 2);
      ``tuning.pre_seq_len == 1`` -> ``"prompt length 1"`` (the only length the texts state).
    * any other method with ``method.mlm`` on (SimCSE's ``--do_mlm``, off in every row compared here) -> ``"w/ MLM"``.

    A config that deviates from the paper in a way not listed here (e.g. ``trainer.max_steps=20``) still maps
    to ``None``: the report shows its overrides beside the row.  Never raises on missing keys.
    """
    c = SavedRunConfig.from_config(config)
    method, setting, backbone, denoise, prompt = c.method, c.setting, c.backbone, c.denoise, c.prompt

    if c.loss in ("infonce_eh", "energy_hinge"):
        # a margin that is not a number (None) reads as the paper's
        return "+EH" if c.loss_margin is None or math.isclose(c.loss_margin, 0.2) else f"+EH (m={c.loss_margin:g})"

    if c.mlm and method not in ("dcpcse", "promcse"):
        return "w/ MLM"

    if method == "baseline":
        pooler = c.pooler
        if pooler == "mask" and prompt:
            if prompt == "promptbert_manual":
                return "prompt (manual)" + (" + denoising" if denoise not in (None, "none") else "")
            if prompt == "custom":  # prompt search: the template string itself (Table 4 rows)
                return f"template: {c.prompt_template}"
            return f"template: {prompt}"
        if pooler == "topk":  # Table 9 reports k = 200
            return f"top-{c.topk} tokens" + (" + denoising" if c.topk_denoise else "")
        return BASELINE_POOLER_VARIANTS.get(pooler)

    if method == "prompteol":
        if not c.train:
            return f"no fine-tuning: {prompt}"
        return f"template: {prompt}" if prompt not in (None, "prompteol") else None

    if method == "rankcse" and c.ranking == "listmle":
        return "listMLE"  # CoT-BERT Table 2 prints RankCSE_listNet (the default, loss=rankcse_listnet)

    if (method, prompt) in PROMPT_VARIANTS:
        return PROMPT_VARIANTS[(method, prompt)]

    if method == "cot_bert":
        if not c.positive_negative_term:
            return "without a(i+,j-)"
        if denoise == "none":
            return "without denoise"
        if denoise == "position":
            return "position denoise"
        return None

    if method == "promptbert" and setting == "unsup":
        views = c.train_views
        if isinstance(views, list | tuple) and len(views) == 2 and views[0] == views[1]:
            return "same template (dropout)"
        if denoise == "none":
            return "different templates"
        return None

    if method in ("dcpcse", "promcse"):
        if c.tuning_variant in PROMPT_TYPE_VARIANTS:
            return PROMPT_TYPE_VARIANTS[c.tuning_variant]
        if c.mlm is not None and c.mlm != _MLM_DEFAULT.get((setting, backbone), False):
            return "w/ MLM" if c.mlm else "w/o MLM"
        if c.pre_seq_len == 1:
            return "prompt length 1"
    return None
