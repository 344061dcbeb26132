"""The one home of the rules over a method's arguments (each rule written once).

:func:`check_method_args` runs on the config's ``module`` node before anything loads
(:func:`cselab.pipeline.validate`) and on the arguments of every method built in Python
(:class:`cselab.methods.base.ContrastiveMethod`); the messages name the config keys.
"""

from __future__ import annotations

from typing import Any

from cselab.methods.nonfinite import POLICIES
from cselab.model.pooling import POOLERS
from cselab.model.template_bias import DENOISE_MODES

NEGATIVES = ("global", "per_device")
TUNINGS = ("full", "frozen", "prefix", "soft_prompt", "lora")
#: poolers a decoder LLM supports (``backbone.family=decoder``): the prompt's last token, or the mean baseline
DECODER_POOLERS = ("last_token", "avg")


class ConfigError(ValueError):
    """A config value or combination that cannot run; the message names the keys."""


def check_method_args(*, pooler: str = "cls", setting: str = "unsup", prompt: dict | None = None,
                      denoise: str = "none", head_on: str = "difference", denoise_at_eval: bool = False,
                      denoise_positions: str = "official", dev_encoder: dict | None = None,
                      eval_precision: str = "auto", negatives: str = "global", on_nonfinite: str = "stop",
                      tuning: dict | None = None, backbone: dict | None = None, **_: Any) -> None:
    """Refuse a method argument out of its range, or a combination that cannot work.

    Args: the :class:`~cselab.methods.base.ContrastiveMethod` arguments (others are ignored).  ``pooler`` may also
    be an analysis representation of ``method=baseline`` (``static_avg``, ``static_avg_debiased``, ``topk``).
    ``backbone`` (``{"family": ...}``): a decoder family gets :func:`check_decoder_args` too.

    Raises:
        ConfigError: names the key(s) and what was expected.
    """
    from cselab.methods.baseline import ANALYSIS_POOLERS

    if pooler not in (*POOLERS, *ANALYSIS_POOLERS):
        raise ConfigError(f"method.pooler={pooler!r}: expected one of {POOLERS + ANALYSIS_POOLERS}")
    if setting not in ("unsup", "sup"):
        raise ConfigError(f"setting.name={setting!r}: expected 'unsup' or 'sup'")
    if pooler in ("mask", "topk") and not prompt:
        raise ConfigError(f"method.pooler={pooler} needs a template (a [MASK] representation) but prompt=none "
                          "(choose a prompt: prompt=promptbert ...)")
    if denoise not in DENOISE_MODES:
        raise ConfigError(f"method.denoise={denoise!r}: expected none, position or pad")
    if denoise != "none" and not prompt:
        raise ConfigError(f"method.denoise={denoise} needs a template but prompt=none (choose a prompt or set method.denoise=none)")
    if head_on not in ("difference", "each"):
        raise ConfigError(f"method.head_on={head_on!r}: expected 'difference' or 'each'")
    if denoise_at_eval and denoise == "none":
        raise ConfigError("method.denoise_at_eval=true needs method.denoise=position or pad")
    if denoise_positions not in ("official", "aligned"):
        raise ConfigError(f"denoise_positions={denoise_positions!r}: expected 'official' or 'aligned'")
    if dev_encoder and set(dev_encoder) - {"add_period", "denoise"}:
        raise ConfigError(f"method.dev_encoder={dev_encoder}: expected keys add_period, denoise")
    if str(eval_precision) not in ("auto", "32", "bf16"):
        raise ConfigError(f"eval.precision={eval_precision!r}: expected auto, 32 or bf16")
    if negatives not in NEGATIVES:
        raise ConfigError(f"negatives={negatives!r}: expected 'global' or 'per_device'")
    if on_nonfinite not in POLICIES:
        raise ConfigError(f"method.on_nonfinite={on_nonfinite!r}: expected 'stop' or 'skip'")
    tuning = tuning or {"name": "full"}
    name = tuning.get("name", "full")
    if name not in TUNINGS:
        raise ConfigError(f"tuning.name={name!r}: expected one of {TUNINGS}")
    family = (backbone or {}).get("family")
    if family == "decoder":
        check_decoder_args(pooler=pooler, denoise=denoise, tuning=tuning, **_)
    elif name == "lora":
        raise ConfigError(f"tuning=lora is the decoder LLMs' tuning (PromptEOL's QLoRA recipe); backbone.family={family} "
                          "uses tuning=full | frozen | prefix | soft_prompt")
    if name == "lora" and (int(tuning.get("r", 64)) < 1 or float(tuning.get("dropout", 0.05)) < 0):
        raise ConfigError(f"tuning.r must be >= 1 and tuning.dropout >= 0, got r={tuning.get('r')}, "
                          f"dropout={tuning.get('dropout')}")
    if name == "soft_prompt" and denoise != "none":
        raise ConfigError("tuning=soft_prompt with denoise is not supported: set method.denoise=none")
    if name == "prefix" and int(tuning.get("pre_seq_len", 16)) < 1:
        raise ConfigError(f"tuning.pre_seq_len must be >= 1, got {tuning.get('pre_seq_len')}")


def check_decoder_args(*, pooler: str, denoise: str, tuning: dict, head: str = "none", mlm: dict | None = None,
                       **_: Any) -> None:
    """The rules of a decoder LLM backbone (``backbone.family=decoder``), each refusal naming why.

    Raises:
        ConfigError: a [MASK] / [CLS] pooler (a causal LM has no mask token to fill, and its first token sees
            only itself: ``method.pooler=last_token`` or ``avg``); template denoising (PromptBERT's bias is the
            [MASK] state of the template alone, with the sentence's position ids: a decoder prompt has no [MASK],
            and the last token's state of a template without its sentence is not defined by PromptEOL / PretCoT);
            ``tuning=prefix`` / ``soft_prompt`` (DCPCSE / PromCSE / SCPCSE prompts are built for BERT / RoBERTa
            here; decoders take ``tuning=lora | full | frozen``); the MLM auxiliary loss (no MLM head).
    """
    if pooler not in DECODER_POOLERS:
        hint = (" CoT-BERT's two-stage templates are [MASK] templates; their decoder counterpart is Pretended CoT "
                "(method=prompteol prompt=pretcot)" if pooler == "mask" else "")
        raise ConfigError(f"method.pooler={pooler} on backbone.family=decoder: a decoder LLM is read at the prompt's "
                          f"last token (method.pooler=last_token) or averaged (avg).{hint}")
    if denoise != "none":
        raise ConfigError(f"method.denoise={denoise} on backbone.family=decoder: template denoising subtracts the "
                          "[MASK] state of the template alone (PromptBERT Eq. 4); a decoder prompt has no [MASK] and "
                          "neither PromptEOL nor PretCoT/KE defines a template bias. Set method.denoise=none")
    name = tuning.get("name", "full")
    if name in ("prefix", "soft_prompt"):
        raise ConfigError(f"tuning={name} on backbone.family=decoder: the continuous prompts are implemented for "
                          "BERT/RoBERTa encoders (DCPCSE, PromCSE, SCPCSE); use tuning=lora, full or frozen")
    if mlm:
        raise ConfigError("method.mlm on backbone.family=decoder: a decoder LLM has no masked-LM head")
