"""The decoder template input: sentences -> whole prompt strings -> left-padded token ids (PromptEOL, PretCoT, KE).

A decoder prompt has no ``[MASK]``: the representation is the hidden state of the prompt's LAST token
(``pooler=last_token``), the one that would predict the next word (PromptEOL's ``means in one word:"``).  The
template is written like the encoder ones, with one ``[X]`` for the sentence (``This sentence : "[X]" means in
one word:"``); the official ``*sent_0*`` / ``_`` spelling is accepted too.

Official rules kept (kongds/scaling_sentemb ``evaluation.py:191-209``, ``ft_llm.py:221-239``; identical in
ZBWpro/PretCoTandKE ``evaluation.py:234-243``, ``train.py:234-259``):

* the prompt is ONE string, ``template.replace([X], sentence).strip()``, tokenized at once with the tokenizer's
  own special tokens (BOS for OPT / LLaMA, none for GPT-2 / Qwen2), never an EOS; a byte-level BPE merges
  across the template / sentence boundary (``."`` is one pre-token), so the pieces are never tokenized apart;
* at evaluation (``eval_rules=True``) the sentence first gets the official evaluation sentence rules
  (:func:`prompteol_sentence`); no truncation at evaluation;
* in training (``max_seq_len`` set) none of these rules: the sentence is tokenized without special tokens, cut
  to ``max_seq_len`` tokens and decoded back to text (:meth:`PromptCollate.train_sentences`), then inserted;
* left padding with pad id 0 (``evaluation.py:143-144``, ``ft_llm.py:334-335``): for LLaMA 0 is ``<unk>``, for
  OPT ``<s>``, for Qwen2 an ordinary token; the attention mask, built from the lengths, hides pads whatever
  their id (the official training mask ``input_ids > 0``, ``ft_llm.py:153``, is the same wherever no real token
  has id 0).

Demonstrations for in-context learning (PromptEOL ``run_icl.sh``) are part of the template string itself
(``conf/prompt/prompteol_icl.yaml``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from .template import MASK, TemplateError, append_period, split_sentence
from .template_input import ViewSpec, field_texts


def prompteol_sentence(sentence: str) -> str:
    """The official evaluation-time sentence rules of PromptEOL / PretCoT / KE, in their order.

    1. append ``.`` unless the sentence is empty or ends in ``. ? " '``;
    2. replace every ``"`` by ``'`` (the template's own ``"`` stay the only double quotes);
    3. replace a final ``?`` by ``.``.

    Source: kongds/scaling_sentemb ``evaluation.py:198-200``; ZBWpro/PretCoTandKE ``evaluation.py:238-242``.
    ``'Is it "raining"?'`` -> ``"Is it 'raining'."``; ``'he said "hi"'`` -> ``"he said 'hi'"``.
    """
    sentence = append_period(sentence).replace('"', "'")
    if len(sentence) > 0 and sentence[-1] == "?":
        sentence = sentence[:-1] + "."
    return sentence


def split_prompt(template: str | None) -> tuple[str, str]:
    """``(before, after)``: the template text around its one ``[X]`` (``("", "")`` for no template).

    The official spelling (``This_sentence_:_"*sent_0*"_means_in_one_word:"``) is translated first: ``_`` ->
    space, ``*cls*`` / ``*sep+*`` dropped (``evaluation.py:194-195``).

    Raises:
        TemplateError: not exactly one ``[X]``, or a ``[MASK]`` (a decoder reads the last token, not a mask).
    """
    if template is None:
        return "", ""
    before, after = split_sentence(template, markers=("*sent_0*", "*sent 0*"))
    if MASK in before or MASK in after:
        raise TemplateError(f"template {template!r} has a [MASK]: decoder prompts are read at their last token "
                            "(method.pooler=last_token); remove the [MASK]")
    return before, after


class PromptCollate:
    """Raw sentences -> left-padded prompt ids for a decoder backbone (``backbone.family=decoder``).

    The same interface as :class:`~cselab.model.template_input.ViewCollate` (``views``, ``tokenize``, ``build``,
    ``__call__``), so the embedding model, the DataModule and ``encode`` use either without knowing which.

    Args:
        tokenizer: a Hugging Face tokenizer (its own special-token rule adds the BOS, if any).
        views: the views of one example (field + template), in loss order.
        max_seq_len: training: the sentence is cut to this many tokens and decoded back before it is inserted
            (official ``cutoff_len = 32``); ``None``: no truncation (evaluation).
        eval_rules: apply :func:`prompteol_sentence` to each sentence (the official evaluation batcher).
        decode_cleanup: the space clean-up of the training decode (`` .`` -> ``.``, `` 's`` -> ``'s`` ...,
            ``tokenizer.clean_up_tokenization``): ``True`` applies it, ``False`` never, ``None`` leaves it to the
            tokenizer's own decode.  The official code ran on transformers of 2023, where GPT-2 / OPT tokenizers
            cleaned up by default and LLaMA's did not; transformers 5 no longer cleans up BPE decodes.

    ``__call__`` / ``build`` return ``input_ids`` (B, V, T) left-padded, ``attention_mask`` (B, V, T),
    ``rep_index`` (B, V) = T - 1 (the last token of every row), ``sent_len`` (B, V) prompt lengths in tokens.

    Raises:
        TemplateError: a view's template is not a decoder template (:func:`split_prompt`).
        KeyError: an example lacks a view's field.
    """

    denoise = "none"

    def __init__(self, tokenizer, views: Sequence[ViewSpec], max_seq_len: int | None = None,
                 eval_rules: bool = False, decode_cleanup: bool | None = None) -> None:
        self.tokenizer = tokenizer
        self.views = list(views)
        self.parts = [split_prompt(v.template) for v in self.views]
        self.max_seq_len = max_seq_len
        self.add_period = bool(eval_rules)
        self.decode_cleanup = decode_cleanup
        self.pad_id = 0  # the official pad id, whatever the tokenizer's own
        self.fields = list(dict.fromkeys(v.field for v in self.views))

    def train_sentences(self, sentences: Sequence[str]) -> list[str]:
        """The official training sentences: each one's first ``max_seq_len`` tokens (no special tokens), decoded
        back (kongds/scaling_sentemb ``ft_llm.py:224-232``).  Unchanged when ``max_seq_len`` is None."""
        if self.max_seq_len is None or not sentences:
            return list(sentences)
        ids = self.tokenizer(list(sentences), add_special_tokens=False)["input_ids"]
        if self.decode_cleanup is None:
            return [self.tokenizer.decode(i[: self.max_seq_len]) for i in ids]
        # transformers 5 skips the clean-up for BPE tokenizers whatever the flag: apply it explicitly
        texts = [self.tokenizer.decode(i[: self.max_seq_len], clean_up_tokenization_spaces=False) for i in ids]
        return [self.tokenizer.clean_up_tokenization(t) for t in texts] if self.decode_cleanup else texts

    def prompts(self, sentences: Sequence[str], view: int = 0) -> list[str]:
        """The prompt strings of ``sentences`` in view ``view``: the sentence rules, then
        ``(before + sentence + after).strip()`` (``evaluation.py:201``, ``ft_llm.py:239``)."""
        if self.add_period:
            sentences = [prompteol_sentence(s) for s in sentences]
        before, after = self.parts[view]
        return [(before + s + after).strip() for s in self.train_sentences(sentences)]

    def prompt_ids(self, texts: Sequence[str], view: int = 0) -> list[list[int]]:
        """Token ids of the prompts of ``texts`` in view ``view`` (with the tokenizer's special tokens)."""
        if not texts:
            return []
        prompts = self.prompts(texts, view)
        return [list(ids) for ids in self.tokenizer(prompts, add_special_tokens=True)["input_ids"]]

    def tokenize(self, texts: Sequence[str]) -> list[list[int]]:
        """The prompt ids of the first view (what ``encode`` sorts by length and batches with :meth:`build`)."""
        return self.prompt_ids(texts, 0)

    def build(self, tokens: Mapping[str, Sequence[Sequence[int]]]) -> dict[str, torch.Tensor]:
        """Left-pad the prompt ids of a single-view collate (``{field: ids per sentence}``)."""
        if len(self.views) != 1:
            raise ValueError("PromptCollate.build takes the prompt ids of one view; call the collate on examples")
        return self._pad([[list(ids)] for ids in tokens[self.views[0].field]])

    def __call__(self, examples: Sequence[Mapping[str, str] | str]) -> dict[str, torch.Tensor]:
        per_view = [self.prompt_ids(field_texts(examples, view.field), v) for v, view in enumerate(self.views)]
        return self._pad([[ids[b] for ids in per_view] for b in range(len(examples))])

    def _pad(self, wrapped: list[list[list[int]]]) -> dict[str, torch.Tensor]:
        batch, n_views = len(wrapped), len(wrapped[0]) if wrapped else len(self.views)
        width = max((len(seq) for row in wrapped for seq in row), default=0)
        input_ids = torch.full((batch, n_views, width), self.pad_id, dtype=torch.long)
        attention = torch.zeros((batch, n_views, width), dtype=torch.long)
        lengths = torch.zeros((batch, n_views), dtype=torch.long)
        for b, row in enumerate(wrapped):
            for v, seq in enumerate(row):
                if not seq:
                    raise ValueError("an empty prompt (no template, an empty sentence and no BOS token) has no "
                                     "last token to read")
                input_ids[b, v, width - len(seq):] = torch.tensor(seq, dtype=torch.long)
                attention[b, v, width - len(seq):] = 1
                lengths[b, v] = len(seq)
        rep_index = torch.full((batch, n_views), width - 1, dtype=torch.long)
        return {"input_ids": input_ids, "attention_mask": attention, "rep_index": rep_index, "sent_len": lengths}
