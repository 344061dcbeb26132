"""The one home of the rules over a method: its model is checked by its spec
(:class:`cselab.model.spec.EmbeddingSpec`, built here), its training arguments and what the method class
declares (``tunings``, ``settings``, ``families``) by :func:`check_method`.  It runs on the config's ``module``
node before anything loads (:func:`check_module`, from :meth:`cselab.run.spec.RunSpec.from_config`) and in every method's
constructor; the messages name the config keys.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from cselab.methods.options import build_options, legacy_keys
from cselab.model.spec import ConfigError, EmbeddingSpec

__all__ = ["NEGATIVES", "check_method", "check_module", "check_training", "embedding_spec",
           "fold_options", "split_legacy"]

log = logging.getLogger(__name__)

NEGATIVES = ("global", "per_device")
#: AdamW and its linear schedule (``optim``): the official implementations' (no warm-up, no weight decay)
OPTIM_DEFAULTS = {"lr": 3e-5, "weight_decay": 0.0, "warmup_ratio": 0.0, "warmup_steps": 0, "fused": "auto",
                  "adamw": "transformers"}
#: ``optim.adamw`` values: the update of transformers 4.2.1's AdamW (the official code's,
#: :class:`cselab.methods.optim.TransformersAdamW`) or torch's
ADAMW_UPDATES = ("transformers", "torch")
#: ``optim.fused`` values: ``auto`` = the fused AdamW kernel wherever the parameters' device has one (CUDA, CPU)
FUSED_CHOICES = ("auto", True, False)
#: learning rates above this are outside what any of the papers' configs use (largest: 3e-2, soft prompts)
PLAUSIBLE_MAX_LR = 0.1
#: the flat ``module`` keys of cselab before the embedding spec: now ``module.model.<key>`` ...
LEGACY_MODEL_KEYS = ("pooler", "head", "mlp_only_train", "head_on", "denoise_at_eval", "head_init", "dev_encoder",
                     "denoise_positions", "prompt", "denoise", "max_seq_len", "eval_max_seq_len", "eval_batch_size",
                     "eval_precision", "tuning")
#: ... and ``module.optim.<key>``
LEGACY_OPTIM_KEYS = ("lr", "weight_decay", "warmup_ratio", "warmup_steps")
#: command-line spellings of the old layout -> the new key (run.py, :func:`cselab.io.config.moved_key_error`)
MOVED_MODULE_KEYS = {**{f"module.{k}": f"module.model.{k}" for k in LEGACY_MODEL_KEYS},
                     **{f"module.{k}": f"module.optim.{k}" for k in LEGACY_OPTIM_KEYS}}


def backbone_family_of(backbone: Mapping[str, Any]) -> str:
    """``backbone.family``, or the family read from the backbone's config (:func:`backbone_family`)."""
    from cselab.model.loading import backbone_family

    return backbone.get("family") or backbone_family(backbone["name_or_path"])


def embedding_spec(method_cls: type, backbone: Mapping[str, Any], model: Mapping[str, Any], *, setting: str,
                   mlm: Mapping[str, Any] | None = None) -> EmbeddingSpec:
    """The :class:`EmbeddingSpec` of a method: the ``module.model`` node, the views the class derives from the
    prompt (``method_cls.view_specs``), the backbone's family and decoding option, the MLM masking rate.

    Raises:
        ConfigError: what the spec refuses (names the key); a view the prompt does not define.
    """
    from cselab.methods.mlm import MLMOptions  # (torch: a mistyped key is refused before it loads)

    family = backbone_family_of(backbone)
    if family == "decoder":  # before the views: a [MASK] prompt has no decoder form, and the reason is the pooler
        EmbeddingSpec.check_decoder(model.get("pooler") or "cls", model.get("denoise") or "none",
                                    (model.get("tuning") or {}).get("name", "full"))
    try:
        train_views, eval_view = method_cls.view_specs(model.get("prompt"), setting, family)
    except KeyError as err:
        message = err.args[0] if err.args else str(err)
        if not model.get("prompt"):
            message = (f"method={getattr(method_cls, 'method_name', method_cls.__name__)} with "
                       f"method.pooler={model.get('pooler')} needs a template (a [MASK] representation) but "
                       f"prompt=none (choose a prompt: prompt=promptbert ...); {message}")
        raise ConfigError(message) from err
    return EmbeddingSpec.from_config(model, family=family, train_views=train_views, eval_view=eval_view,
                                     mlm_probability=build_options(MLMOptions, mlm).probability if mlm else 0.0,
                                     decode_cleanup=backbone.get("decode_cleanup"))


def check_method(method_cls: type, *, family: str, tuning: str, setting: str, train: bool, negatives: str,
                 on_nonfinite: str, mlm: Mapping[str, Any] | None, backbone: Mapping[str, Any]) -> None:
    """Refuse a training argument out of its range, or what the method class does not take.

    ``method_cls`` declares ``method_name`` (its ``method=`` name), ``settings`` (``unsup`` / ``sup``), ``tunings``
    (what may train, checked when ``train``) and ``families`` (the backbone families it runs on, None: any).
    ``family`` is the backbone's, ``tuning`` the ``tuning.name``.

    Raises:
        ConfigError: names the key(s) and what was expected.
    """
    from cselab.methods.nonfinite import POLICIES  # (Lightning: a mistyped key is refused before it loads)

    name = getattr(method_cls, "method_name", method_cls.__name__)
    if setting not in ("unsup", "sup"):
        raise ConfigError(f"setting.name={setting!r}: expected 'unsup' or 'sup'")
    if setting not in method_cls.settings:
        raise ConfigError(f"method={name} is {'unsupervised' if 'unsup' in method_cls.settings else 'supervised'} only "
                          f"(setting={setting} is not the paper's); use setting={method_cls.settings[0]}")
    families = method_cls.families
    if families is not None and family not in families:
        got = f"got backbone {backbone.get('name_or_path')!r} of family {family}"
        if "decoder" in families:
            raise ConfigError(f"method={name} needs a decoder LLM (backbone.family={'|'.join(families)}), {got}: "
                              "e.g. backbone=opt_1_3b, or offline backbone=tiny_opt (make tiny-decoders)")
        raise ConfigError(f"method={name} runs on BERT / RoBERTa-like encoders (backbone.family={'|'.join(families)}), "
                          f"{got}: e.g. backbone=bert_base, or offline backbone=minilm_l6")
    if train and tuning not in method_cls.tunings:
        raise ConfigError(f"tuning={tuning} conflicts with method={name}, which trains {list(method_cls.tunings)}; "
                          f"choose tuning={method_cls.tunings[0]} or another method")
    if negatives not in NEGATIVES:
        raise ConfigError(f"negatives={negatives!r}: expected 'global' or 'per_device'")
    if on_nonfinite not in POLICIES:
        raise ConfigError(f"method.on_nonfinite={on_nonfinite!r}: expected 'stop' or 'skip'")
    if mlm and family == "decoder":
        raise ConfigError("method.mlm on backbone.family=decoder: a decoder LLM has no masked-LM head")


def check_loss_name(loss: Mapping[str, Any]) -> None:
    """``loss.name``, when it is a known loss's name (:func:`cselab.methods.losses.loss_classes`), names the loss
    that ``loss._target_`` builds: the loss is built from ``_target_`` (:func:`cselab.methods.losses.build_loss`),
    so ``loss.name=cot_infonce`` on InfoNCE's node would train InfoNCE under CoT-BERT's loss's name.  Any other
    name is a label (a loss of one's own given by ``_target_``).

    Raises:
        ConfigError: the name is another loss's (names ``loss=<name>``, the config group that chooses a loss).
    """
    name, target = loss.get("name"), loss.get("_target_")
    if name is None or target is None:
        return
    from hydra.utils import get_class

    from cselab.methods.losses import loss_classes

    known = loss_classes()
    if name not in known:
        return
    try:
        built = get_class(str(target))
    except Exception:  # noqa: BLE001 -- build_loss names an unimportable _target_
        return
    if getattr(known[name], "func", known[name]) is built:  # a functools.partial: its class
        return
    own = sorted(n for n, cls in known.items() if getattr(cls, "func", cls) is built)
    raise ConfigError(f"loss.name={name!r} is not the loss that loss._target_={target} builds "
                      f"({' / '.join(own) or 'a loss of its own'}): to train {name}, choose it with the config "
                      f"group, loss={name} (conf/loss/{name}.yaml), not with loss.name alone")


def check_training(loss: Mapping[str, Any] | None, optim: Mapping[str, Any] | None, train: bool) -> None:
    """The loss's and the optimiser's values (``module.loss``, ``module.optim``; None: not given, nothing to
    check): ``loss.temperature > 0``; when ``train``, ``optim.lr`` a number > 0 (a warning above
    :data:`PLAUSIBLE_MAX_LR`), ``optim.weight_decay >= 0``, ``0 <= optim.warmup_ratio < 1``,
    ``optim.warmup_steps >= 0``, ``optim.fused`` one of :data:`FUSED_CHOICES`, ``optim.adamw`` one of
    :data:`ADAMW_UPDATES`.

    Raises:
        ConfigError: names the key, the value and what was expected.
    """
    if loss is not None and "temperature" in loss and loss["temperature"] <= 0:
        raise ConfigError(f"loss.temperature must be > 0, got {loss['temperature']}")
    if loss is not None:
        check_loss_name(loss)
    if not train or optim is None:
        return
    checks = (("lr", lambda v: v > 0, "a number > 0 (the papers use 1e-5 .. 3e-2)"),
              ("weight_decay", lambda v: v >= 0, "a number >= 0"),
              ("warmup_ratio", lambda v: 0 <= v < 1, "a fraction of the training steps in [0, 1)"),
              ("warmup_steps", lambda v: v >= 0, "a number of steps >= 0 (0: optim.warmup_ratio decides)"))
    for key, ok, expected in checks:
        value = optim[key] if key in optim else (OPTIM_DEFAULTS[key] if key != "lr" else None)
        if isinstance(value, bool) or not isinstance(value, int | float) or value != value or not ok(value):
            raise ConfigError(f"optim.{key}={value!r}: expected {expected}")
    fused = optim["fused"] if "fused" in optim else OPTIM_DEFAULTS["fused"]
    if fused not in FUSED_CHOICES:  # the method's own values (cselab.methods.optim.fused_adamw)
        raise ConfigError(f"optim.fused={fused!r}: expected auto, true or false")
    update = optim["adamw"] if "adamw" in optim else OPTIM_DEFAULTS["adamw"]
    if update not in ADAMW_UPDATES:
        raise ConfigError(f"optim.adamw={update!r}: expected one of {', '.join(ADAMW_UPDATES)} (transformers: the "
                          "official code's AdamW update)")
    if optim["lr"] > PLAUSIBLE_MAX_LR:
        log.warning("optim.lr=%g is far above the papers' learning rates (1e-5 for full fine-tuning .. 3e-2 for "
                    "soft prompts): training will probably diverge; check the value", optim["lr"])


def split_legacy(node: Mapping[str, Any]) -> dict[str, Any]:
    """The method arguments of cselab before the embedding spec (flat: ``pooler``, ``lr`` ... beside ``backbone``)
    in today's layout: the embedding settings under ``model``, ``lr`` / ``weight_decay`` / ``warmup_*`` under
    ``optim`` (checkpoints written before the spec, :func:`cselab.load`).  A node without flat keys is returned
    as it is."""
    node = dict(node)
    if "model" in node or not any(k in node for k in (*LEGACY_MODEL_KEYS, *LEGACY_OPTIM_KEYS)):
        return node
    model = {k: node.pop(k) for k in LEGACY_MODEL_KEYS if k in node}
    optim = {k: node.pop(k) for k in LEGACY_OPTIM_KEYS if k in node}
    return {**node, "model": model, "optim": optim}


def fold_options(target: Any, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """The constructor arguments of cselab before the typed options in today's: a method's options given as
    arguments of their own -- ``esimcse={...}``, ``rtd={...}`` (the ``node`` of its ``options_type``), or
    RankCSE's ``teachers`` / ``teacher_temperature`` and the baseline's ``topk`` / ``topk_denoise`` (the fields of
    an ``options_type`` read from ``method`` itself) -- moved into ``options``.  The hyper-parameters of a
    checkpoint written before (:func:`cselab.load`); arguments that already have ``options`` are returned as
    they are.  ``target``: the method class, or its factory (``build_baseline``)."""
    arguments = dict(arguments)
    options_type = getattr(target, "options_type", None)
    if options_type is None or "options" in arguments:
        return arguments
    keys = legacy_keys(options_type)
    if options_type.node:
        if keys[0] in arguments:
            arguments["options"] = arguments.pop(keys[0])
    elif any(k in arguments for k in keys):
        arguments["options"] = {k: arguments.pop(k) for k in keys if k in arguments}
    return arguments


def refuse_legacy(node: Mapping[str, Any]) -> None:
    """Refuse the flat spelling of the ``module`` node (before the spec), naming the new key.

    Raises:
        ConfigError: ``module.<key>`` of an embedding setting (now ``module.model.<key>``) or of the optimizer
            (now ``module.optim.<key>``).
    """
    for key in node:
        if key in LEGACY_MODEL_KEYS:
            raise ConfigError(f"module.{key}: the embedding settings moved to module.model (module.model.{key}); "
                              "see docs/configuration.md")
        if key in LEGACY_OPTIM_KEYS:
            raise ConfigError(f"module.{key}: the optimizer's settings moved to module.optim (module.optim.{key})")


def check_module(target: Any, node: Mapping[str, Any]) -> None:
    """The config-time check of the run's ``module`` node (no weights load): the legacy spelling refused, then the
    target's own ``check_config`` (a method class, or :func:`cselab.methods.baseline.method.build_baseline`).

    Raises:
        ConfigError: names the key and what was expected.
    """
    refuse_legacy(node)
    check = getattr(target, "check_config", None)
    if check is None:
        raise ConfigError(f"method._target_={target!r} has no check_config: expected a ContrastiveMethod class or "
                          "cselab.methods.baseline.method.build_baseline")
    check(**node)
