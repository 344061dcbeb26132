"""The backbone module: a Hugging Face transformer encoder (``AutoModel``) and its prompt modes.

The model itself is untouched (PEFT-style: prefixes live in a PEFT wrapper, soft templates in a separate
table); this module runs it with the prompt of ``tuning`` and removes virtual prompt positions from its output.
The prompt modules are added by the encoder's own methods (``add_prefix``, ``add_lora`` ...).
Loading by name (hub id, folder, ``package:``) is :mod:`cselab.model.loading`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from types import SimpleNamespace

import torch
from torch import nn

from .attention_mask import opt_positions, sdpa_mask_4d, takes_4d_mask

#: decoder model types with learned ABSOLUTE positions: left-padded rows get their positions from the attention
#: mask (OPT does this itself; rotary models -- LLaMA, Qwen2, Mistral -- keep their default, as the official code)
ABSOLUTE_POSITION_DECODERS = ("gpt2", "gpt_neo", "gpt_bigcode", "biogpt")


class Encoder(nn.Module):
    """A Hugging Face transformer (an encoder, or a decoder LLM's ``AutoModel``) plus the facts the methods
    need about it, and its prompt module (``tuning``): :meth:`add_prefix` (deep / layer-shared / input-layer
    prefixes, :mod:`.prefix`, in a PEFT wrapper) and the one prefix draw they share per step
    (:meth:`one_prompt_draw`, :meth:`draw_prompt`), :meth:`add_lora` (PEFT) and :meth:`merge_lora`,
    :meth:`add_soft_template` (the continuous template table, :mod:`.soft_slots`), :meth:`freeze_backbone` under
    each of them.  They replace ``self.model`` by its PEFT wrapper or add ``self.soft_template``, and set the
    prompt state that :meth:`forward` reads.

    Attributes:
        model: the ``AutoModel`` (or the base model of an ``AutoModelForMaskedLM``), or its PEFT wrapper
            (prefix or LoRA).
        mlm: the masked-LM model when loaded with ``mlm_head=True`` (its ``.model`` shares weights), else None.
        family: ``bert``, ``roberta`` (picks the template form) or ``decoder`` (causal LM: left-padded whole
            prompts, ``pooler=last_token``).
        position_offset: the first position id: 0 for BERT, ``padding_idx + 1`` (= 2) for RoBERTa-like
            models, which number positions from there.
        hidden_size: D, the width of the last hidden state (OPT-350m: its ``word_embed_proj_dim``, 512).
    """

    def __init__(self, model: nn.Module, family: str, mlm: nn.Module | None = None) -> None:
        super().__init__()
        self.model = model
        self.mlm = mlm
        self.family = family
        emb = getattr(model, "embeddings", None)
        padding_idx = getattr(emb, "padding_idx", None)
        roberta_like = emb is not None and hasattr(emb, "create_position_ids_from_input_ids")
        self.padding_idx = int(padding_idx) if padding_idx is not None else None
        self.position_offset = int(padding_idx) + 1 if roberta_like and padding_idx is not None else 0
        self.hidden_size = int(getattr(model.config, "word_embed_proj_dim", None) or model.config.hidden_size)
        self.is_decoder = family == "decoder"
        self.positions_from_mask = self.is_decoder and model.config.model_type in ABSOLUTE_POSITION_DECODERS
        self.max_positions = int(getattr(model.config, "max_position_embeddings", 512)) - self.position_offset
        self.mask_4d = takes_4d_mask(model.config, self.is_decoder)  # cselab.model.attention_mask
        self.opt_positions = self.is_decoder and model.config.model_type == "opt"
        self.tuning = "full"
        self.prefix_len = 0          # prompt length of tuning=prefix (0: none)
        self.prefix_variant = None
        self.prefix_positions = "shifted"
        self.soft_template: nn.Module | None = None  # tuning=soft_prompt

    @property
    def base_model(self) -> nn.Module:
        """The untouched transformer (the model inside a PEFT prefix wrapper, or the model itself)."""
        return self.model.get_base_model() if hasattr(self.model, "get_base_model") else self.model

    def enable_activation_checkpointing(self) -> None:
        """Keep only each transformer layer's input in the forward pass and recompute the layer in the backward
        pass (Hugging Face activation checkpointing, ``torch.utils.checkpoint`` non-reentrant).

        The recompute restores the RNG state, so its dropout masks are the forward's and the gradients are
        those without checkpointing (``tests/test_contract.py``).  The activation memory of a step drops
        from every layer's intermediates to one (N, T, D) tensor per layer.  The cost is about one more
        forward of the backbone per step.  Only in train mode: evaluation is unchanged.  Works with soft
        prompts (``tuning=soft_prompt``) and input-layer prompts (``tuning.variant=input_layer``), not with
        prefixes on every layer: Hugging Face's checkpointed layers drop ``past_key_values``, which carries them.

        Raises:
            ValueError: the backbone class does not support it (names the class), or ``tuning=prefix`` with
                a ``deep`` / ``layer_shared`` prefix (names the keys).
        """
        if self.tuning == "prefix" and self.prefix_variant != "input_layer":
            raise ValueError(
                f"activation_checkpointing=true with tuning=prefix, tuning.variant={self.prefix_variant}: the "
                "prefixes reach every layer as past_key_values, which Hugging Face's checkpointed layers drop "
                "(they write to that cache). Set activation_checkpointing=false, or use tuning.variant=input_layer")
        base = self.base_model
        if not getattr(base, "supports_gradient_checkpointing", False):
            raise ValueError(f"activation_checkpointing=true: {type(base).__name__} does not support activation "
                             "checkpointing")
        kwargs = {"use_reentrant": False}
        if hasattr(base, "activation_checkpointing_enable"):  # transformers >= 5.x
            base.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
        else:
            base.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)

    # ----------------------------------------------------------------------------------------- prompt modules
    def freeze_backbone(self) -> None:
        """Freeze every backbone weight (the MLM head included).  The module stays in train mode, so dropout
        still makes the unsup views (DCPCSE / PromCSE / OptiPrompt)."""
        for p in self.model.parameters():
            p.requires_grad_(False)
        if self.mlm is not None:
            for p in self.mlm.parameters():
                p.requires_grad_(False)

    def add_prefix(self, pre_seq_len: int, variant: str = "deep", positions: str = "shifted", **kwargs) -> None:
        """Freeze the backbone and add trainable prefixes (:func:`cselab.model.prefix.apply_prefix_tuning`).

        Raises:
            ValueError: bad length / variant / positions, or ``tuning.variant=input_layer`` with unshifted
                positions (:func:`cselab.model.prefix.check_prefix`, before anything is frozen).
        """
        from .prefix import apply_prefix_tuning, check_prefix

        check_prefix(pre_seq_len, variant, positions)
        self.freeze_backbone()
        self.model = apply_prefix_tuning(self.model, pre_seq_len, variant=variant, **kwargs)
        self.tuning, self.prefix_len, self.prefix_variant, self.prefix_positions = (
            "prefix", int(pre_seq_len), variant, positions)
        self.max_positions -= int(pre_seq_len) if positions == "shifted" else 0

    @property
    def prompt_kind(self) -> str:
        """The prompt module, as a model card names it: ``none`` | ``prefix`` | ``input_layer`` | ``soft`` | ``lora``."""
        if self.tuning == "prefix":
            return "input_layer" if self.prefix_variant == "input_layer" else "prefix"
        return {"soft_prompt": "soft", "lora": "lora"}.get(self.tuning, "none")

    @property
    def prompt_draw(self):
        """The :class:`cselab.model.prefix.PrefixDraw` of ``tuning=prefix`` (every variant), else None."""
        if self.tuning != "prefix":
            return None
        return getattr(self.model.prompt_encoder[self.model.active_adapter], "cselab_prefix_draw", None)

    def one_prompt_draw(self, kept: dict | None = None) -> contextlib.AbstractContextManager:
        """Within the block, every forward on the same number of rows reuses one draw of the prefix key/values
        (one dropout mask): the official DCPCSE step, whose contrastive and MLM passes share ``get_prompt``'s
        output (:class:`cselab.model.prefix.PrefixDraw`).  ``kept``: draws to serve, shape -> tensor (rows of
        :meth:`draw_prompt`).  Without prefixes, nothing changes."""
        draw = self.prompt_draw
        return contextlib.nullcontext() if draw is None else draw.shared(kept)

    def draw_prompt(self, rows: int) -> torch.Tensor | None:
        """One draw of the prompt module's output for ``rows`` sequences, dropout applied: (rows, P, L * 2H) for
        deep / layer-shared prefixes, (rows, P, D) for input-layer prompts, with its graph to the prompt
        parameters; None without ``tuning=prefix``.  The draw a forward on ``rows`` sequences makes first
        (``get_prompt``, before any layer), so a forward served this draw (:meth:`one_prompt_draw` with
        ``kept``) sees the masks an unserved one would."""
        draw = self.prompt_draw
        if draw is None:
            return None
        with draw.shared() as kept:
            self.model.get_prompt(batch_size=rows)
        (tensor,) = kept.values()
        return tensor

    def add_lora(self, r: int = 64, alpha: float = 16, dropout: float = 0.05,
                 target_modules: str | Sequence[str] = "all-linear", bias: str = "none") -> None:
        """Freeze the backbone and add LoRA adapters with PEFT (``get_peft_model`` + ``LoraConfig``).

        The official PromptEOL recipe (kongds/scaling_sentemb ``train_llm.sh:15-17``, ``ft_llm.py:409-431``): r=64,
        alpha=16, dropout 0.05, no bias, on every Linear layer but the LM head (PEFT's ``all-linear``; an
        ``AutoModel`` has no LM head).  PEFT keeps the adapter weights in float32 on a bf16 backbone.

        Raises:
            ValueError: ``tuning=lora`` on an encoder with a prompt module already added, or a target module
                name that matches nothing (PEFT's message, with the ``tuning.target_modules`` key named).
        """
        from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training

        if self.tuning != "full":
            raise ValueError(f"tuning=lora on a backbone that already has tuning={self.tuning}")
        targets = target_modules if isinstance(target_modules, str) else list(target_modules)
        config = LoraConfig(r=int(r), lora_alpha=alpha, lora_dropout=float(dropout), target_modules=targets,
                            bias=bias)
        if getattr(self.model, "is_loaded_in_4bit", False):  # QLoRA: norms in fp32 (ft_llm.py:408); checkpointing
            self.model = prepare_model_for_kbit_training(self.model, use_gradient_checkpointing=False)  # is ours
        try:
            self.model = get_peft_model(self.model, config)
        except ValueError as err:
            raise ValueError(f"tuning.target_modules={targets!r}: {err}") from err
        self.tuning = "lora"

    def merge_lora(self) -> None:
        """Fold the LoRA adapters into the backbone's weights (``merge_and_unload``): the same function, a plain
        model again (``tuning`` becomes ``full``).  For exports without PEFT.

        Raises:
            ValueError: the backbone has no LoRA adapters.
        """
        if self.tuning != "lora":
            raise ValueError(f"merge_lora: the backbone has tuning={self.tuning}, not lora")
        self.model = self.model.merge_and_unload()
        self.tuning = "full"

    def add_soft_template(self, init_ids: list[int]) -> None:
        """Freeze the backbone and make the template tokens continuous (SCPCSE / OptiPrompt).

        ``init_ids`` are the token ids of the template slots (see ``ViewCollate.soft_slots``); the trainable
        (n_slots, D) table starts from their input word embeddings (PromptBERT Sec. 4.2, DCPCSE SCPCSE).
        """
        self.freeze_backbone()
        emb = self.model.get_input_embeddings().weight.detach()
        self.soft_template = nn.Embedding.from_pretrained(emb[torch.tensor(init_ids)].clone(), freeze=False)
        self.tuning = "soft_prompt"

    def _default_positions(self, input_ids: torch.Tensor) -> torch.Tensor:
        """The position ids the backbone assigns without past key/values: (N, T)."""
        if self.position_offset:  # RoBERTa: count non-pad tokens from padding_idx + 1, pads keep padding_idx
            mask = input_ids.ne(self.padding_idx).long()
            return torch.cumsum(mask, dim=1) * mask + self.padding_idx
        return torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0).expand_as(input_ids)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor | None = None,
        output_hidden_states: bool = False,
        template_index: torch.Tensor | None = None,
    ):
        """Run the encoder.  Shapes: ids / mask / positions / template_index (N, T); returns an output whose
        ``last_hidden_state`` is (N, T, D) over the REAL tokens (virtual prompt positions removed) and, if asked,
        ``hidden_states`` a tuple of L+1 (N, T, D).

        ``position_ids`` are the positions the tokens would have without any prompt (as computed by the collate
        for template denoising); with shifted prefixes they are moved by ``prefix_len`` like the defaults.
        ``template_index`` (soft templates): slot of each template token, -1 elsewhere.
        """
        kwargs = {"attention_mask": attention_mask, "output_hidden_states": output_hidden_states, "return_dict": True}
        input_layer = self.tuning == "prefix" and self.prefix_variant == "input_layer"
        prefix = self.tuning == "prefix" and not input_layer  # deep / layer-shared: past key/values
        if self.is_decoder:  # no KV cache; learned absolute positions follow the left padding
            kwargs["use_cache"] = False
            if self.positions_from_mask and position_ids is None:
                position_ids = (attention_mask.long().cumsum(1) - 1).clamp(min=0)
        if prefix:
            if self.prefix_positions == "unshifted" and position_ids is None:
                position_ids = self._default_positions(input_ids)
            elif self.prefix_positions == "shifted" and position_ids is not None:
                position_ids = position_ids + self.prefix_len
        elif input_layer and position_ids is not None:
            raise ValueError("explicit position ids (template denoising) are not supported with "
                             "tuning.variant=input_layer")
        if self.soft_template is not None and template_index is not None:
            embeds = self.model.get_input_embeddings()(input_ids)
            slots = self.soft_template(template_index.clamp(min=0))
            kwargs["inputs_embeds"] = torch.where(template_index.unsqueeze(-1) >= 0, slots.to(embeds.dtype), embeds)
            kwargs["position_ids"] = position_ids if position_ids is not None else self._default_positions(input_ids)
        else:
            kwargs["input_ids"] = input_ids
            kwargs["position_ids"] = position_ids
        if prefix:  # the attention mask extended over the prefix key/values
            n = attention_mask.shape[0]
            ones = torch.ones(n, self.prefix_len, dtype=attention_mask.dtype, device=attention_mask.device)
            kwargs["attention_mask"] = torch.cat([ones, attention_mask], dim=1)
        # no host sync in Hugging Face's mask builder (cselab.model.attention_mask); not with an input-layer prompt,
        # whose PEFT forward concatenates the 2D mask with the prompt's
        if self.mask_4d and not input_layer:
            if self.opt_positions and kwargs["position_ids"] is None:
                kwargs["position_ids"] = opt_positions(kwargs["attention_mask"])
            kwargs["attention_mask"] = sdpa_mask_4d(kwargs["attention_mask"], input_ids.shape[1], self.is_decoder)
        if prefix:
            # PEFT's forward drops explicit position ids for prompt learning: call the wrapped model with
            # PEFT's prefix key/values ourselves.
            kwargs["past_key_values"] = self.model.get_prompt(batch_size=attention_mask.shape[0])
            out = self.model.get_base_model()(**kwargs)
        else:
            out = self.model(**kwargs)
        if input_layer:
            p = self.prefix_len
            hs = out.hidden_states
            return SimpleNamespace(
                last_hidden_state=out.last_hidden_state[:, p:],
                hidden_states=tuple(h[:, p:] for h in hs) if hs is not None else None,
                pooler_output=None,
            )
        return out
