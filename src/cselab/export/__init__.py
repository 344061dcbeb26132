"""Export a trained cselab method to a sentence-transformers folder.

    python -m cselab export outputs/.../checkpoints/best-step500.ckpt exported/promptbert-unsup
    python -m cselab export CHECKPOINT OUT_DIR --push-to-hub me/promptbert-unsup   # + upload (token, network)

    from sentence_transformers import SentenceTransformer
    model = SentenceTransformer("exported/simcse-unsup")                       # plain modules: no remote code
    model = SentenceTransformer("exported/promptbert-unsup", trust_remote_code=True)   # a template: st_module
    model.encode(["a man is playing a guitar"])    # == cselab.load(ckpt).encode([...]) (float32, CPU)

Two kinds of folder, chosen by :func:`plain_reason` (:mod:`cselab.export.plain`):

* **plain sentence-transformers modules** whenever the test encoder is expressible that way (an encoder
  backbone, fully fine-tuned or frozen, no template, no template denoising, the pooler
  ``cls_before_pooler`` / ``avg`` / ``cls`` (BERT's pooler layer), at most SimCSE's MLP head (``Linear`` +
  ``Tanh``, SimCSE ``simcse/models.py:19-32`` ``MLPLayer``)): ``Transformer`` (``max_seq_length`` = the test
  encoder's truncation, the tokenizer's own lower-casing) + ``Pooling`` (``cls`` / ``mean``) + ``Dense``
  (``Tanh``) for the head or the pooler layer.  ``SentenceTransformer(folder)`` loads it with no remote code;
* otherwise the method's :class:`cselab.model.embedding.EmbeddingModel` as it saves itself
  (``cselab_model.json``, ``cselab_model.safetensors``, ``backbone/`` config and tokenizer), the files of the
  ``cselab.model`` package themselves (the runtime code, relative imports only: no cselab install needed) and
  ``modules.json`` naming one module, ``st_module.CselabEmbedding``: templates ([MASK] states, the period rule,
  whole-string tokenization, template-bias subtraction), prefixes and soft prompts, decoder LLMs (LoRA merged
  or not), other poolers and BERT's MLM-transform head.  Sentence-transformers' own prompts only prepend a
  string to the sentence and pool every token or [CLS]; no cselab template is that (each has text after
  ``[X]`` or a ``[MASK]`` representation), so templates always ship ``st_module``.  Code shipped with a model
  loads only with ``trust_remote_code=True`` (sentence-transformers >= 6).

A model with a fitted BERT-whitening transform (``eval.whitening``, :mod:`cselab.model.whitening`) gets it as one
more module after pooling, ``st_module.CselabWhitening`` (its own ``config.json`` and ``whitening.safetensors``), and
the folder then ships the code files and loads with ``trust_remote_code=True``.

Either way the export checks the folder (:func:`check_folder`): the probe sentences encoded both ways, like with
like -- each sentence alone (a batch of one: no padding either way, so that a whitening kernel's large singular
values do not amplify the rounding of two different paddings into a false failure) -- and the largest absolute
difference against :data:`TOLERANCE`.  The model card says which kind the folder is, why, and what was checked.

Refused (:class:`ExportError`, nothing written): the analysis representations of ``method=baseline``
(``static_avg``, ``static_avg_debiased``, ``topk``: not the embedding model's forward) and an output folder that
exists and is not empty (unless ``overwrite``).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cselab.export.plain import plain_modules, plain_reason
from cselab.io.files import umask

#: sentences :func:`export` encodes both ways to check the folder
PROBE_SENTENCES: tuple[str, ...] = (
    "a man is playing a guitar", "The cat sat on the mat.", "two dogs are running in the park?",
    'he said "it is raining"', "birds fly",
    "a woman is slicing an onion while the sun is shining over the little house by the river")
#: the export check's bound on the largest absolute difference of the two encodings (float32, CPU)
TOLERANCE = 1e-5
#: the module sentence-transformers loads from the folder (``st_module.py`` of ``cselab.model``)
MODULE_TYPE = "st_module.CselabEmbedding"
#: BERT-whitening after pooling (``st_module.CselabWhitening``), the last module of a whitened model's folder
WHITENING_TYPE = "st_module.CselabWhitening"
#: files of ``cselab.model`` not shipped (building from a backbone name: loading by hub id / package)
NOT_SHIPPED = ("__init__.py", "loading.py", "factory.py")


class ExportError(ValueError):
    """The method cannot be exported (see the module docstring), or the output folder is not empty."""


def describe(method) -> dict[str, Any]:
    """What the exported model does (:meth:`EmbeddingModel.describe`, for the model card and the CLI), or
    :class:`ExportError` for a representation that is not the embedding model's forward."""
    info = method.describe()
    if info.get("representation") == "token":
        raise ExportError(
            f"method=baseline method.pooler={info['pooler']} is computed by cselab.analysis (static token embeddings "
            "or the MLM head's top-k tokens), not by the embedding model's forward: it cannot be exported to "
            "sentence-transformers; export a pooler (avg, cls, mask, ...) instead")
    return info


def _apply_umask(folder: Path) -> None:
    """Give every file and folder under ``folder`` the process umask's mode (0666 / 0777 filtered): the writers
    sentence-transformers and transformers call create some files through ``mkstemp`` (``model.safetensors``
    came out 0600, unreadable to the group that the folder itself is shared with)."""
    mask = umask()
    for path in folder.rglob("*"):
        if not path.is_symlink():
            path.chmod((0o777 if path.is_dir() else 0o666) & ~mask)


def check_folder(folder: Path, method, sentences: Sequence[str], trust_remote_code: bool) -> dict[str, Any]:
    """The export check: ``sentences`` encoded by ``SentenceTransformer(folder)`` and by ``method.encode``, each
    sentence alone (batches of one on both sides: the same inputs, no padding), float32 on the CPU.

    Returns:
        ``{"sentences": N, "batch_size": 1, "max_abs_diff": float, "tolerance": TOLERANCE, "passed": bool}``.
    """
    from sentence_transformers import SentenceTransformer

    sentences = list(sentences)
    loaded = SentenceTransformer(str(folder), device="cpu", trust_remote_code=trust_remote_code)
    theirs = loaded.encode(sentences, convert_to_tensor=True, batch_size=1, show_progress_bar=False).float().cpu()
    ours = method.encode(sentences, batch_size=1)
    diff = float((theirs - ours).abs().max())
    return {"sentences": len(sentences), "batch_size": 1, "max_abs_diff": diff, "tolerance": TOLERANCE,
            "passed": diff <= TOLERANCE}


def model_code_files() -> list[Path]:
    """The ``cselab.model`` files an exported folder holds (the runtime code of the embedding model)."""
    import cselab.model

    folder = Path(cselab.model.__file__).parent
    return sorted(p for p in folder.glob("*.py") if p.name not in NOT_SHIPPED)


def export(source, out_dir: str | os.PathLike, *, overwrite: bool = False, verify: Sequence[str] | bool = True,
           results: str | os.PathLike | None = None, repo_id: str | None = None,
           merge_lora: bool = False) -> dict[str, Any]:
    """Write a sentence-transformers folder that embeds like ``cselab.load(source).encode``: plain modules when
    :func:`plain_reason` allows, else ``st_module`` (module docstring).

    Args:
        source: a cselab checkpoint path (``cselab.load`` rebuilds the method) or a method object (any device;
            its weights are copied to CPU).
        out_dir: the folder to write (created; must be absent or empty unless ``overwrite``).
        overwrite: replace an existing non-empty folder.
        verify: sentences to encode both ways after writing (``True``: :data:`PROBE_SENTENCES`; ``False``:
            skip): :func:`check_folder`, its result returned and written into the model card.
        results: the run's ``results.json`` for the model card (default: the one of the checkpoint's run).
        repo_id: the Hub id the card's loading snippet names (``--push-to-hub``).
        merge_lora: ``tuning=lora``: ship the backbone with the adapters folded into its weights (a copy of the
            model is merged; ``source`` is untouched), else the adapters as they are (PEFT needed to load).

    Returns:
        :func:`describe`'s plan plus ``"st_module_reason"`` (:func:`plain_reason`: None for plain modules),
        ``"path"``, ``"modules"`` (the ``modules.json`` types), ``"trust_remote_code"`` (False for plain
        modules), ``"max_abs_diff"`` and ``"check"`` (:func:`check_folder`; None without ``verify``) and
        ``"results"``.

    Raises:
        ExportError: the method cannot be exported (module docstring), ``out_dir`` is not empty, or
            ``merge_lora`` on a model without LoRA adapters.
        FileNotFoundError: no such checkpoint.
    """
    from sentence_transformers import SentenceTransformer

    from cselab.export.model_card import find_results, write_card
    from cselab.model.st_module import CselabEmbedding, CselabWhitening

    out = Path(out_dir)
    if out.exists() and any(out.iterdir()) and not overwrite:  # refused before the model loads
        raise ExportError(f"{out} exists and is not empty (pass overwrite=True / --overwrite)")
    if isinstance(source, (str, os.PathLike)):
        import cselab

        method, origin = cselab.load(source), str(source)
    else:
        method, origin = source, None
    plan = describe(method)
    if merge_lora and method.model.backbone.tuning != "lora":
        raise ExportError(f"merge_lora: the model has tuning={method.model.backbone.tuning}, not lora")
    was_training, device = method.training, method.device
    method.eval().to("cpu")
    model = method.model
    if merge_lora:
        import copy

        model = copy.deepcopy(model)
        model.merge_lora()
        plan = {**plan, "prompt_kind": "lora (merged)"}
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{out.name}-export-", dir=out.parent))  # same filesystem
        try:
            staging.chmod(0o777 & ~umask())  # mkdtemp makes it 0700: the folder gets the process umask
            reason = plain_reason(model)
            whitening = model.whitening
            after = [CselabWhitening(whitening)] if whitening is not None else []
            model.whitening = None  # its own module after pooling, not inside cselab_model.safetensors
            try:
                if reason is None:  # plain modules: loads with no remote code (unless whitened)
                    with tempfile.TemporaryDirectory(dir=staging) as backbone_dir:  # removed before the rename
                        SentenceTransformer(modules=plain_modules(model, Path(backbone_dir)) + after,
                                            device="cpu").save(str(staging), create_model_card=False)
                else:
                    SentenceTransformer(modules=[CselabEmbedding(model), *after], device="cpu").save(
                        str(staging), create_model_card=False)
            finally:
                model.whitening = whitening
            entries = json.loads((staging / "modules.json").read_text(encoding="utf-8"))
            remote = reason is not None or whitening is not None  # code files shipped: trust_remote_code
            if remote:
                for path in model_code_files():
                    shutil.copyfile(path, staging / path.name)
                if reason is not None:
                    entries[0]["type"] = MODULE_TYPE
                if whitening is not None:
                    entries[-1]["type"] = WHITENING_TYPE
                (staging / "modules.json").write_text(json.dumps(entries, indent=2), encoding="utf-8")
            modules = [e["type"] for e in entries]
            plan = {**plan, "st_module_reason": reason}
            results_path = Path(results) if results is not None else find_results(origin)
            write_card(staging, method, plan, origin, results_path, repo_id)
            _apply_umask(staging)
            if out.exists():  # empty, or overwrite (checked above): replaced only once the new one is complete
                shutil.rmtree(out)
            os.replace(staging, out)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        result = {**plan, "path": str(out), "modules": modules, "trust_remote_code": remote,
                  "max_abs_diff": None, "check": None, "results": str(results_path) if results_path else None}
        if verify:
            check = check_folder(out, method, PROBE_SENTENCES if verify is True else verify, remote)
            result.update(max_abs_diff=check["max_abs_diff"], check=check)
            write_card(out, method, plan, origin, results_path, repo_id, check=check)  # the card says what held
        return result
    finally:
        method.to(device).train(was_training)
