"""The prompt modules an :class:`.backbone.Encoder` can take (``tuning``): deep / layer-shared / input-layer
prefixes (:mod:`.prefix`, in a PEFT wrapper) and the one prefix draw they share per step, LoRA adapters (PEFT) and
their merge, the continuous template table (:mod:`.soft_slots`), and the frozen backbone under each of them.

The transformer itself stays untouched (PEFT-style); :meth:`.backbone.Encoder.forward` runs it with the prompt
module added here.
"""

from __future__ import annotations

import contextlib

import torch
from torch import nn


class PromptModules:
    """The ``tuning`` methods of :class:`.backbone.Encoder` (mixed in; an ``nn.Module``).  They replace
    ``self.model`` by its PEFT wrapper or add ``self.soft_template``, and set the prompt state that the encoder's
    forward reads: ``tuning`` (``full`` | ``prefix`` | ``lora`` | ``soft_prompt``), ``prefix_len``,
    ``prefix_variant``, ``prefix_positions``, ``max_positions``, ``lora`` (initialised by the encoder).
    """

    model: nn.Module
    mlm: nn.Module | None

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
            ValueError: bad length / variant / positions (names the ``tuning.*`` key).
        """
        from .prefix import PREFIX_POSITIONS, apply_prefix_tuning

        if positions not in PREFIX_POSITIONS:
            raise ValueError(f"tuning.prefix_positions={positions!r}: expected one of {PREFIX_POSITIONS}")
        if variant == "input_layer" and positions != "shifted":
            raise ValueError("tuning.variant=input_layer puts the prompt in the input sequence: its real tokens "
                             "always follow it (tuning.prefix_positions must be 'shifted')")
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

    @contextlib.contextmanager
    def one_prompt_draw(self, kept: dict | None = None):
        """Within the block, every forward on the same number of rows reuses one draw of the prefix key/values
        (one dropout mask): the official DCPCSE step, whose contrastive and MLM passes share ``get_prompt``'s
        output (:class:`cselab.model.prefix.PrefixDraw`).  ``kept``: draws to serve, shape -> tensor (rows of
        :meth:`draw_prompt`).  Without prefixes, nothing changes."""
        draw = self.prompt_draw
        if draw is None:
            yield
            return
        with draw.shared(kept):
            yield

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
                 target_modules: str | list[str] = "all-linear", bias: str = "none") -> None:
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
            raise ValueError(f"tuning.target_modules={target_modules!r}: {err}") from err
        self.tuning = "lora"
        self.lora = {"r": int(r), "alpha": alpha, "dropout": float(dropout), "target_modules": targets, "bias": bias}

    def merge_lora(self) -> None:
        """Fold the LoRA adapters into the backbone's weights (``merge_and_unload``): the same function, a plain
        model again (``tuning`` becomes ``full``).  For exports without PEFT.

        Raises:
            ValueError: the backbone has no LoRA adapters.
        """
        if self.tuning != "lora":
            raise ValueError(f"merge_lora: the backbone has tuning={self.tuning}, not lora")
        self.model = self.model.merge_and_unload()
        self.tuning, self.lora = "full", None

    def add_soft_template(self, init_ids: list[int]) -> None:
        """Freeze the backbone and make the template tokens continuous (SCPCSE / OptiPrompt).

        ``init_ids`` are the token ids of the template slots (see ``ViewCollate.soft_slots``); the trainable
        (n_slots, D) table starts from their input word embeddings (PromptBERT Sec. 4.2, DCPCSE SCPCSE).
        """
        self.freeze_backbone()
        emb = self.model.get_input_embeddings().weight.detach()
        self.soft_template = nn.Embedding.from_pretrained(emb[torch.tensor(init_ids)].clone(), freeze=False)
        self.tuning = "soft_prompt"
