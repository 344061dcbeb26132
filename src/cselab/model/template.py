"""Discrete templates: parsing, tokenization around a sentence, [MASK] positions.

Two spellings are accepted and parse to the same :class:`Template`:

* the readable form used in the papers, ``This sentence : "[X]" means [MASK] .`` -- exactly one ``[X]``
  (the sentence) and one or more ``[MASK]``;
* the official PromptBERT / CoT-BERT mini-language, ``*cls*_This_sentence_:_"*sent_0*"_means*mask*.*sep+*``
  (``_`` is a space, ``*cls*`` / ``*sep+*`` are the special tokens that every input gets anyway, ``*mask*``
  the mask token, ``*sent_0*`` the sentence).  The paper configs use the official strings verbatim (RoBERTa:
  ``*cls*_This_sentence_:_'_*sent_0*_'_means*mask*.*sep+*``, spaces inside the quotes) so that the token ids
  equal the official code's (RoBERTa's BPE distinguishes ``means[MASK].`` from ``means [MASK] .`` and
  ``'`` from `` '``).

Both spellings follow the official split (PromptBERT ``train.py:618-629``, CoT-BERT ``train.py:656-669``):
the text before ``[X]`` is the prefix, ``.strip()``-ed (the official code strips it for RoBERTa; for WordPiece
stripping changes no id); the text after ``[X]`` is the suffix, kept exactly as written (so the RoBERTa suffix
`` ' means<mask>.`` starts with a space and CoT-BERT's ``..._._*sep+*`` ends with one).

Tokenization follows the official training code (PromptBERT ``train.py:674-692``) and in-training dev encoder
(``prompt_bert/trainers.py:105-111`` -> ``prompt_bert/models.py:307-335``): prefix, sentence and suffix are tokenized on their own, the sentence is
truncated to ``max_seq_len`` tokens BEFORE it is wrapped, so the template is never cut and, for RoBERTa, the
first word of the sentence carries no leading-space marker.  Input = ``[CLS] prefix sentence suffix [SEP]``.

The official TEST encoder (``evaluation.py:194-202``, CoT-BERT ``evaluation.py:221-228``) instead tokenizes the whole string
``(prefix + " " + sentence + suffix).strip()`` at once: for RoBERTa the sentence's first word then carries the
space marker when whitespace precedes ``[X]`` in the template (:attr:`Template.space_before_sentence`), and
the suffix loses its trailing whitespace.  ``tokenize_template(..., whole_string=True)`` and
``ViewCollate(official_test_tokenization=True)`` reproduce those ids piecewise.
"""

from __future__ import annotations

import string
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

SENT = "[X]"
MASK = "[MASK]"
_OFFICIAL_MARKERS = ("*sent_0*", "*mask*", "*cls*", "*sep+*")


class TemplateError(ValueError):
    """A template string that cannot be used (no / several ``[X]``, no ``[MASK]``, bad mask index)."""


def _from_official(template: str) -> str:
    """Translate the official mini-language (``*sent_0*``, ``*mask*``, ``_``) into the readable form.

    Every ``_`` becomes a space, ``*cls*`` and ``*sep+*`` are dropped (PromptBERT ``train.py:621-623``); the
    space that ``*cls*_`` leaves at the start goes with the prefix strip in :meth:`Template.parse`.
    """
    text = template.replace("*cls*", "").replace("*sep+*", "")
    text = text.replace("*sent_0*", SENT).replace("*mask*", MASK).replace("*sent 0*", SENT)
    return text.replace("_", " ")


def split_sentence(template: str, markers: Sequence[str] = _OFFICIAL_MARKERS) -> tuple[str, str]:
    """``(before, after)``: the text of ``template`` around its one ``[X]``, the official spelling translated first
    (:func:`_from_official`) when the string holds one of ``markers``.

    Raises:
        TemplateError: not a non-empty string, or not exactly one ``[X]``; the message shows the template.
    """
    if not isinstance(template, str) or not template.strip():
        raise TemplateError(f"a template must be a non-empty string, got {template!r}")
    text = _from_official(template) if any(m in template for m in markers) else template
    if text.count(SENT) != 1:
        raise TemplateError(f"template {template!r} must contain exactly one {SENT} (the sentence), "
                            f"found {text.count(SENT)}")
    before, after = text.split(SENT)
    return before, after


@dataclass(frozen=True)
class Template:
    """A parsed template: the text around the sentence, with ``[MASK]`` markers kept symbolic.

    Attributes:
        source: the string as written in the config (shown in error messages).
        prefix: text before ``[X]``, stripped at both ends (may contain ``[MASK]``).
        suffix: text after ``[X]``, exactly as written (may contain ``[MASK]``).
        mask_index: which ``[MASK]`` is the representation, Python-style (``-1``: the last one, as CoT-BERT;
            PromptBERT templates have one).
        space_before_sentence: whitespace separates a non-empty prefix from ``[X]`` (``'_*sent_0*``): the
            official test encoder, which tokenizes the whole string, then gives RoBERTa's first sentence word
            its leading-space marker.
    """

    source: str
    prefix: str
    suffix: str
    mask_index: int = -1
    space_before_sentence: bool = False
    n_masks: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        n = self.prefix.count(MASK) + self.suffix.count(MASK)
        object.__setattr__(self, "n_masks", n)
        if not -n <= self.mask_index < n:
            raise TemplateError(
                f"template {self.source!r} has {n} [MASK] token(s); prompt.mask_index={self.mask_index} "
                f"must be in [{-n}, {n - 1}]"
            )

    @classmethod
    def parse(cls, template: str, mask_index: int = -1) -> Template:
        """Parse a template string (readable or official spelling).

        Raises:
            TemplateError: no ``[X]``, more than one ``[X]``, or no ``[MASK]``; the message shows the template.
        """
        before, suffix = split_sentence(template)
        if MASK not in before and MASK not in suffix:  # [X] and [MASK] cannot overlap
            raise TemplateError(f"template {template!r} must contain at least one {MASK}, found none")
        prefix = before.strip()  # official train.py:626-628 (RoBERTa); WordPiece ids do not change
        space = bool(prefix) and before[-1].isspace()
        return cls(source=template, prefix=prefix, suffix=suffix, mask_index=mask_index,
                   space_before_sentence=space)

    def __str__(self) -> str:
        space = " " if self.space_before_sentence else ""
        return f"{self.prefix}{space}{SENT}{self.suffix}"


@dataclass(frozen=True)
class TokenizedTemplate:
    """A template's token ids for one tokenizer.

    Attributes:
        prefix_ids: ``[CLS]`` + prefix tokens (the ids before the sentence).
        suffix_ids: suffix tokens + ``[SEP]`` (the ids after the sentence).
        rep_offset: where the representation [MASK] sits: if ``rep_in_prefix`` it is the index into the full
            input; otherwise the index counted from the first suffix token, so the full-input index is
            ``len(prefix_ids) + sentence_length + rep_offset``.
        rep_in_prefix: whether the representation [MASK] is in the prefix.
        sentence_prefix: text to put before the sentence when tokenizing it: ``" "`` for the official test
            tokenization (``whole_string=True``) of a template with whitespace before ``[X]``, else ``""``.
    """

    prefix_ids: tuple[int, ...]
    suffix_ids: tuple[int, ...]
    rep_offset: int
    rep_in_prefix: bool
    sentence_prefix: str = ""

    def rep_position(self, sent_len: int) -> int:
        """Index of the representation token in ``prefix_ids + sentence + suffix_ids``."""
        if self.rep_in_prefix:
            return self.rep_offset
        return len(self.prefix_ids) + sent_len + self.rep_offset

    def wrap(self, sent_ids: list[int]) -> list[int]:
        """``[CLS] prefix sentence suffix [SEP]`` as a list of ids."""
        return [*self.prefix_ids, *sent_ids, *self.suffix_ids]


def _encode_piece(tokenizer, text: str) -> list[int]:
    """Tokenize template text with ``[MASK]`` markers, the markers becoming ``tokenizer.mask_token_id``.

    The text between markers is tokenized by the tokenizer itself with the real mask token string in place,
    so tokenizer-specific rules (RoBERTa's ``<mask>`` absorbing the space before it) apply as in the
    official code, which tokenized the template string with the mask token inserted.
    """
    if not text:
        return []
    real = text.replace(MASK, tokenizer.mask_token)
    return list(tokenizer(real, add_special_tokens=False)["input_ids"])


def tokenize_template(template: Template | None, tokenizer, whole_string: bool = False,
                      keep_space_before_sentence: bool = False) -> TokenizedTemplate:
    """Tokenize a template for ``tokenizer``; ``None`` gives the plain ``[CLS] sentence [SEP]`` wrapping.

    Args:
        template: the parsed template, or ``None``.
        tokenizer: a Hugging Face tokenizer.
        whole_string: ``False`` (training and the in-training dev encoder, official ``train.py:674-692``):
            prefix and suffix as parsed.  ``True`` (the official TEST encoder, ``evaluation.py:194-202``, which
            tokenizes ``template.replace('*sent 0*', s).strip()`` at once): the suffix loses its trailing
            whitespace, and ``sentence_prefix`` is ``" "`` when whitespace precedes ``[X]``, so that
            ``prefix_ids + ids(sentence_prefix + sentence) + suffix_ids`` are the official test ids (as long as
            the BPE pre-tokenizer does not join template and sentence characters, which whitespace or
            WordPiece's punctuation split rule out for every paper template).
        keep_space_before_sentence: (training, not ``whole_string``) tokenize the prefix with the whitespace that
            precedes ``[X]`` (SNCSE ``train_SNCSE.py:447-450`` tokenizes ``'This sentence : " '``: RoBERTa's BPE
            gives a lone ``Ġ`` token at its end; WordPiece ids do not change).

    Raises:
        TemplateError: the tokenizer has no mask token, or the number of mask ids after tokenization differs
            from the number of ``[MASK]`` markers (a tokenizer that splits its own mask token).
    """
    cls_id, sep_id = tokenizer.cls_token_id, tokenizer.sep_token_id
    if cls_id is None or sep_id is None:
        raise TemplateError(f"tokenizer {type(tokenizer).__name__} has no cls/sep token; cannot wrap sentences")
    if template is None:
        return TokenizedTemplate((cls_id,), (sep_id,), rep_offset=0, rep_in_prefix=True)
    if tokenizer.mask_token_id is None:
        raise TemplateError(f"template {template.source!r} needs a mask token; the tokenizer has none")
    prefix_text = template.prefix
    if keep_space_before_sentence and not whole_string and template.space_before_sentence:
        prefix_text += " "
    prefix = [cls_id, *_encode_piece(tokenizer, prefix_text)]
    suffix_text = template.suffix.rstrip() if whole_string else template.suffix
    suffix = [*_encode_piece(tokenizer, suffix_text), sep_id]
    mask_id = tokenizer.mask_token_id
    # all mask positions, in order: prefix ones as absolute indices, suffix ones relative to the suffix
    masks = [(True, i) for i, t in enumerate(prefix) if t == mask_id]
    masks += [(False, i) for i, t in enumerate(suffix) if t == mask_id]
    if len(masks) != template.n_masks:
        raise TemplateError(
            f"template {template.source!r}: expected {template.n_masks} mask token(s) after tokenization, "
            f"got {len(masks)}"
        )
    in_prefix, offset = masks[template.mask_index]
    sentence_prefix = " " if whole_string and template.space_before_sentence else ""
    return TokenizedTemplate(tuple(prefix), tuple(suffix), rep_offset=offset, rep_in_prefix=in_prefix,
                             sentence_prefix=sentence_prefix)


def append_period_spaced(sentence: str) -> str:
    """SNCSE's period rule: append `` .`` (space, period) to a sentence whose stripped form does not end in a
    ``string.punctuation`` mark.

    Source: Sense-GVT/SNCSE ``train_SNCSE.py:468-469`` (training) and ``bert_prediction.py:68`` /
    ``roberta_prediction.py:68`` (test): ``s + " ." if s.strip()[-1] not in string.punctuation``.  A blank
    sentence is returned unchanged (the official code raises IndexError on it).
    """
    stripped = sentence.strip()
    if stripped and stripped[-1] not in string.punctuation:
        return sentence + " ."
    return sentence


def period_rule(rule: bool | str):
    """The sentence rule of ``add_period`` / ``prompt.add_period_at_eval``: ``true`` / ``promptbert`` ->
    :func:`append_period`, ``sncse`` -> :func:`append_period_spaced`, ``false`` -> None.

    Raises:
        ValueError: another value (lists the accepted ones).
    """
    if rule is False or rule is None:
        return None
    if rule is True or rule == "promptbert":
        return append_period
    if rule == "sncse":
        return append_period_spaced
    raise ValueError(f"add_period_at_eval={rule!r}: expected true (= promptbert), false, promptbert or sncse")


def append_period(sentence: str) -> str:
    """PromptBERT's evaluation rule: append ``.`` to a sentence that does not end in ``. ? " '``.

    Source: official PromptBERT ``evaluation.py:201`` (CoT-BERT ``evaluation.py:227``): ``if s[-1] not in '.?"\\'': s += '.'``.
    An empty sentence is returned unchanged.
    """
    if len(sentence) > 0 and sentence[-1] not in ".?\"'":
        return sentence + "."
    return sentence


def check_template_override(template: str | None, prompt: str, views: Mapping[str, Sequence[str]]) -> None:
    """``prompt.template`` is the template of ``prompt=custom`` only: on another prompt (``template: null`` in
    its file) or on ``prompt=none``, refuse with the overrides to type instead.

    Args:
        template: ``prompt.template``; prompt: ``prompt.name`` (``none`` for ``prompt=none``); views: the
            prompt's view names by backbone family (``prompt.templates``).

    Raises:
        TemplateError: names the prompt, its views and the two ways to use the template.
    """
    if template is None or prompt == "custom":
        return
    one_view = ""
    if views:
        family, names = next(iter(views.items()))
        one_view = (f", or change one view of prompt={prompt} (its views: "
                    + "; ".join(f"{f}: {', '.join(v)}" for f, v in views.items())
                    + f"): prompt.templates.{family}.{names[0]}='{template}'")
    raise TemplateError(
        f"prompt.template='{template}' is read only by prompt=custom, but prompt={prompt}. To evaluate or train "
        f"with this template, type: prompt=custom prompt.template='{template}'{one_view}")


def check_prompt_views(prompt: str, family: str, families: Sequence[str], views: Mapping[str, str | Exception],
                       keys: Mapping[str, str], named: Sequence[tuple[str, str | None]],
                       parse: Callable[[str], object]) -> None:
    """Every template of a prompt for the backbone's family parsed as the model will, and the views the prompt
    names present: before any weights load.

    Args:
        prompt: ``prompt.name``; family: ``backbone.family``; families: the families ``prompt.templates`` has.
        views: view -> its template string, or the error its value raised when it was read (``prompt=icl_file``
            with a missing file); None for a family the prompt lacks.
        keys: view -> the config key(s) its string comes from (``prompt.template`` for ``prompt=custom``,
            ``prompt.file, prompt.line`` for ``prompt=icl_file``, else ``prompt.templates.<family>.<view>``).
        named: ``(config key, view)`` of the views the prompt names (``train_views``, ``sup_view``, ``eval_view``).
        parse: the family's parser (:meth:`Template.parse` with ``prompt.mask_index``, or
            :func:`cselab.model.decoder_input.split_prompt` for decoders).

    Raises:
        TemplateError: names the config key, the value and why.
    """
    if family not in families:
        raise TemplateError(f"prompt={prompt} has no templates for backbone.family={family} "
                            f"(prompt.templates has {sorted(families)})")
    for key, view in named:
        if view is not None and view not in views:
            raise TemplateError(f"{key} names the view {view!r}, which prompt.templates.{family} lacks "
                                f"(its views: {sorted(views)})")
    for view, template in views.items():
        if isinstance(template, Exception):
            raise TemplateError(f"{keys[view]}: {template}") from template
        try:
            parse(template)
        except TemplateError as err:
            raise TemplateError(f"{keys[view]}={template!r} (prompt={prompt}, backbone.family={family}): "
                                f"{err}") from err
