"""The typed declaration of an embedding model: :class:`EmbeddingSpec` (with :class:`TuningSpec` and
:class:`DevEncoder`), every setting written once with its type, default, unit and source, and its rules checked
in one place (``__post_init__``).  ``to_dict`` / ``from_dict`` are ``cselab_model.json`` of a saved or exported
model; :meth:`EmbeddingSpec.from_config` reads the run's ``module.model`` node (``conf/config.yaml``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

from .heads import HEAD_INITS, HEADS
from .pooling import POOLERS
from .prefix import check_prefix
from .template import period_rule
from .template_bias import DENOISE_MODES
from .template_input import TRAIN_TOKENIZATIONS, ViewSpec


class ConfigError(ValueError):
    """A config value or combination that cannot run; the message names the keys and what was expected."""


TUNINGS = ("full", "frozen", "prefix", "soft_prompt", "lora")
#: poolers a decoder LLM supports (``family=decoder``): the prompt's last token, or the mean baseline
DECODER_POOLERS = ("last_token", "avg")
PRECISIONS = ("auto", "32", "bf16")
FAMILIES = ("bert", "roberta", "decoder")
#: a saved spec's format (``cselab_model.json``); files without the key are the flat format written before
SPEC_VERSION = 2


def _choice(key: str, value: Any, allowed: Sequence[Any]) -> None:
    if value not in allowed:
        names = [str(a) for a in allowed]
        raise ConfigError(f"{key}={value!r}: expected {', '.join(names[:-1])} or {names[-1]}")


def _known(node: Mapping[str, Any], cls: type, key: str, ignore: tuple[str, ...] = ()) -> dict[str, Any]:
    """``node`` without ``ignore`` keys; ConfigError names a key the dataclass ``cls`` does not have."""
    names = {f.name for f in fields(cls)}
    out = {k: v for k, v in dict(node).items() if k not in ignore}
    unknown = sorted(set(out) - names)
    if unknown:
        raise ConfigError(f"{key}: unknown key(s) {unknown}; expected some of {sorted(names)}")
    return out


@dataclass(frozen=True)
class TuningSpec:
    """What trains, and the prompt module added to the untouched backbone (``conf/tuning/*.yaml``).

    Attributes:
        name: ``full`` (fine-tune everything) | ``frozen`` (only the heads) | ``prefix`` (P-tuning v2 deep
            prompts: DCPCSE, PromCSE) | ``soft_prompt`` (the template's tokens as vectors: SCPCSE, OptiPrompt) |
            ``lora`` (PEFT LoRA on a decoder: PromptEOL's recipe).
        pre_seq_len: prefix length P in tokens (``prefix``; DCPCSE ``run_unsup_example.sh``, the paper's P per
            backbone set by the methods).
        variant: ``deep`` | ``layer_shared`` | ``input_layer`` (``prefix``; PromCSE Table 3).
        prefix_positions: ``shifted`` (real tokens start after the prefix, as the official code) | ``unshifted``.
        prefix_projection, prefix_hidden_size: the Linear-Tanh-Linear reparameterisation (P-tuning v2) and its
            width (512).
        dropout: on the prefix key / values (``prefix``, default 0.1) or LoRA's ``lora_dropout`` (default 0.05,
            kongds/scaling_sentemb ``ft_llm.py:409-431``); None: the name's default (:attr:`dropout_value`).
        r, alpha, target_modules, bias: LoRA's rank (64), ``lora_alpha`` (16), target modules (``all-linear``)
            and bias (``none``) (``train_llm.sh:15-17``).
        merged: the LoRA config folded into the weights by :meth:`EmbeddingModel.merge_lora` (then
            ``name=full``), or None.

    Raises:
        ConfigError: a value out of its range, or ``variant=input_layer`` with unshifted positions (names the
            ``tuning.*`` key; the prefix's values: :func:`cselab.model.prefix.check_prefix`).
    """

    name: str = "full"
    pre_seq_len: int = 16
    variant: str = "deep"
    prefix_positions: str = "shifted"
    prefix_projection: bool = False
    prefix_hidden_size: int = 512
    dropout: float | None = None
    r: int = 64
    alpha: float = 16
    target_modules: str | tuple[str, ...] = "all-linear"
    bias: str = "none"
    merged: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        _choice("tuning.name", self.name, TUNINGS)
        if isinstance(self.target_modules, list):
            object.__setattr__(self, "target_modules", tuple(self.target_modules))
        if self.name == "prefix":  # length, variant, positions and their combination, named by key
            try:
                check_prefix(int(self.pre_seq_len), self.variant, self.prefix_positions)
            except ValueError as err:
                raise ConfigError(str(err)) from None
        if self.name == "lora" and (int(self.r) < 1 or self.dropout_value < 0):
            raise ConfigError(f"tuning.r must be >= 1 and tuning.dropout >= 0, got r={self.r}, "
                              f"dropout={self.dropout}")

    @property
    def dropout_value(self) -> float:
        """``dropout``, or the name's default: 0.05 for ``lora`` (``lora_dropout``), 0.1 otherwise (prefix)."""
        if self.dropout is not None:
            return float(self.dropout)
        return 0.05 if self.name == "lora" else 0.1

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable (``target_modules`` a list when it is one)."""
        out = dataclasses.asdict(self)
        if self.merged is None:
            del out["merged"]
        if isinstance(self.target_modules, tuple):
            out["target_modules"] = list(self.target_modules)
        return out


@dataclass(frozen=True)
class DevEncoder:
    """The official in-training dev encoder (the checkpoint selection), when it differs from the test encoder:
    its period rule and whether it subtracts the template bias (PromptBERT ``train.py``'s ``batcher``,
    docs/fidelity.md).  ``EmbeddingSpec`` keeps ``denoise`` only when the model has a template bias."""

    add_period: bool | str = False
    denoise: bool = False


def _views(value: Any, key: str) -> tuple[tuple[str, str | None], ...]:
    try:
        out = tuple((str(f), None if t is None else str(t)) for f, t in value)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"{key}={value!r}: expected [field, template | null] pairs") from err
    if not out:
        raise ConfigError(f"{key}: a model needs at least one view")
    return out


@dataclass(frozen=True)
class EmbeddingSpec:
    """What an embedding model is: how a sentence becomes a vector, at training and at test.

    The method decides the views (:meth:`cselab.methods.base.ContrastiveMethod.view_specs`); everything else
    is the ``module.model`` node of ``conf/config.yaml`` (read by :meth:`from_config`).

    Attributes:
        family: the backbone family: ``bert`` | ``roberta`` | ``decoder`` (``backbone.family``).
        pooler: the pooler on the backbone output (:data:`cselab.model.pooling.POOLERS`; SimCSE's names;
            ``method.pooler``).  ``cls`` with a head is SimCSE's [CLS] + MLP.
        head: ``mlp`` (Linear + Tanh, SimCSE ``models.py:19-32``) | ``mlm_transform`` (PromptBERT sup BERT) |
            ``mlp_bn`` (DiffCSE's BatchNorm projector, ``diffcse/models.py:35-50``) |
            ``none`` (``method.head``).
        head_init: ``bert`` (normal(0, initializer_range)) | ``pretrained_mlm`` (the checkpoint's
            ``cls.predictions.transform``) | ``pytorch`` (``method.head_init``).
        mlp_only_train: the head is used in training only (SimCSE's ``mlp_only_train``; unsup), else at test too.
        head_on: with a template bias, ``difference`` = head(h - h_hat) or ``each`` = head(h) - head(h_hat)
            (official sup BERT PromptBERT, ``train.py:581-584``).
        train_views, eval_view: ``(field, template | None)`` pairs: the method's training views in loss order,
            and the test view.
        mask_index: which [MASK] of the template is the representation (-1: the last; CoT-BERT) (``prompt``).
        add_period_at_eval: the test encoder appends "." to a sentence that does not end in ``. ? " '``
            (``true`` = ``promptbert``, PromptBERT ``evaluation.py``), or `` .`` to one not ending in a
            punctuation mark (``sncse``, SNCSE ``bert_prediction.py:68``); :func:`cselab.model.template.period_rule`
            (``prompt``).
        pool_layer: the hidden state ``last_token`` reads: -1, or -2 for PretCoT / KE (``prompt.layer``).
        eval_rules: the decoders' official evaluation sentence rules (``prompt.eval_rules``).
        denoise: the template bias subtracted in training: ``none`` | ``position`` (PromptBERT Eq. 4) | ``pad``
            (CoT-BERT) (``method.denoise``).
        denoise_at_eval: subtract it at test too (sup PromptBERT) (``method.denoise_at_eval``).
        denoise_positions: the bias rows' position ids: ``official`` (from 0, Prompt-BERT ``get_delta``) |
            ``aligned`` (the backbone's own numbering) (``denoise_positions``).
        dev_encoder: the official in-training dev encoder, or None (= the test encoder) (``eval.dev_encoder``).
        max_seq_len: sentence tokens kept in training, before the template wraps it (``max_seq_len``; 32).
        train_tokenization: how the training collate cuts and tokenizes: ``promptbert`` (``max_seq_len`` sentence
            tokens, the prefix stripped) | ``sncse`` (``max_seq_len`` counts the whole wrapped input, and the prefix
            is tokenized with the whitespace before ``[X]``: SNCSE ``train_SNCSE.py:447-462``) (``prompt``).
        eval_max_seq_len: truncation at test in tokens, None: none (``eval.max_seq_len``).
        eval_batch_size: sentences per forward pass in ``encode``; None: 256 on a GPU, 128 on CPU.
        eval_precision: ``encode``'s arithmetic: ``auto`` (bf16 autocast on a GPU, fp32 on CPU) | ``32`` | ``bf16``.
        mlm_probability: the share of tokens the training collate masks for the MLM auxiliary loss (0: none;
            ``method.mlm.probability``, DCPCSE 0.15).
        tuning: the prompt module and what trains (:class:`TuningSpec`).
        decode_cleanup: a decoder's training-truncation decode option (``backbone.decode_cleanup``).
        has_pooler_layer: the backbone has BERT's pooler layer (recorded by ``save``; exports without it).

    Raises:
        ConfigError: a value out of its range or a combination that cannot work (names the config key).
    """

    family: str = "bert"
    pooler: str = "cls"
    head: str = "mlp"
    head_init: str = "bert"
    mlp_only_train: bool = True
    head_on: str = "difference"
    train_views: tuple[tuple[str, str | None], ...] = (("text", None), ("text", None))
    eval_view: tuple[str, str | None] = ("text", None)
    mask_index: int = -1
    add_period_at_eval: bool | str = False
    pool_layer: int = -1
    eval_rules: bool = False
    denoise: str = "none"
    denoise_at_eval: bool = False
    denoise_positions: str = "official"
    dev_encoder: DevEncoder | None = None
    max_seq_len: int = 32
    train_tokenization: str = "promptbert"
    eval_max_seq_len: int | None = None
    eval_batch_size: int | None = None
    eval_precision: str = "auto"
    mlm_probability: float = 0.0
    tuning: TuningSpec = field(default_factory=TuningSpec)
    decode_cleanup: str | None = None
    has_pooler_layer: bool = True

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "train_views", _views(self.train_views, "train_views"))
        set_(self, "eval_view", _views([self.eval_view], "eval_view")[0])
        if isinstance(self.tuning, Mapping) or self.tuning is None:  # a tuning node (None: full); its _doc ignored
            set_(self, "tuning", TuningSpec(**_known(self.tuning or {}, TuningSpec, "tuning", ignore=("_doc",))))
        if isinstance(self.dev_encoder, Mapping):
            set_(self, "dev_encoder", DevEncoder(**_known(self.dev_encoder, DevEncoder, "method.dev_encoder")))
        if self.dev_encoder is not None and self.denoise == "none" and self.dev_encoder.denoise:
            set_(self, "dev_encoder", replace(self.dev_encoder, denoise=False))  # no bias to subtract
        set_(self, "eval_precision", str(self.eval_precision))
        self._check()

    def _check(self) -> None:
        """The model's rules, each written once (formerly ``methods/checks.py``)."""
        _choice("backbone.family", self.family, FAMILIES)
        _choice("method.pooler", self.pooler, POOLERS)
        _choice("method.head", self.head, HEADS)
        _choice("method.head_init", self.head_init, HEAD_INITS)
        _choice("method.head_on", self.head_on, ("difference", "each"))
        _choice("method.denoise", self.denoise, DENOISE_MODES)
        _choice("denoise_positions", self.denoise_positions, ("official", "aligned"))
        _choice("eval.precision", self.eval_precision, PRECISIONS)
        views = (*self.train_views, self.eval_view)
        if self.pooler == "mask" and self.eval_view[1] is None:
            raise ConfigError(f"method.pooler={self.pooler} needs a template (a [MASK] representation) but the test "
                              "view has none: prompt=none (choose a prompt: prompt=promptbert ...)")
        if self.denoise != "none" and all(t is None for _, t in views):
            raise ConfigError(f"method.denoise={self.denoise} needs a template but prompt=none (choose a prompt or "
                              "set method.denoise=none)")
        if self.denoise_at_eval and self.denoise == "none":
            raise ConfigError("method.denoise_at_eval=true needs method.denoise=position or pad")
        _choice("prompt.train_tokenization", self.train_tokenization, TRAIN_TOKENIZATIONS)
        for key, rule in (("prompt.add_period_at_eval", self.add_period_at_eval),
                          ("eval.dev_encoder.add_period", self.dev_encoder.add_period if self.dev_encoder else False)):
            try:
                period_rule(rule)
            except ValueError as err:
                raise ConfigError(f"{key}: {err}") from None
        if self.max_seq_len is not None and int(self.max_seq_len) < 1:
            raise ConfigError(f"max_seq_len={self.max_seq_len}: expected an int >= 1")
        if not 0.0 <= float(self.mlm_probability) < 1.0:
            raise ConfigError(f"method.mlm.probability={self.mlm_probability}: expected 0 <= p < 1")
        name = self.tuning.name
        if self.family == "decoder":
            self.check_decoder(self.pooler, self.denoise, name)
        elif name == "lora":
            raise ConfigError(f"tuning=lora is the decoder LLMs' tuning (PromptEOL's QLoRA recipe); backbone.family="
                              f"{self.family} uses tuning=full | frozen | prefix | soft_prompt")
        if name == "soft_prompt" and self.denoise != "none":
            raise ConfigError("tuning=soft_prompt with denoise is not supported: set method.denoise=none")
        if name == "soft_prompt" and any(t is None for _, t in views):
            raise ConfigError("tuning=soft_prompt needs a template on every view (choose a prompt)")

    @staticmethod
    def check_decoder(pooler: str, denoise: str, tuning: str) -> None:
        """The rules of a decoder LLM backbone (``family=decoder``), each refusal naming why: a [MASK] / [CLS]
        pooler (a causal LM has no mask token, and its first token sees only itself), template denoising (a
        decoder prompt has no [MASK]; neither PromptEOL nor PretCoT / KE defines a bias), ``prefix`` /
        ``soft_prompt`` (built for BERT / RoBERTa here).

        Raises:
            ConfigError: names the key and why.
        """
        if pooler not in DECODER_POOLERS:
            hint = (" CoT-BERT's two-stage templates are [MASK] templates; their decoder counterpart is Pretended "
                    "CoT (method=prompteol prompt=pretcot)" if pooler == "mask" else "")
            raise ConfigError(f"method.pooler={pooler} on backbone.family=decoder: a decoder LLM is read at the "
                              f"prompt's last token (method.pooler=last_token) or averaged (avg).{hint}")
        if denoise != "none":
            raise ConfigError(f"method.denoise={denoise} on backbone.family=decoder: template denoising "
                              "subtracts the [MASK] state of the template alone (PromptBERT Eq. 4); a decoder prompt "
                              "has no [MASK] and neither PromptEOL nor PretCoT/KE defines a template bias. Set "
                              "method.denoise=none")
        if tuning in ("prefix", "soft_prompt"):
            raise ConfigError(f"tuning={tuning} on backbone.family=decoder: the continuous prompts are "
                              "implemented for BERT/RoBERTa encoders (DCPCSE, PromCSE, SCPCSE); use tuning=lora, full "
                              "or frozen")

    # ------------------------------------------------------------------------------------------- derived
    @property
    def use_head_at_eval(self) -> bool:
        """The head is applied at test (``not mlp_only_train``)."""
        return not self.mlp_only_train

    @property
    def soft_templates(self) -> list[str] | None:
        """The templates sharing the continuous-template table (``tuning=soft_prompt``), in slot order."""
        if self.tuning.name != "soft_prompt":
            return None
        return list(dict.fromkeys(t for _, t in (*self.train_views, self.eval_view)))

    def view_specs(self, kind: str) -> list[ViewSpec]:
        """The :class:`ViewSpec` list of ``train`` (the training views) or ``test`` / ``dev`` (the eval view)."""
        views = self.train_views if kind == "train" else (self.eval_view,)
        return [ViewSpec(f, t) for f, t in views]

    # ------------------------------------------------------------------------------------------- (de)serialise
    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable, with ``spec_version`` (:data:`SPEC_VERSION`): ``cselab_model.json``."""
        out: dict[str, Any] = {"spec_version": SPEC_VERSION, **dataclasses.asdict(self)}  # dev_encoder: a dict
        out.update(tuning=self.tuning.to_dict(), train_views=[list(v) for v in self.train_views],
                   eval_view=list(self.eval_view))
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EmbeddingSpec:
        """The spec :meth:`to_dict` wrote, or the flat config of a model saved before the spec
        (``use_head_at_eval`` for ``mlp_only_train``; no ``head_init``, which is training only).

        Raises:
            ConfigError: an unknown key, or a value out of range.
        """
        data = dict(data)
        version = data.pop("spec_version", 1)
        if version == 1:
            if "use_head_at_eval" in data:
                data["mlp_only_train"] = not bool(data.pop("use_head_at_eval"))
        elif version != SPEC_VERSION:
            raise ConfigError(f"cselab_model.json: spec_version={version}, this cselab reads {SPEC_VERSION} (upgrade)")
        return cls(**_known(data, cls, "cselab_model.json"))

    @classmethod
    def from_config(cls, node: Mapping[str, Any], *, family: str, train_views: Sequence[ViewSpec],
                    eval_view: ViewSpec, mlm_probability: float = 0.0,
                    decode_cleanup: str | None = None) -> EmbeddingSpec:
        """The spec of the run's ``module.model`` node (``conf/config.yaml``) and of what the method decides.

        ``node`` holds the fields above that the config sets, plus ``prompt`` (the prompt config, or None): its
        ``mask_index``, ``add_period_at_eval``, ``layer`` (-> ``pool_layer``) and ``eval_rules`` are read here.
        A key whose value is None takes the field's default (the defaults are written only here).

        Raises:
            ConfigError: an unknown key (named), or a value out of range.
        """
        node = {k: v for k, v in dict(node).items() if v is not None}
        prompt = dict(node.pop("prompt", None) or {})
        for derived in ("train_views", "eval_view", "family", "mlm_probability", "decode_cleanup",
                        "has_pooler_layer", "mask_index", "add_period_at_eval", "pool_layer", "eval_rules",
                        "train_tokenization"):
            if derived in node:
                raise ConfigError(f"module.model.{derived} is not a setting: it comes from the method, the prompt "
                                  "or the backbone")
        node = _known(node, cls, "module.model")
        from_prompt = {"mask_index": prompt.get("mask_index"), "add_period_at_eval": prompt.get("add_period_at_eval"),
                       "pool_layer": prompt.get("layer"), "eval_rules": prompt.get("eval_rules"),
                       "train_tokenization": prompt.get("train_tokenization")}
        return cls(family=family, train_views=[(v.field, v.template) for v in train_views],
                   eval_view=(eval_view.field, eval_view.template), mlm_probability=float(mlm_probability),
                   decode_cleanup=decode_cleanup, **{k: v for k, v in from_prompt.items() if v is not None}, **node)

