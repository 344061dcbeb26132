"""Export a trained cselab method to a sentence-transformers folder with the SAME embeddings as ``encode``.

    python -m cselab.export outputs/.../checkpoints/best-step500.ckpt exported/promptbert-unsup
    python -m cselab.export CHECKPOINT OUT_DIR --push-to-hub me/promptbert-unsup   # + upload (token, network)

    from sentence_transformers import SentenceTransformer
    model = SentenceTransformer("exported/promptbert-unsup", trust_remote_code=True)   # see below
    model.encode(["a man is playing a guitar"])    # == cselab.load(ckpt).encode([...]) (float32, CPU)

What the folder holds, per method family (``modules.json`` lists the modules in order):

* **plain methods** (no template, whole or frozen backbone: SimCSE, baselines with a pooler): sentence-transformers'
  own ``Transformer`` (the backbone, truncation at the backbone's maximum as SimCSE's evaluator) followed by
  ``Pooling`` (``cls_before_pooler`` = ``cls``, ``avg`` = ``mean``) and, when the MLP applies at test (SimCSE sup),
  ``Dense`` with ``Tanh`` -- only stock modules, so such a folder loads WITHOUT ``trust_remote_code``.  Other
  poolers (``cls`` = the backbone's pooler layer, ``avg_first_last``, ``avg_top2``) and the MLM-transform head use
  the custom :class:`CselabPooling`.
* **template methods** (PromptBERT, CoT-BERT, baselines with a prompt): the custom input module
  :class:`CselabPromptEncoder` wraps each sentence in the eval template exactly as
  :class:`cselab.data.collate.ViewCollate` does (PromptBERT's period rule, the sentence tokenized on its own, no
  truncation beyond the backbone's length), runs the backbone and hands the representation [MASK] index to
  :class:`CselabPooling`, which takes that state and applies the head when the method applies it at test.  The
  template bias of sup PromptBERT (``denoise_at_eval``: ``head(h - h_hat)`` or ``head(h) - head(h_hat)``) is
  reproduced: the input module also forwards the bare template once per distinct sentence length (``position``
  or ``pad`` denoising, as the collate builds it).
* **continuous prompts**: deep / layer-shared prefixes (DCPCSE, PromCSE; any ``prefix_positions``, with or
  without ``prefix_projection``) are saved as the key/value table PEFT produces at eval
  (``cselab_prompt.safetensors``, (P, layers * 2 * hidden)) and re-injected as past key/values with the attention
  mask and position ids the cselab encoder uses -- the prompt is NOT dropped (the official PromCSE export drops
  it); input-layer prompts are prepended to the input embeddings as PEFT does; continuous templates (SCPCSE,
  OptiPrompt) are saved as their (slots, hidden) table and replace the template tokens' input embeddings.

Custom modules live in ``cselab_st.py`` inside the folder (written from this file's :class:`CselabPromptEncoder`,
:class:`CselabPooling` and helpers): it imports only ``torch``, ``transformers``, ``safetensors`` and
``sentence_transformers``, NOT cselab, so the folder works where cselab is not installed.  Because it is code
shipped with the model, sentence-transformers >= 6 loads it only with ``trust_remote_code=True``.

Refused (:class:`ExportError`, nothing written): the analysis representations of ``method=baseline``
(``static_avg``, ``static_avg_debiased``, ``topk``: not a transformer forward), methods whose class changes the
encoding path (``encode`` / ``embed`` overridden outside cselab's known classes), ``pooler=cls`` on a backbone
whose pooler layer is missing or not dense + tanh, and an output folder that exists and is not empty (unless
``overwrite``).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file as _load_safetensors
from safetensors.torch import save_file as _save_safetensors
from torch import nn

from cselab.files import umask

try:  # sentence-transformers >= 5.x layout
    from sentence_transformers.base.modules import InputModule, Module
except ImportError:  # pragma: no cover - older releases
    from sentence_transformers.models import InputModule, Module

__all__ = [
    "ExportError",
    "CselabPromptEncoder",
    "CselabPooling",
    "PROBE_SENTENCES",
    "describe",
    "export",
    "standalone_source",
]

#: file name of the custom modules inside an exported folder (``modules.json`` refers to ``cselab_st.<Class>``)
MODULE_FILE = "cselab_st.py"

#: sentences :func:`export` encodes both ways to check the folder (punctuation, a quote, no final period)
PROBE_SENTENCES: tuple[str, ...] = (
    "a man is playing a guitar",
    "The cat sat on the mat.",
    "two dogs are running in the park?",
    'he said "it is raining"',
    "birds fly",
    "a woman is slicing an onion while the sun is shining over the little house by the river",
)


class ExportError(ValueError):
    """The method (or the output folder) cannot be exported faithfully; nothing was written."""


# ============================================================================================ standalone part
# Everything from here to the END marker is copied into the exported folder's cselab_st.py (see
# standalone_source): it must not use cselab, only the imports of _STANDALONE_HEADER.


def _append_period(sentence: str) -> str:
    """PromptBERT's evaluation rule: append ``.`` to a sentence that does not end in ``. ? " '``."""
    if len(sentence) > 0 and sentence[-1] not in ".?\"'":
        return sentence + "."
    return sentence


def _masked_mean(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``hidden`` (N, T, D) over the tokens where ``attention_mask`` (N, T) is 1."""
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * mask).sum(1) / mask.sum(1)


def _prefix_cache(table: torch.Tensor, batch: int, num_layers: int, num_heads: int):
    """Past key/values of a deep prefix for ``batch`` rows, laid out as PEFT's ``get_prompt`` lays them out.

    ``table`` is (P, num_layers * 2 * hidden): PEFT's prefix encoder output at eval.  Returns a
    ``transformers.DynamicCache`` (a fresh one per call: the model may append to it).
    """
    from transformers import DynamicCache

    p, width = table.shape
    head_dim = width // (num_layers * 2 * num_heads)
    kv = table.unsqueeze(0).expand(batch, p, width).reshape(batch, p, num_layers * 2, num_heads, head_dim)
    layers = kv.permute(2, 0, 3, 1, 4).split(2)  # num_layers x (2, batch, heads, P, head_dim)
    return DynamicCache([(layer[0], layer[1]) for layer in layers])


class CselabPromptEncoder(InputModule):
    """sentence-transformers input module: cselab's eval collate + encoder (template, prompts) in one module.

    Tokenization (``preprocess``) reproduces ``ViewCollate`` at evaluation: PromptBERT's period rule when
    ``add_period``, the sentence tokenized alone (``add_special_tokens=False``) and cut to
    ``max_sentence_tokens``, wrapped as ``prefix_ids + sentence + suffix_ids`` (``[CLS] ... [SEP]`` included),
    right-padded; ``rep_index`` is the representation [MASK] (0 = [CLS] without a template).  ``forward``
    reproduces ``cselab.encoders.backbone.Encoder.forward`` for each ``prompt_kind``:

    * ``none``: the backbone as is;
    * ``prefix``: ``prompt_table`` (P, layers * 2 * hidden) re-injected as past key/values, attention mask
      extended over the P prompt slots, position ids as ``prefix_positions`` says (``shifted``: from P, the
      transformers default with past key/values; ``unshifted``: the positions without a prompt);
    * ``input_layer``: ``prompt_table`` (P, hidden) prepended to the input embeddings (PEFT prompt tuning), the
      P outputs removed again;
    * ``soft``: ``prompt_table`` (slots, hidden) replaces the input embeddings of the template tokens
      (``prefix_slots`` / ``suffix_slots`` give each template position's slot, -1 = keep the token).

    With ``denoise`` (``position`` | ``pad``) it also computes ``template_bias`` (N, D): the [MASK] state of the
    bare template, once per distinct sentence length, as cselab's collate and ``_forward_views`` do.

    Outputs ``token_embeddings`` (N, T, D), ``attention_mask``, ``rep_index`` (N,), and if configured
    ``all_layer_embeddings`` (L + 1 tensors), ``pooler_output`` (N, D), ``template_bias`` (N, D).
    """

    config_file_name = "cselab_encoder_config.json"
    prompt_file_name = "cselab_prompt.safetensors"
    save_in_root = True
    config_keys = [
        "prefix_ids", "suffix_ids", "rep_offset", "rep_in_prefix", "add_period", "max_sentence_tokens",
        "pad_token_id", "position_offset", "padding_idx", "prompt_kind", "prefix_len", "prefix_positions",
        "num_layers", "num_heads", "prefix_slots", "suffix_slots", "denoise", "output_hidden_states",
        "output_pooler", "has_pooler_layer", "bias_position_offset", "sentence_prefix",
    ]  # fmt: skip

    def __init__(
        self,
        model: nn.Module,
        tokenizer,
        prefix_ids: Sequence[int],
        suffix_ids: Sequence[int],
        rep_offset: int = 0,
        rep_in_prefix: bool = True,
        add_period: bool = False,
        max_sentence_tokens: int = 510,
        pad_token_id: int = 0,
        position_offset: int = 0,
        padding_idx: int | None = None,
        prompt_kind: str = "none",
        prefix_len: int = 0,
        prefix_positions: str = "shifted",
        num_layers: int = 0,
        num_heads: int = 0,
        prefix_slots: Sequence[int] | None = None,
        suffix_slots: Sequence[int] | None = None,
        denoise: str = "none",
        output_hidden_states: bool = False,
        output_pooler: bool = False,
        has_pooler_layer: bool = True,
        prompt_table: torch.Tensor | None = None,
        bias_position_offset: int | None = None,
        sentence_prefix: str = "",
    ) -> None:
        super().__init__()
        if prompt_kind not in ("none", "prefix", "input_layer", "soft"):
            raise ValueError(f"prompt_kind={prompt_kind!r}: expected none, prefix, input_layer or soft")
        if denoise not in ("none", "position", "pad"):
            raise ValueError(f"denoise={denoise!r}: expected none, position or pad")
        if prompt_kind != "none" and prompt_table is None:
            raise ValueError(f"prompt_kind={prompt_kind!r} needs its prompt_table ({self.prompt_file_name})")
        self.model = model
        self.tokenizer = tokenizer
        self.prefix_ids = [int(i) for i in prefix_ids]
        self.suffix_ids = [int(i) for i in suffix_ids]
        self.rep_offset, self.rep_in_prefix = int(rep_offset), bool(rep_in_prefix)
        self.add_period = bool(add_period)
        self.sentence_prefix = str(sentence_prefix)  # " ": the official test tokenization (docs/fidelity.md)
        self.max_sentence_tokens = int(max_sentence_tokens)
        self.pad_token_id = int(pad_token_id)
        self.position_offset = int(position_offset)
        # first position id of the ``position`` template-bias rows (None: ``position_offset``); 0 = official
        self.bias_position_offset = self.position_offset if bias_position_offset is None else int(bias_position_offset)
        self.padding_idx = None if padding_idx is None else int(padding_idx)
        self.prompt_kind, self.prefix_len, self.prefix_positions = prompt_kind, int(prefix_len), prefix_positions
        self.num_layers, self.num_heads = int(num_layers), int(num_heads)
        self.prefix_slots = [int(s) for s in prefix_slots] if prefix_slots is not None else None
        self.suffix_slots = [int(s) for s in suffix_slots] if suffix_slots is not None else None
        self.denoise = denoise
        self.output_hidden_states, self.output_pooler = bool(output_hidden_states), bool(output_pooler)
        self.has_pooler_layer = bool(has_pooler_layer)  # False: a masked-LM's base model (no pooler weights)
        self.prompt_table = nn.Parameter(prompt_table.detach().clone(), requires_grad=False) \
            if prompt_table is not None else None
        self.max_seq_length = len(self.prefix_ids) + self.max_sentence_tokens + len(self.suffix_ids)

    # ------------------------------------------------------------------------------------ tokenization
    def rep_position(self, sent_len: int) -> int:
        """Index of the representation token in ``prefix_ids + sentence + suffix_ids``."""
        return self.rep_offset if self.rep_in_prefix else len(self.prefix_ids) + sent_len + self.rep_offset

    def preprocess(self, inputs: Sequence[str], prompt: str | None = None, **kwargs) -> dict[str, torch.Tensor]:
        """Sentences -> ``input_ids``, ``attention_mask``, ``rep_index``, ``sent_len`` (+ ``template_index``)."""
        if not inputs:
            return {}
        texts = [str(t) if prompt is None else prompt + str(t) for t in inputs]
        if self.add_period:
            texts = [_append_period(t) for t in texts]
        if self.sentence_prefix:
            texts = [self.sentence_prefix + t for t in texts]
        tokens = [list(ids)[: self.max_sentence_tokens]
                  for ids in self.tokenizer(texts, add_special_tokens=False)["input_ids"]]
        rows = [self.prefix_ids + ids + self.suffix_ids for ids in tokens]
        width = max(len(r) for r in rows)
        input_ids = torch.full((len(rows), width), self.pad_token_id, dtype=torch.long)
        attention = torch.zeros((len(rows), width), dtype=torch.long)
        for b, row in enumerate(rows):
            input_ids[b, : len(row)] = torch.tensor(row, dtype=torch.long)
            attention[b, : len(row)] = 1
        sent_len = torch.tensor([len(t) for t in tokens], dtype=torch.long)
        out = {"input_ids": input_ids, "attention_mask": attention, "sent_len": sent_len,
               "rep_index": torch.tensor([self.rep_position(len(t)) for t in tokens], dtype=torch.long)}
        if self.prompt_kind == "soft":
            index = torch.full((len(rows), width), -1, dtype=torch.long)
            p = len(self.prefix_ids)
            for b, n in enumerate(sent_len.tolist()):
                index[b, :p] = torch.tensor(self.prefix_slots, dtype=torch.long)
                index[b, p + n : p + n + len(self.suffix_ids)] = torch.tensor(self.suffix_slots, dtype=torch.long)
            out["template_index"] = index
        return out

    # ------------------------------------------------------------------------------------ forward
    def _default_positions(self, input_ids: torch.Tensor) -> torch.Tensor:
        """The position ids the backbone assigns without past key/values (RoBERTa counts non-pad tokens)."""
        if self.position_offset:
            mask = input_ids.ne(self.padding_idx).long()
            return torch.cumsum(mask, dim=1) * mask + self.padding_idx
        return torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0).expand_as(input_ids)

    def encode_tokens(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                      position_ids: torch.Tensor | None = None, template_index: torch.Tensor | None = None,
                      output_hidden_states: bool = False):
        """The backbone with the prompt: an output with ``last_hidden_state`` (N, T, D) over the real tokens,
        ``hidden_states`` when asked and ``pooler_output`` (None for input-layer prompts)."""
        kwargs: dict[str, Any] = {"attention_mask": attention_mask, "output_hidden_states": output_hidden_states,
                                  "return_dict": True}
        if self.prompt_kind == "prefix":
            if self.prefix_positions == "unshifted" and position_ids is None:
                position_ids = self._default_positions(input_ids)
            elif self.prefix_positions == "shifted" and position_ids is not None:
                position_ids = position_ids + self.prefix_len
        elif self.prompt_kind == "input_layer" and position_ids is not None:
            raise ValueError("explicit position ids are not supported with an input-layer prompt")
        if self.prompt_kind == "soft" and template_index is not None:
            embeds = self.model.get_input_embeddings()(input_ids)
            slots = self.prompt_table[template_index.clamp(min=0)].to(embeds.dtype)
            kwargs["inputs_embeds"] = torch.where(template_index.unsqueeze(-1) >= 0, slots, embeds)
            kwargs["position_ids"] = position_ids if position_ids is not None else self._default_positions(input_ids)
        elif self.prompt_kind == "input_layer":
            n, p = input_ids.shape[0], self.prefix_len
            embeds = self.model.get_input_embeddings()(input_ids)
            prompts = self.prompt_table.to(embeds.dtype).unsqueeze(0).expand(n, p, -1)
            kwargs["inputs_embeds"] = torch.cat([prompts, embeds], dim=1)
            kwargs["position_ids"] = None
            ones = torch.ones(n, p, dtype=attention_mask.dtype, device=attention_mask.device)
            kwargs["attention_mask"] = torch.cat([ones, attention_mask], dim=1)
        else:
            kwargs["input_ids"] = input_ids
            kwargs["position_ids"] = position_ids
        if self.prompt_kind == "prefix":
            n = attention_mask.shape[0]
            kwargs["past_key_values"] = _prefix_cache(self.prompt_table, n, self.num_layers, self.num_heads)
            ones = torch.ones(n, self.prefix_len, dtype=attention_mask.dtype, device=attention_mask.device)
            kwargs["attention_mask"] = torch.cat([ones, attention_mask], dim=1)
        out = self.model(**kwargs)
        if self.prompt_kind == "input_layer":
            p = self.prefix_len
            hs = out.hidden_states
            return _Output(out.last_hidden_state[:, p:], tuple(h[:, p:] for h in hs) if hs is not None else None,
                           None)
        return _Output(out.last_hidden_state, out.hidden_states if output_hidden_states else None,
                       getattr(out, "pooler_output", None))

    def template_bias(self, sent_len: torch.Tensor) -> torch.Tensor:
        """(N, D): the bare template's [MASK] state for each sentence length (cselab.prompts.denoise)."""
        lengths = sorted(set(sent_len.tolist()))
        p, s = len(self.prefix_ids), len(self.suffix_ids)
        device = self.prompt_device()
        rows = len(lengths)
        if self.denoise == "position":
            ids = torch.tensor(self.prefix_ids + self.suffix_ids, dtype=torch.long, device=device)
            input_ids = ids.unsqueeze(0).expand(rows, -1).contiguous()
            attention = torch.ones_like(input_ids)
            lens = torch.tensor(lengths, dtype=torch.long, device=device).unsqueeze(1)
            base = torch.arange(p + s, dtype=torch.long, device=device).unsqueeze(0).expand(rows, -1)
            shift = torch.cat([torch.zeros(rows, p, dtype=torch.long, device=device), lens.expand(rows, s)], dim=1)
            positions = base + shift + self.bias_position_offset
            rep = [self.rep_position(0)] * rows
        else:  # pad: [CLS] prefix [PAD]*L suffix [SEP], the backbone's default positions
            width = p + max(lengths) + s
            input_ids = torch.full((rows, width), self.pad_token_id, dtype=torch.long, device=device)
            attention = torch.zeros((rows, width), dtype=torch.long, device=device)
            for r, length in enumerate(lengths):
                row = self.prefix_ids + [self.pad_token_id] * length + self.suffix_ids
                input_ids[r, : len(row)] = torch.tensor(row, dtype=torch.long, device=device)
                attention[r, : len(row)] = 1
            positions = None
            rep = [self.rep_position(length) for length in lengths]
        last = self.encode_tokens(input_ids, attention, position_ids=positions).last_hidden_state
        bias = last[torch.arange(rows, device=device), torch.tensor(rep, dtype=torch.long, device=device)]
        lookup = torch.full((max(lengths) + 1,), -1, dtype=torch.long, device=device)
        lookup[torch.tensor(lengths, dtype=torch.long, device=device)] = torch.arange(rows, device=device)
        return bias[lookup[sent_len.to(device)]]

    def prompt_device(self) -> torch.device:
        """The device of the backbone's weights."""
        return next(self.model.parameters()).device

    def forward(self, features: dict[str, Any], **kwargs) -> dict[str, Any]:
        """Run the backbone with the prompt; see the class docstring for the outputs."""
        out = self.encode_tokens(features["input_ids"], features["attention_mask"],
                                 template_index=features.get("template_index"),
                                 output_hidden_states=self.output_hidden_states)
        features["token_embeddings"] = out.last_hidden_state
        if self.output_hidden_states:
            features["all_layer_embeddings"] = out.hidden_states
        if self.output_pooler:
            features["pooler_output"] = out.pooler_output
        if self.denoise != "none":
            features["template_bias"] = self.template_bias(features["sent_len"])
        return features

    def get_embedding_dimension(self) -> int:
        """Hidden size of the backbone."""
        return int(self.model.config.hidden_size)

    # ------------------------------------------------------------------------------------ save / load
    def save(self, output_path: str, *args, safe_serialization: bool = True, **kwargs) -> None:
        """Backbone (``save_pretrained``), tokenizer, config and the prompt table into ``output_path``."""
        self.model.save_pretrained(output_path, safe_serialization=safe_serialization)
        self.tokenizer.save_pretrained(output_path)
        self.save_config(output_path)
        if self.prompt_table is not None:
            table = self.prompt_table.detach().cpu().contiguous()
            _save_safetensors({"prompt_table": table}, os.path.join(output_path, self.prompt_file_name))

    @classmethod
    def load(cls, model_name_or_path: str, subfolder: str = "", token: bool | str | None = None,
             cache_folder: str | None = None, revision: str | None = None, local_files_only: bool = False,
             **kwargs) -> CselabPromptEncoder:
        """Load from an exported folder (local or on the Hugging Face hub)."""
        from transformers import AutoModel, AutoTokenizer

        path = cls.load_dir_path(model_name_or_path, subfolder=subfolder, token=token, cache_folder=cache_folder,
                                 revision=revision, local_files_only=local_files_only)
        with open(os.path.join(path, cls.config_file_name), encoding="utf-8") as f:
            config = json.load(f)
        try:  # BERT / RoBERTa-like: do not create (and warn about) a pooler layer the weights lack
            model = AutoModel.from_pretrained(path, local_files_only=True,
                                              add_pooling_layer=bool(config.get("has_pooler_layer", True)))
        except TypeError:
            model = AutoModel.from_pretrained(path, local_files_only=True)
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        table_path = os.path.join(path, cls.prompt_file_name)
        table = _load_safetensors(table_path)["prompt_table"] if os.path.exists(table_path) else None
        return cls(model, tokenizer, prompt_table=table, **config)


class _Output:
    """Minimal encoder output: ``last_hidden_state``, ``hidden_states``, ``pooler_output``."""

    def __init__(self, last_hidden_state, hidden_states, pooler_output) -> None:
        self.last_hidden_state = last_hidden_state
        self.hidden_states = hidden_states
        self.pooler_output = pooler_output


class CselabPooling(Module):
    """sentence-transformers module: cselab's pooler, template bias and head as applied at test.

    Args:
        hidden_size: D.
        pooler: ``mask`` (state at ``rep_index``), ``cls`` (``pooler_output``), ``cls_before_pooler``, ``avg``,
            ``avg_first_last``, ``avg_first_last_legacy``, ``avg_top2`` (as :mod:`cselab.encoders.poolers`).
        head: ``none`` | ``mlp`` (Linear + Tanh) | ``mlm_transform`` (Linear + GELU + LayerNorm).
        use_head: apply the head (False for methods whose head trains only: ``mlp_only_train``).
        head_on: with a ``template_bias`` feature: ``difference`` = head(h - bias), ``each`` = head(h) - head(bias).
        layer_norm_eps: LayerNorm epsilon of ``mlm_transform``.
    """

    config_keys = ["hidden_size", "pooler", "head", "use_head", "head_on", "layer_norm_eps"]

    def __init__(self, hidden_size: int, pooler: str = "mask", head: str = "none", use_head: bool = False,
                 head_on: str = "difference", layer_norm_eps: float = 1e-12) -> None:
        super().__init__()
        self.hidden_size, self.pooler, self.head, self.use_head = int(hidden_size), pooler, head, bool(use_head)
        self.head_on, self.layer_norm_eps = head_on, float(layer_norm_eps)
        self.dense = nn.Linear(self.hidden_size, self.hidden_size) if head != "none" else None
        self.LayerNorm = nn.LayerNorm(self.hidden_size, eps=self.layer_norm_eps) if head == "mlm_transform" else None

    def apply_head(self, x: torch.Tensor) -> torch.Tensor:
        """The head on (N, D)."""
        if self.head == "mlp":
            return torch.tanh(self.dense(x))
        return self.LayerNorm(torch.nn.functional.gelu(self.dense(x)))

    def pool(self, features: dict[str, Any]) -> torch.Tensor:
        """The representation (N, D) before bias and head."""
        last, mask = features["token_embeddings"], features["attention_mask"]
        if self.pooler == "mask":
            return last[torch.arange(last.shape[0], device=last.device), features["rep_index"]]
        if self.pooler == "cls":
            return features["pooler_output"]
        if self.pooler == "cls_before_pooler":
            return last[:, 0]
        if self.pooler == "avg":
            return _masked_mean(last, mask)
        hs = features["all_layer_embeddings"]
        if self.pooler == "avg_top2":
            return _masked_mean((hs[-1] + hs[-2]) / 2.0, mask)
        first = hs[1] if self.pooler == "avg_first_last" else hs[0]
        return _masked_mean((first + hs[-1]) / 2.0, mask)

    def forward(self, features: dict[str, Any], **kwargs) -> dict[str, Any]:
        """``sentence_embedding`` = head(pool - bias), head(pool) - head(bias) or pool - bias, as configured."""
        h = self.pool(features)
        bias = features.get("template_bias")
        if bias is not None and self.use_head and self.head_on == "each":
            out = self.apply_head(h) - self.apply_head(bias)
        else:
            if bias is not None:
                h = h - bias
            out = self.apply_head(h) if self.use_head else h
        features["sentence_embedding"] = out
        return features

    def get_embedding_dimension(self) -> int:
        """D."""
        return self.hidden_size

    def save(self, output_path: str, *args, safe_serialization: bool = True, **kwargs) -> None:
        """Config and head weights."""
        self.save_config(output_path)
        self.save_torch_weights(output_path, safe_serialization=safe_serialization)

    @classmethod
    def load(cls, model_name_or_path: str, subfolder: str = "", token: bool | str | None = None,
             cache_folder: str | None = None, revision: str | None = None, local_files_only: bool = False,
             **kwargs) -> CselabPooling:
        """Load config and weights from the module's subfolder."""
        hub = {"subfolder": subfolder, "token": token, "cache_folder": cache_folder, "revision": revision,
               "local_files_only": local_files_only}
        module = cls(**cls.load_config(model_name_or_path, **hub))
        return cls.load_torch_weights(model_name_or_path, model=module, **hub)


# ============================================================================================ END standalone part

_STANDALONE = (_append_period, _masked_mean, _prefix_cache, CselabPromptEncoder, _Output, CselabPooling)

_STANDALONE_HEADER = '''"""Custom sentence-transformers modules of a model exported by cselab (``python -m cselab.export``).

Generated from ``cselab/export.py``; needs torch, transformers, safetensors and sentence-transformers only (not
cselab).  Load the folder with ``SentenceTransformer(path, trust_remote_code=True)``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

import torch
from safetensors.torch import load_file as _load_safetensors
from safetensors.torch import save_file as _save_safetensors
from torch import nn

try:
    from sentence_transformers.base.modules import InputModule, Module
except ImportError:
    from sentence_transformers.models import InputModule, Module
'''


def standalone_source() -> str:
    """The text of ``cselab_st.py``: the custom modules of this file, without any cselab import."""
    import inspect

    parts = [_STANDALONE_HEADER]
    parts += [inspect.getsource(obj) for obj in _STANDALONE]
    return "\n\n".join(p.rstrip() + "\n" for p in parts)


# ============================================================================================ export


def _refuse_unsupported(method) -> None:
    """Raise :class:`ExportError` when ``method`` encodes through something the export cannot reproduce."""
    from cselab.methods import METHODS
    from cselab.methods.base import ContrastiveMethod
    from cselab.methods.baseline import Baseline

    if isinstance(method, Baseline) and method.analysis is not None:
        raise ExportError(
            f"method=baseline pooler={method.analysis} is computed by cselab.analysis (static token embeddings or "
            "the MLM head's top-k tokens), not by a transformer forward pass: it cannot be exported to "
            "sentence-transformers; export a pooler (avg, cls, mask, ...) instead"
        )
    known = tuple(METHODS.values())
    if not isinstance(method, ContrastiveMethod) or type(method) not in known:
        raise ExportError(f"{type(method).__name__} is not one of cselab's methods {sorted(c.__name__ for c in known)}")
    for name in ("embed", "represent", "_forward_views"):
        if getattr(type(method), name) is not getattr(ContrastiveMethod, name):
            raise ExportError(f"{type(method).__name__} overrides {name}: its encoding path is not the one exported")
    if type(method).encode not in (ContrastiveMethod.encode, Baseline.encode):
        raise ExportError(f"{type(method).__name__} overrides encode: its encoding path is not the one exported")


def describe(method) -> dict[str, Any]:
    """What :func:`export` will write for ``method``, or :class:`ExportError` if it cannot be exported.

    Returns:
        ``{"input": "transformer" | "cselab", "output": "pooling" | "pooling+dense" | "cselab",
        "pooler", "head", "use_head", "head_on", "denoise", "prompt_kind", "template", "add_period",
        "max_sentence_tokens"}``.
    """
    _refuse_unsupported(method)
    collate = method.eval_collate
    encoder = method.encoder
    template = collate.views[0].template
    pooler = method.representation_pooler
    use_head = method.head is not None and not method.mlp_only_train
    head = _head_name(method.head)
    if encoder.tuning == "prefix":
        kind = "input_layer" if encoder.prefix_variant == "input_layer" else "prefix"
    elif encoder.tuning == "soft_prompt":
        kind = "soft"
    else:
        kind = "none"
    if pooler == "cls":
        if kind == "input_layer":
            raise ExportError("pooler=cls (the backbone's pooler layer) with an input-layer prompt has no pooler "
                              "output in cselab either; use cls_before_pooler")
        base = encoder.model.get_base_model() if hasattr(encoder.model, "get_base_model") else encoder.model
        layer = getattr(base, "pooler", None)
        if layer is None:
            raise ExportError("pooler=cls needs the backbone's pooler layer; this backbone has none")
    stock_input = template is None and kind == "none" and pooler != "cls"
    stock_output = pooler in ("cls_before_pooler", "avg") and collate.denoise == "none" and (
        not use_head or head == "mlp")
    return {
        "input": "transformer" if stock_input else "cselab",
        "output": ("pooling+dense" if use_head else "pooling") if stock_output else "cselab",
        "pooler": pooler,
        "head": head,
        "use_head": use_head,
        "head_on": method.head_on,
        "denoise": collate.denoise,
        "prompt_kind": kind,
        "template": template,
        "add_period": collate.add_period,
        "max_sentence_tokens": int(collate._budget(0)),
    }


def _head_name(head: nn.Module | None) -> str:
    """``none`` | ``mlp`` | ``mlm_transform`` from the head module (ExportError for another head)."""
    from cselab.encoders.heads import MLMTransformHead, MLPHead

    if head is None:
        return "none"
    if type(head) is MLPHead:
        return "mlp"
    if type(head) is MLMTransformHead:
        return "mlm_transform"
    raise ExportError(f"head {type(head).__name__} is not one of cselab's heads (mlp, mlm_transform)")


def _base_model(encoder) -> nn.Module:
    return encoder.model.get_base_model() if hasattr(encoder.model, "get_base_model") else encoder.model


def _prompt_table(encoder, kind: str) -> torch.Tensor | None:
    """The prompt tensor the exported module re-injects (eval mode: no dropout)."""
    if kind == "soft":
        return encoder.soft_template.weight.detach().float().cpu()
    if kind in ("prefix", "input_layer"):
        peft = encoder.model
        adapter = peft.active_adapter
        prompt_encoder = peft.prompt_encoder[adapter]
        tokens = peft.prompt_tokens[adapter][: encoder.prefix_len].unsqueeze(0).to(
            next(prompt_encoder.parameters()).device)
        was_training = prompt_encoder.training
        prompt_encoder.eval()
        try:
            with torch.no_grad():
                return prompt_encoder(tokens)[0].detach().float().cpu()
        finally:
            prompt_encoder.train(was_training)
    return None


def _soft_slots(collate) -> tuple[list[int], list[int]] | tuple[None, None]:
    """Slot of each prefix / suffix template position (-1: a real token) for a continuous template."""
    if not collate.soft_slots:
        return None, None
    tt = collate.templates[0]
    offset, pre, suf = collate.soft_slots[collate.views[0].template]
    prefix_slots = [-1] * len(tt.prefix_ids)
    suffix_slots = [-1] * len(tt.suffix_ids)
    for k, i in enumerate(pre):
        prefix_slots[i] = offset + k
    for k, j in enumerate(suf):
        suffix_slots[j] = offset + len(pre) + k
    return prefix_slots, suffix_slots


def _input_module(method, plan: dict[str, Any], workdir: Path, needs_hidden: bool):
    encoder, tokenizer = method.encoder, method.tokenizer
    base = _base_model(encoder)
    if plan["input"] == "transformer":
        from sentence_transformers.base.modules import Transformer

        folder = workdir / "backbone"
        previous = base.config.output_hidden_states
        base.config.output_hidden_states = needs_hidden
        try:
            base.save_pretrained(folder)
        finally:
            base.config.output_hidden_states = previous
        tokenizer.save_pretrained(folder)
        return Transformer(str(folder), max_seq_length=plan["max_sentence_tokens"] + 2)
    collate = method.eval_collate
    tt = collate.templates[0]
    prefix_slots, suffix_slots = _soft_slots(collate)
    cfg = base.config
    return CselabPromptEncoder(
        base, tokenizer,
        prefix_ids=list(tt.prefix_ids), suffix_ids=list(tt.suffix_ids),
        rep_offset=tt.rep_offset, rep_in_prefix=tt.rep_in_prefix,
        add_period=plan["add_period"], max_sentence_tokens=plan["max_sentence_tokens"],
        pad_token_id=collate.pad_id, position_offset=encoder.position_offset, padding_idx=encoder.padding_idx,
        prompt_kind=plan["prompt_kind"], prefix_len=encoder.prefix_len, prefix_positions=encoder.prefix_positions,
        num_layers=int(cfg.num_hidden_layers), num_heads=int(cfg.num_attention_heads),
        prefix_slots=prefix_slots, suffix_slots=suffix_slots, denoise=plan["denoise"],
        output_hidden_states=needs_hidden, output_pooler=plan["pooler"] == "cls",
        has_pooler_layer=getattr(base, "pooler", None) is not None, bias_position_offset=collate.position_offset,
        sentence_prefix=collate.sentence_prefix,
        prompt_table=_prompt_table(encoder, plan["prompt_kind"]),
    )


def _output_modules(method, plan: dict[str, Any]) -> list[nn.Module]:
    hidden = method.encoder.hidden_size
    if plan["output"] != "cselab":
        from sentence_transformers.base.modules import Dense
        from sentence_transformers.sentence_transformer.modules import Pooling

        modules: list[nn.Module] = [
            Pooling(hidden, pooling_mode="cls" if plan["pooler"] == "cls_before_pooler" else "mean")]
        if plan["use_head"]:
            dense = method.head.dense
            modules.append(Dense(hidden, hidden, activation_function=nn.Tanh(),
                                 init_weight=dense.weight.detach().float().cpu().clone(),
                                 init_bias=dense.bias.detach().float().cpu().clone()))
        return modules
    head = plan["head"] if plan["use_head"] else "none"
    eps = float(getattr(getattr(method.head, "LayerNorm", None), "eps", 1e-12))
    pooling = CselabPooling(hidden, pooler=plan["pooler"], head=head, use_head=plan["use_head"],
                            head_on=plan["head_on"], layer_norm_eps=eps)
    if head != "none":
        own = {k: v.detach().float().cpu() for k, v in method.head.state_dict().items()}
        pooling.load_state_dict(own, strict=True)
    return [pooling]


def _cls_pooler_is_dense_tanh(method) -> bool:
    layer = getattr(_base_model(method.encoder), "pooler", None)
    dense = getattr(layer, "dense", None)
    act = getattr(layer, "activation", None)
    return isinstance(dense, nn.Linear) and isinstance(act, nn.Tanh)


def export(
    source,
    out_dir: str | os.PathLike,
    *,
    overwrite: bool = False,
    verify: Sequence[str] | bool = True,
    results: str | os.PathLike | None = None,
    repo_id: str | None = None,
) -> dict[str, Any]:
    """Write a sentence-transformers folder that embeds like ``cselab.load(source).encode``.

    Args:
        source: a cselab checkpoint path (``cselab.load`` rebuilds the method) or a method object (any device;
            its weights are copied to CPU).
        out_dir: the folder to write (created; must be absent or empty unless ``overwrite``).
        overwrite: replace an existing non-empty folder.
        verify: sentences to encode both ways after writing (``True``: :data:`PROBE_SENTENCES`; ``False``:
            skip); the largest absolute difference is returned.
        results: the run's ``results.json`` for the model card (default: the one of the checkpoint's run,
            ``<run>/checkpoints/x.ckpt`` -> ``<run>/results.json``, if any).
        repo_id: the Hub id the card's loading snippet names (``--push-to-hub``).

    Returns:
        :func:`describe`'s plan plus ``"path"``, ``"modules"`` (the ``modules.json`` types),
        ``"trust_remote_code"`` (whether loading needs it), ``"max_abs_diff"`` (None without ``verify``) and
        ``"results"`` (the ``results.json`` in the model card, or None).

    Raises:
        ExportError: the method cannot be exported faithfully (module docstring), or ``out_dir`` is not empty.
        FileNotFoundError: no such checkpoint.
    """
    from sentence_transformers import SentenceTransformer

    from cselab.model_card import find_results

    out = Path(out_dir)
    if out.exists() and any(out.iterdir()) and not overwrite:  # refused before the model loads
        raise ExportError(f"{out} exists and is not empty (pass overwrite=True / --overwrite)")
    if isinstance(source, (str, os.PathLike)):
        import cselab

        method, origin = cselab.load(source), str(source)
    else:
        method, origin = source, None
    plan = describe(method)
    if plan["pooler"] == "cls" and not _cls_pooler_is_dense_tanh(method):
        raise ExportError("pooler=cls: the backbone's pooler layer is not dense + tanh; cannot reproduce it")
    was_training, device = method.training, method.device
    method.eval().to("cpu")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            needs_hidden = plan["pooler"] in ("avg_first_last", "avg_first_last_legacy", "avg_top2")
            modules = [_input_module(method, plan, Path(tmp), needs_hidden), *_output_modules(method, plan)]
            st = SentenceTransformer(modules=modules, device="cpu")
            out.parent.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(prefix=f".{out.name}-export-", dir=out.parent))  # same filesystem
            try:
                staging.chmod(0o777 & ~umask())  # mkdtemp makes it 0700: the folder gets the process umask
                st.save(str(staging), create_model_card=False)
                custom = _fix_module_refs(staging)
                if custom:
                    (staging / MODULE_FILE).write_text(standalone_source(), encoding="utf-8")
                results_path = Path(results) if results is not None else find_results(origin)
                _write_provenance(staging, method, plan, origin, custom, results_path, repo_id)
                if out.exists():  # empty, or overwrite (checked above): replaced only once the new one is complete
                    shutil.rmtree(out)
                os.replace(staging, out)
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise
        result = {**plan, "path": str(out), "modules": [m["type"] for m in _read_json(out / "modules.json")],
                  "trust_remote_code": bool(custom), "max_abs_diff": None,
                  "results": str(results_path) if results_path else None}
        if verify:
            sentences = list(PROBE_SENTENCES if verify is True else verify)
            loaded = SentenceTransformer(str(out), device="cpu", trust_remote_code=bool(custom))
            theirs = loaded.encode(sentences, convert_to_tensor=True, batch_size=4).float().cpu()
            ours = method.encode(sentences)
            result["max_abs_diff"] = float((theirs - ours).abs().max())
        return result
    finally:
        method.to(device).train(was_training)


def _read_json(path: Path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _fix_module_refs(folder: Path) -> list[str]:
    """Point ``modules.json`` at ``cselab_st.<Class>`` for the custom modules; return their class names."""
    entries = _read_json(folder / "modules.json")
    custom = []
    for entry in entries:
        name = entry["type"].rsplit(".", 1)[-1]
        if name in (CselabPromptEncoder.__name__, CselabPooling.__name__):
            entry["type"] = f"{Path(MODULE_FILE).stem}.{name}"
            custom.append(name)
    (folder / "modules.json").write_text(json.dumps(entries, indent=2), encoding="utf-8")
    return custom


def _write_provenance(folder: Path, method, plan: dict[str, Any], origin: str | None, custom: list[str],
                      results_path: Path | None = None, repo_id: str | None = None) -> None:
    """``cselab_export.json`` (what was exported, from where) and the model card ``README.md``
    (:func:`cselab.model_card.model_card`: method, backbone, config, the STS table beside the paper's row)."""
    import cselab
    from cselab.model_card import model_card

    info = {"cselab_version": cselab.__version__, "checkpoint": origin,
            "method_class": f"{type(method).__module__}.{type(method).__qualname__}",
            "backbone": dict(method.hparams.get("backbone", {})), "plan": plan,
            "results": str(results_path) if results_path else None}
    (folder / "cselab_export.json").write_text(json.dumps(info, indent=2, default=str), encoding="utf-8")
    results = _read_json(results_path) if results_path is not None else None
    card = model_card(method_class=type(method).__name__, backbone=dict(method.hparams.get("backbone", {})),
                      plan=plan, trust_remote_code=bool(custom), results=results, repo_id=repo_id,
                      hparams=dict(method.hparams))
    (folder / "README.md").write_text(card, encoding="utf-8")


if __name__ == "__main__":  # python -m cselab.export = cselab export
    from cselab.cli.export import main

    sys.exit(main())
