"""The model card (``README.md``) of an exported cselab model: Hugging Face metadata, method, backbone, config,
the 7-task STS table of the run's ``results.json`` beside the paper's row, and how to load the model.

:func:`model_card` builds the text from plain data (no model needed, so it is tested offline);
``cselab.export`` writes it into the folder it exports, and ``--push-to-hub`` uploads the folder with it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cselab.io.tables import Column, Table, markdown
from cselab.report.published import COLUMN_NAMES, SCORE_KEYS, TASKS, load_published, lookup, variant_of
from cselab.report.saved_config import SavedRunConfig, config_value

__all__ = ["CONFIG_KEYS", "find_results", "model_card", "sts_table"]

#: the config keys the card lists (dotted, printed as the key column of its Configuration table, so they stay
#: dotted strings read with :func:`config_value`; those absent from the run's config are skipped)
CONFIG_KEYS: tuple[str, ...] = (
    "method.name", "setting.name", "backbone.name", "backbone.name_or_path", "method.pooler", "prompt.name",
    "prompt.template", "method.denoise", "loss.name", "loss.temperature", "tuning.name", "tuning.pre_seq_len",
    "optim.lr", "data.batch_size", "data.path", "max_seq_len", "trainer.max_epochs", "trainer.max_steps", "seed",
)

#: the method hyper-parameters listed when the run's config is not at hand (no results.json)
HPARAM_KEYS: tuple[str, ...] = ("setting", "model.pooler", "model.head", "model.denoise", "model.prompt.name",
                                "loss.name", "loss.temperature", "model.tuning.name", "optim.lr", "model.max_seq_len")


def find_results(checkpoint: str | os.PathLike | None) -> Path | None:
    """The ``results.json`` of the run a checkpoint belongs to (``<run>/checkpoints/x.ckpt`` -> ``<run>/``),
    or ``None`` when there is none."""
    if checkpoint is None:
        return None
    ckpt = Path(checkpoint).resolve()
    for folder in (ckpt.parent, ckpt.parent.parent):
        if (folder / "results.json").is_file():
            return folder / "results.json"
    return None


def _fmt(value: Any) -> str:
    return "-" if value is None else f"{float(value):.2f}"


def sts_table(test: Mapping[str, float], paper: Any | None = None, label: str = "this model") -> str:
    """Markdown table: STS12 ... SICK-R, Avg (Spearman x 100) for ``test``, and the published row beside it.

    Args:
        test: ``results["test"]`` (task -> score; ``avg`` when all 7 were run).
        paper: a :class:`cselab.report.published.PublishedRow` or ``None``.
    """
    rows = [[label, *(_fmt(test.get(k)) for k in SCORE_KEYS)]]
    if paper is not None:
        rows.append([f"paper ({paper.source})", *(_fmt(paper.scores.get(k)) for k in SCORE_KEYS)])
        if all(test.get(k) is not None and paper.scores.get(k) is not None for k in TASKS):
            diff = [float(test[k]) - float(paper.scores[k]) for k in TASKS]
            avg = (float(test["avg"]) - float(paper.scores["avg"])) if test.get("avg") is not None and \
                paper.scores.get("avg") is not None else None
            rows.append(["ours - paper", *(f"{d:+.2f}" for d in diff), "-" if avg is None else f"{avg:+.2f}"])
    table = Table([Column(""), *(Column(COLUMN_NAMES[k], "right") for k in SCORE_KEYS)], rows)
    return "\n".join(markdown(table, right_rule="---:"))


def model_card(
    *,
    method_class: str,
    backbone: Mapping[str, Any],
    plan: Mapping[str, Any],
    trust_remote_code: bool,
    results: Mapping[str, Any] | None = None,
    repo_id: str | None = None,
    published: list | None = None,
    hparams: Mapping[str, Any] | None = None,
    check: Mapping[str, Any] | None = None,
) -> str:
    """The card's text: YAML metadata (``huggingface_hub.ModelCardData``) and the Markdown body.

    Args:
        method_class: the method's class name (``PromptBERT`` ...).
        backbone: ``{"name_or_path", "family"}`` from the checkpoint.
        plan: :func:`cselab.export.describe`'s plan (pooler, template, head, denoise, prompt kind).
        trust_remote_code: whether loading needs ``trust_remote_code=True`` (custom modules in the folder).
        results: the run's ``results.json`` (its ``config``, ``test``, ``dev``), or ``None``.
        repo_id: the Hub id, used in the loading snippet (default: ``path/to/this/folder``).
        published: the published rows (default: the packaged ``published.yaml``).
        hparams: the checkpoint's hyper-parameters (``method.hparams``), listed when there is no ``results``.
        check: the export check (:func:`cselab.export.check_folder`'s dict; None: not checked), its own section.
    """
    from huggingface_hub import ModelCardData

    config = (results or {}).get("config") or {}
    saved = SavedRunConfig.from_config(config)
    method = saved.method or method_class.lower()
    setting, backbone_name = saved.setting, saved.backbone
    name_or_path = str(backbone.get("name_or_path") or saved.backbone_name_or_path or "")
    is_hub_id = bool(name_or_path) and not Path(name_or_path).exists() and \
        not name_or_path.startswith(("package:", "/", ".", "~"))
    base_model = name_or_path if is_hub_id else None  # a Hugging Face id (not a folder, not a package)
    data = ModelCardData(
        library_name="sentence-transformers", pipeline_tag="sentence-similarity", base_model=base_model,
        tags=["sentence-transformers", "sentence-similarity", "feature-extraction", "cselab", method]
        + ([setting] if setting else []),
    )
    where = repo_id or "path/to/this/folder"
    load = (f'SentenceTransformer("{where}", trust_remote_code=True)  # the cselab.model code it ships'
            if trust_remote_code else f'SentenceTransformer("{where}")')
    lines = [
        "---", data.to_yaml(), "---", "",
        f"# {repo_id or method_class} ({method_class}, cselab)", "",
        f"A sentence-embedding model trained with **{method_class}** (`method={method}`"
        + (f", `setting={setting}`" if setting else "") + f") on the backbone `{name_or_path}`"
        + (f" (`backbone={backbone_name}`)" if backbone_name else "") + " with "
        "cselab, exported to sentence-transformers.  Its embeddings equal "
        "`cselab.load(checkpoint).encode(sentences)` (the evaluation's template, prompt, pooling, head and "
        "template bias; see *Export check*).", "",
        "## Representation", "",
        f"* pooler: `{plan.get('pooler')}`; head at test: `{plan.get('head') if plan.get('use_head') else 'none'}`",
        f"* template: `{plan.get('template')}`" if plan.get("template") else "* template: none (the sentence alone)",
        f"* continuous prompt: `{plan.get('prompt_kind')}`; template denoising at test: `{plan.get('denoise')}`",
        *([f"* BERT-whitening after pooling: {plan['whitening']['dim']} -> {plan['whitening']['k']} dimensions"
           + (", L2-normalised" if plan["whitening"]["normalize"] else "") + " (module `st_module.CselabWhitening`)"]
          if plan.get("whitening") else []),
        "",
        "## Format", "",
        ("Custom module `st_module.CselabEmbedding` (the cselab.model code shipped in this folder; loading needs "
         f"`trust_remote_code=True`), because plain sentence-transformers modules cannot express "
         f"{plan.get('st_module_reason') or 'the BERT-whitening transform (st_module.CselabWhitening)'}."
         if trust_remote_code else
         "Plain sentence-transformers modules (`Transformer` + `Pooling`"
         + (" + `Dense` with `Tanh`" if plan.get("use_head") or plan.get("pooler") == "cls" else "")
         + "): no custom code, `trust_remote_code` is not needed."),
        "",
        "## Export check", "",
        ("Not checked at export (`--no-verify`)." if not check else
         f"`SentenceTransformer(folder).encode` and `cselab.load(checkpoint).encode` were compared at export on "
         f"{check['sentences']} probe sentences, each encoded alone (batches of {check['batch_size']}: the same "
         f"inputs both ways, no padding), float32 on the CPU: largest absolute difference "
         f"{check['max_abs_diff']:.3g}, {'within' if check['passed'] else 'ABOVE'} the tolerance "
         f"{check['tolerance']:g}."), "",
    ]
    chosen = [(k, config_value(config, k)) for k in CONFIG_KEYS]
    if not config and hparams:  # no results.json: the checkpoint's own hyper-parameters
        chosen = [(f"module.{k}", config_value(hparams, k)) for k in HPARAM_KEYS]
    chosen = [(k, v) for k, v in chosen if v is not None]
    if chosen:
        table = Table([Column("key", format=lambda k: f"`{k}`"),
                       Column("value", format=lambda v: f"`{v if isinstance(v, str) else json.dumps(v)}`")], chosen)
        lines += ["## Configuration", "", *markdown(table), "",
                  "The whole resolved config is in the run's `results.json` (`config`) and `.hydra/`.", ""]
    lines += ["## Evaluation: SentEval STS (Spearman x 100)", ""]
    test = (results or {}).get("test") or {}
    if test:
        rows = load_published() if published is None else published
        paper = lookup(rows, method, backbone_name, setting, variant_of(saved)) if backbone_name and setting \
            else None
        lines += [sts_table(test, paper), ""]
        if paper is None:
            lines += [f"No published row for (`{method}`, `{backbone_name}`, `{setting}`, variant "
                      f"`{variant_of(saved)}`) in cselab's `published.yaml`.", ""]
        dev = ((results or {}).get("dev") or {}).get("stsb")
        lines += ["Cosine similarity, SentEval's protocol (STS12-16 \"all\", STS-B and SICK-R test); model "
                  "selection on STS-B dev" + (f" ({float(dev):.2f})" if dev is not None else "") + ".", ""]
    else:
        lines += ["No `results.json` was found beside the checkpoint: no scores here.", ""]
    lines += [
        "## Usage", "", "```python", "from sentence_transformers import SentenceTransformer", "",
        f"model = {load}", 'embeddings = model.encode(["A man is playing a guitar.", "Someone plays an instrument."])',
        "```", "",
        "With cselab: `cselab.load(CHECKPOINT).encode(sentences)`; on MTEB: "
        "`python -m cselab mteb CHECKPOINT --tasks STSBenchmark`.", "",
    ]
    return "\n".join(lines)


def write_card(folder: Path, method, plan: dict[str, Any], origin: str | None,
               results_path: Path | None = None, repo_id: str | None = None,
               check: Mapping[str, Any] | None = None) -> None:
    """Write into an exported ``folder`` the model card ``README.md`` (:func:`model_card`: method, backbone,
    config, the STS table beside the paper's row, the export check) and ``cselab_export.json`` (what was exported,
    from where, what was checked; ``plan`` = :func:`cselab.export.describe`, ``check`` =
    :func:`cselab.export.check_folder` or None before / without it).  Each file is replaced atomically."""
    import cselab
    from cselab.io.files import atomic_write_text

    info = {"cselab_version": cselab.__version__, "checkpoint": origin,
            "method_class": f"{type(method).__module__}.{type(method).__qualname__}",
            "backbone": dict(method.hparams.get("backbone", {})), "plan": plan,
            "results": str(results_path) if results_path else None, "check": dict(check) if check else None}
    atomic_write_text(folder / "cselab_export.json", json.dumps(info, indent=2, default=str))
    results = json.loads(results_path.read_text(encoding="utf-8")) if results_path is not None else None
    remote = plan.get("st_module_reason") is not None or bool(plan.get("whitening"))
    card = model_card(method_class=type(method).__name__, backbone=dict(method.hparams.get("backbone", {})),
                      plan=plan, trust_remote_code=remote, results=results, repo_id=repo_id,
                      hparams=dict(method.hparams), check=check)
    atomic_write_text(folder / "README.md", card)
