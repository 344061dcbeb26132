"""Templates: parsing both spellings, errors, rendering around a sentence, truncation, the period rule."""

from __future__ import annotations

import pytest

from cselab.model.template import Template, TemplateError, append_period, tokenize_template
from cselab.model.template_input import ViewCollate, ViewSpec

READABLE = 'This sentence : "[X]" means [MASK] .'
OFFICIAL = '*cls*_This_sentence_:_"*sent_0*"_means*mask*.*sep+*'
COT = 'The sentence of "[X]" means [MASK] , so it can be summarized as [MASK] .'
ROBERTA_OFFICIAL = "*cls*_This_sentence_:_'_*sent_0*_'_means*mask*.*sep+*"  # official run.sh:80
ROBERTA_READABLE = "This sentence : ' [X] ' means [MASK] ."
COT_ROBERTA_OFFICIAL = "*cls*_The_sentence_of_'_*sent_0*_'_means_*mask*_,_so_it_can_be_summarized_as_*mask*_._*sep+*"


def _tokens(tokenizer, ids, attention=None) -> list[str]:
    ids = [int(i) for i, a in zip(ids, attention if attention is not None else [1] * len(ids), strict=True) if a]
    return tokenizer.convert_ids_to_tokens(ids)


# ----------------------------------------------------------------------------------------- parsing


def test_parse_readable() -> None:
    t = Template.parse(READABLE)
    assert t.source == READABLE
    assert t.prefix == 'This sentence : "'
    assert t.suffix == '" means [MASK] .'
    assert t.n_masks == 1
    assert t.mask_index == -1
    assert str(t) == READABLE


def test_parse_official() -> None:
    t = Template.parse(OFFICIAL)
    assert t.source == OFFICIAL
    assert t.prefix == 'This sentence : "'  # no leading space from "*cls*_" (official strips it)
    assert t.suffix == '" means[MASK].'
    assert t.n_masks == 1
    assert not t.space_before_sentence


def test_parse_official_roberta_splits_as_the_official_code() -> None:
    """train.py:618-629: prefix before *sent_0* stripped (RoBERTa), suffix after it kept with its spaces."""
    t = Template.parse(ROBERTA_OFFICIAL)
    assert t.prefix == "This sentence : '"
    assert t.suffix == " ' means[MASK]."
    assert t.space_before_sentence
    assert str(t) == "This sentence : ' [X] ' means[MASK]."
    cot = Template.parse(COT_ROBERTA_OFFICIAL)
    assert cot.prefix == "The sentence of '"
    assert cot.suffix == " ' means [MASK] , so it can be summarized as [MASK] . "  # `_._*sep+*`: trailing space
    assert cot.space_before_sentence and cot.n_masks == 2


def test_readable_form_follows_the_same_split() -> None:
    t = Template.parse(ROBERTA_READABLE)
    assert (t.prefix, t.suffix, t.space_before_sentence) == ("This sentence : '", " ' means [MASK] .", True)
    assert Template.parse("This [X] means [MASK] .").prefix == "This"
    empty = Template.parse("  [X] means [MASK] .")  # nothing before the sentence: no space at test either
    assert (empty.prefix, empty.space_before_sentence) == ("", False)


def test_prefix_strip_is_harmless_for_wordpiece(bert_tokenizer) -> None:
    """The official code strips the prefix for RoBERTa only; cselab strips it always: same BERT ids."""
    for text in (' This sentence of " ', 'This sentence of "'):
        assert bert_tokenizer.encode(text)[:-1] == bert_tokenizer.encode('This sentence of "')[:-1]


def test_both_spellings_give_the_same_bert_ids(bert_tokenizer) -> None:
    a = tokenize_template(Template.parse(READABLE), bert_tokenizer)
    b = tokenize_template(Template.parse(OFFICIAL), bert_tokenizer)
    assert a == b
    assert _tokens(bert_tokenizer, a.prefix_ids) == ["[CLS]", "this", "sentence", ":", '"']
    assert _tokens(bert_tokenizer, a.suffix_ids) == ['"', "means", "[MASK]", ".", "[SEP]"]
    assert (a.rep_in_prefix, a.rep_offset) == (False, 2)


@pytest.mark.parametrize(
    ("template", "fragment"),
    [
        ("This sentence means [MASK] .", "exactly one [X]"),
        ('"[X]" and "[X]" mean [MASK] .', "exactly one [X]"),
        ('This sentence : "[X]" means nothing .', "at least one [MASK]"),
        ("*cls*_This_sentence_means*mask*.*sep+*", "exactly one [X]"),
        ('*cls*_This_sentence_:_"*sent_0*"_means_it.*sep+*', "at least one [MASK]"),
    ],
)
def test_bad_templates_raise_with_the_template_in_the_message(template: str, fragment: str) -> None:
    with pytest.raises(TemplateError) as info:
        Template.parse(template)
    assert template in str(info.value)
    assert fragment in str(info.value)


@pytest.mark.parametrize("mask_index", [1, -2, 5])
def test_mask_index_out_of_range(mask_index: int) -> None:
    with pytest.raises(TemplateError) as info:
        Template.parse(READABLE, mask_index=mask_index)
    assert READABLE in str(info.value)
    assert f"mask_index={mask_index}" in str(info.value)


@pytest.mark.parametrize("template", ["", "   ", None])
def test_empty_template_raises(template) -> None:
    with pytest.raises(TemplateError):
        Template.parse(template)


def test_template_error_is_a_value_error() -> None:
    assert issubclass(TemplateError, ValueError)


# ----------------------------------------------------------------------------------------- rendering


def test_bert_rendering(bert_tokenizer) -> None:
    collate = ViewCollate(bert_tokenizer, [ViewSpec("text", READABLE)])
    out = collate(["the cat sat", "birds fly"])
    assert out["input_ids"].shape == (2, 1, 13)
    first = _tokens(bert_tokenizer, out["input_ids"][0, 0])
    assert first == ["[CLS]", "this", "sentence", ":", '"', "the", "cat", "sat", '"', "means", "[MASK]", ".", "[SEP]"]
    assert out["rep_index"].tolist() == [[10], [9]]
    assert out["sent_len"].tolist() == [[3], [2]]
    for b in range(2):
        rep = int(out["rep_index"][b, 0])
        assert int(out["input_ids"][b, 0, rep]) == bert_tokenizer.mask_token_id
    # dynamic padding: the shorter row is padded with [PAD] and masked out
    assert out["attention_mask"][0, 0].tolist() == [1] * 13
    assert out["attention_mask"][1, 0].tolist() == [1] * 12 + [0]
    assert int(out["input_ids"][1, 0, 12]) == bert_tokenizer.pad_token_id
    second = _tokens(bert_tokenizer, out["input_ids"][1, 0], out["attention_mask"][1, 0])
    assert second == ["[CLS]", "this", "sentence", ":", '"', "birds", "fly", '"', "means", "[MASK]", ".", "[SEP]"]


def test_no_template_wraps_cls_sentence_sep(bert_tokenizer) -> None:
    collate = ViewCollate(bert_tokenizer, [ViewSpec("text")])
    out = collate(["the cat sat"])
    assert _tokens(bert_tokenizer, out["input_ids"][0, 0]) == ["[CLS]", "the", "cat", "sat", "[SEP]"]
    assert out["rep_index"].tolist() == [[0]]


def _mask_positions(ids, mask_id) -> list[int]:
    return [i for i, t in enumerate(ids.tolist()) if t == mask_id]


def test_cot_template_picks_last_mask_by_default_and_first_with_index_0(bert_tokenizer) -> None:
    mask_id = bert_tokenizer.mask_token_id
    last = ViewCollate(bert_tokenizer, [ViewSpec("text", COT)])(["the cat sat", "birds fly"])
    first = ViewCollate(bert_tokenizer, [ViewSpec("text", COT)], mask_index=0)(["the cat sat", "birds fly"])
    assert last["input_ids"].tolist() == first["input_ids"].tolist()
    for b in range(2):
        masks = _mask_positions(last["input_ids"][b, 0], mask_id)
        assert len(masks) == 2
        assert int(last["rep_index"][b, 0]) == masks[1]
        assert int(first["rep_index"][b, 0]) == masks[0]
    # [CLS] the sentence of " | the cat sat | " means [MASK]: the first mask sits at 5 + 3 + 2
    assert int(first["rep_index"][0, 0]) == 10
    assert int(first["rep_index"][1, 0]) == 9


def test_mask_in_prefix(bert_tokenizer) -> None:
    tpl = '[MASK] is the meaning of "[X]" .'
    out = ViewCollate(bert_tokenizer, [ViewSpec("text", tpl)])(["the cat sat", "birds fly"])
    assert out["rep_index"].tolist() == [[1], [1]]
    assert int(out["input_ids"][0, 0, 1]) == bert_tokenizer.mask_token_id
    tt = tokenize_template(Template.parse(tpl), bert_tokenizer)
    assert tt.rep_in_prefix and tt.rep_position(0) == tt.rep_position(7) == 1


def test_roberta_sentence_is_tokenized_separately(roberta_tokenizer) -> None:
    collate = ViewCollate(roberta_tokenizer, [ViewSpec("text", ROBERTA_OFFICIAL)])
    out = collate(["cat and the cat"])
    tokens = _tokens(roberta_tokenizer, out["input_ids"][0, 0])
    assert tokens == [
        "<s>", "This", "Ġsentence", "Ġ:", "Ġ'",
        "cat", "Ġand", "Ġthe", "Ġcat",  # first word without the space marker, the same word inside with it
        "Ġ'", "Ġmeans", "<mask>", ".", "</s>",
    ]  # fmt: skip
    assert int(out["rep_index"][0, 0]) == tokens.index("<mask>")
    # the same text tokenized as one string (the official test encoder) marks the first word differently
    joined = roberta_tokenizer.tokenize("This sentence : ' cat and the cat ' means<mask>.")
    assert "Ġcat" in joined[:6]


def test_official_test_tokenization_marks_the_first_word(roberta_tokenizer, bert_tokenizer) -> None:
    collate = ViewCollate(roberta_tokenizer, [ViewSpec("text", ROBERTA_OFFICIAL)], max_seq_len=None,
                          add_period=True, official_test_tokenization=True)
    out = collate(["cat and the cat"])
    assert _tokens(roberta_tokenizer, out["input_ids"][0, 0]) == roberta_tokenizer.convert_ids_to_tokens(
        roberta_tokenizer("This sentence : ' cat and the cat. ' means<mask>.")["input_ids"])
    assert out["sent_len"].tolist() == [[5]]  # Ġcat Ġand Ġthe Ġcat .
    # the default keeps today's (training) tokenization; WordPiece ids do not change either way
    assert ViewCollate(roberta_tokenizer, [ViewSpec("text", ROBERTA_OFFICIAL)]).official_test_tokenization is False
    bert = [ViewCollate(bert_tokenizer, [ViewSpec("text", OFFICIAL)], add_period=True, official_test_tokenization=flag)
            (["the cat sat"])["input_ids"].tolist() for flag in (False, True)]
    assert bert[0] == bert[1]


def test_official_test_tokenization_needs_views_that_agree(roberta_tokenizer) -> None:
    views = [ViewSpec("text", ROBERTA_OFFICIAL), ViewSpec("text", "*cls*_This_sentence_:_'*sent_0*'_means*mask*.*sep+*")]
    ViewCollate(roberta_tokenizer, views)  # training: each piece apart, fine
    with pytest.raises(ValueError, match="official_test_tokenization"):
        ViewCollate(roberta_tokenizer, views, official_test_tokenization=True)


def test_roberta_official_and_readable_spellings_differ_as_the_bpe_does(roberta_tokenizer) -> None:
    official = tokenize_template(Template.parse(ROBERTA_OFFICIAL), roberta_tokenizer)
    readable = tokenize_template(Template.parse(ROBERTA_READABLE), roberta_tokenizer)
    assert official.prefix_ids == readable.prefix_ids
    assert _tokens(roberta_tokenizer, official.prefix_ids) == ["<s>", "This", "Ġsentence", "Ġ:", "Ġ'"]
    assert _tokens(roberta_tokenizer, official.suffix_ids) == ["Ġ'", "Ġmeans", "<mask>", ".", "</s>"]
    # <mask> has lstrip=True: it swallows the space before it; the "." after it keeps its own space marker
    assert _tokens(roberta_tokenizer, readable.suffix_ids) == ["Ġ'", "Ġmeans", "<mask>", "Ġ.", "</s>"]
    # the spelling without spaces inside the quotes (cselab before issue 12) gives another suffix
    old = tokenize_template(Template.parse("*cls*_This_sentence_:_'*sent_0*'_means*mask*.*sep+*"), roberta_tokenizer)
    assert _tokens(roberta_tokenizer, old.suffix_ids) == ["'", "Ġmeans", "<mask>", ".", "</s>"]


# ----------------------------------------------------------------------------------------- truncation


@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_sentence_truncated_before_wrapping(family: str, bert_tokenizer, roberta_tokenizer) -> None:
    tokenizer = bert_tokenizer if family == "bert" else roberta_tokenizer
    tpl = OFFICIAL if family == "bert" else ROBERTA_OFFICIAL
    sentence = "two dogs are running in the park"
    sent_ids = tokenizer(sentence, add_special_tokens=False)["input_ids"]
    assert len(sent_ids) == 7
    tt = tokenize_template(Template.parse(tpl), tokenizer)
    out = ViewCollate(tokenizer, [ViewSpec("text", tpl)], max_seq_len=3)([sentence])
    assert out["input_ids"][0, 0].tolist() == [*tt.prefix_ids, *sent_ids[:3], *tt.suffix_ids]
    assert out["sent_len"].tolist() == [[3]]
    rep = int(out["rep_index"][0, 0])
    assert rep == len(tt.prefix_ids) + 3 + tt.rep_offset
    assert int(out["input_ids"][0, 0, rep]) == tokenizer.mask_token_id


def test_without_template_the_special_tokens_count(bert_tokenizer) -> None:
    out = ViewCollate(bert_tokenizer, [ViewSpec("text")], max_seq_len=5)(["two dogs are running in the park"])
    assert _tokens(bert_tokenizer, out["input_ids"][0, 0]) == ["[CLS]", "two", "dogs", "are", "[SEP]"]
    assert out["sent_len"].tolist() == [[3]]


def test_max_positions_cuts_the_sentence_never_the_template(bert_tokenizer) -> None:
    tt = tokenize_template(Template.parse(READABLE), bert_tokenizer)
    room = len(tt.prefix_ids) + len(tt.suffix_ids) + 2
    collate = ViewCollate(bert_tokenizer, [ViewSpec("text", READABLE)], max_seq_len=None, max_positions=room)
    out = collate(["two dogs are running in the park"])
    assert out["input_ids"].shape[-1] == room
    assert _tokens(bert_tokenizer, out["input_ids"][0, 0]) == [
        "[CLS]", "this", "sentence", ":", '"', "two", "dogs", '"', "means", "[MASK]", ".", "[SEP]",
    ]  # fmt: skip


def test_no_truncation_when_max_seq_len_is_none(bert_tokenizer) -> None:
    out = ViewCollate(bert_tokenizer, [ViewSpec("text")], max_seq_len=None)(["two dogs are running in the park"])
    assert out["sent_len"].tolist() == [[7]]


# ----------------------------------------------------------------------------------------- period rule


@pytest.mark.parametrize(
    ("sentence", "expected"),
    [
        ("a cat sat", "a cat sat."),
        ("a cat sat.", "a cat sat."),
        ("is it raining?", "is it raining?"),
        ('he said "hi"', 'he said "hi"'),
        ("the dogs'", "the dogs'"),
        ("wow!", "wow!."),  # "!" is not in the official set
        ("a list,", "a list,."),
        ("", ""),
    ],
)
def test_append_period(sentence: str, expected: str) -> None:
    assert append_period(sentence) == expected


def test_eval_collate_appends_the_period_train_collate_does_not(promptbert_method, bert_tokenizer) -> None:
    method = promptbert_method
    assert method.eval_collate.add_period is True
    assert method.train_collate().add_period is False
    ev = method.eval_collate(["the cat sat", "is it raining?"])
    assert _tokens(bert_tokenizer, ev["input_ids"][0, 0]) == [
        "[CLS]", "this", "sentence", "of", '"', "the", "cat", "sat", ".", '"', "means", "[MASK]", ".", "[SEP]",
    ]  # fmt: skip
    assert ev["sent_len"].tolist() == [[4], [4]]  # "is it raining ?" untouched
    tr = method.train_collate()(["the cat sat"])
    assert tr["input_ids"].shape[1] == 2
    assert _tokens(bert_tokenizer, tr["input_ids"][0, 0]) == [
        "[CLS]", "this", "sentence", "of", '"', "the", "cat", "sat", '"', "means", "[MASK]", ".", "[SEP]",
    ]  # fmt: skip
    assert _tokens(bert_tokenizer, tr["input_ids"][0, 1]) == [
        "[CLS]", "this", "sentence", ":", '"', "the", "cat", "sat", '"', "means", "[MASK]", ".", "[SEP]",
    ]  # fmt: skip


def test_official_test_tokenization_with_a_continuous_template(roberta_tokenizer) -> None:
    """The slot table is built from the training ids: a test tokenization that drops a slot is refused."""
    ok = ViewCollate(roberta_tokenizer, [ViewSpec("text", ROBERTA_OFFICIAL)], max_seq_len=None,
                     soft_templates=[ROBERTA_OFFICIAL], official_test_tokenization=True)
    train = ViewCollate(roberta_tokenizer, [ViewSpec("text", ROBERTA_OFFICIAL)], soft_templates=[ROBERTA_OFFICIAL])
    assert ok.soft_slots == train.soft_slots
    with pytest.raises(ValueError, match="trailing whitespace"):  # CoT-BERT's `_._*sep+*` ending
        ViewCollate(roberta_tokenizer, [ViewSpec("text", COT_ROBERTA_OFFICIAL)],
                    soft_templates=[COT_ROBERTA_OFFICIAL], official_test_tokenization=True)
