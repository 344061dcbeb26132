"""The paper templates are the official strings, and their token ids equal the official code's.

The official rules are written out here by hand from the official sources (kongds/Prompt-BERT @ 690ba6e,
ZBWpro/CoT-BERT @ 3aa7bb4) and applied with the tokenizers of the tiny backbones (BERT WordPiece and a
RoBERTa-style byte-level BPE trained at test time, ``<mask>`` with ``lstrip=True``):

* training (PromptBERT ``train.py:618-629`` split + ``train.py:674-692``; CoT-BERT ``train.py:656-669`` +
  ``train.py:750-781``): ``encode(bs)[:-1] + encode(s, add_special_tokens=False)[:32] + encode(es)[1:]``;
* test (PromptBERT ``evaluation.py:194-202`` + ``:229``; CoT-BERT ``evaluation.py:221-228``): the period rule,
  then the WHOLE string ``template.replace('*sent 0*', s).strip()`` tokenized at once;
* in-training dev (PromptBERT ``trainers.py:105-111`` -> ``models.py:307-335``; CoT-BERT ``trainers.py:78-91``):
  the sentence tokenized alone (no period, no truncation) and re-wrapped as ``[CLS] bs s es [SEP]``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from cselab.model.template import Template, tokenize_template
from cselab.model.template_input import ViewCollate, ViewSpec
from tests.conftest import SENTENCES

PROMPTS = Path(__file__).resolve().parents[1] / "conf" / "prompt"

#: the official strings, verbatim (the source line in the comment)
OFFICIAL = {
    "promptbert": {
        "bert": {
            "view1": '*cls*_This_sentence_of_"*sent_0*"_means*mask*.*sep+*',  # run.sh:98 unsup-bert, :131 sup-bert
            "view2": '*cls*_This_sentence_:_"*sent_0*"_means*mask*.*sep+*',  # run.sh:99 unsup-bert TEMPLATE2
        },
        "roberta": {
            "view1": "*cls*_This_sentence_:_'_*sent_0*_'_means*mask*.*sep+*",  # run.sh:80 unsup, :116 sup-roberta
            "view2": "*cls*_The_sentence_:_'_*sent_0*_'_means*mask*.*sep+*",  # run.sh:81 unsup-roberta TEMPLATE2
        },
    },
    "promptbert_manual": {
        "bert": {"view1": '*cls*_This_sentence_:_"*sent_0*"_means*mask*.*sep+*'},  # run.sh:52 bert-prompt
        "roberta": {"view1": "*cls*_This_sentence_:_'_*sent_0*_'_means*mask*.*sep+*"},  # run.sh:80 spelling
    },
    "cot_bert": {
        "bert": {  # code-for-BERT/train.py:507-509
            "anchor": '*cls*_The_sentence_of_"*sent_0*"_means_*mask*_,_so_it_can_be_summarized_as_*mask*_._*sep+*',
            "positive": '*cls*_The_sentence_:_"*sent_0*"_means_*mask*_,_so_it_can_be_summarized_as_*mask*_._*sep+*',
            "negative": '*cls*_The_sentence_:_"*sent_0*"_does_not_mean_*mask*_,_so_it_cannot_be_summarized_as_'
            "*mask*_._*sep+*",
        },
        "roberta": {  # code-for-RoBERTa/train.py:503-505
            "anchor": "*cls*_The_sentence_of_'_*sent_0*_'_means_*mask*_,_so_it_can_be_summarized_as_*mask*_._*sep+*",
            "positive": "*cls*_The_sentence_:_'_*sent_0*_'_means_*mask*_,_so_it_can_be_summarized_as_*mask*_._*sep+*",
            "negative": "*cls*_The_sentence_:_'_*sent_0*_'_does_not_mean_*mask*_,_so_it_cannot_be_summarized_as_"
            "*mask*_._*sep+*",
        },
    },
}

#: every prompt config that carries paper templates (the CoT-BERT Table 3 ablations have no official string;
#: they must follow the same official rules)
PAPER_PROMPTS = sorted(p.stem for p in PROMPTS.glob("*.yaml") if p.stem.startswith(("promptbert", "cot_bert")))

#: the shared sentences plus the cases where the official rules bite: the period rule (? " ' endings), a
#: capitalised first word, leading punctuation, an empty sentence, and one longer than 32 tokens
EDGE = ["is it raining?", 'he said "hi"', "the dogs'", "Two dogs are running in the park!", '"birds" fly',
        "", " ".join(["a man is playing a guitar"] * 7)]  # fmt: skip
ALL_SENTENCES = [*SENTENCES, *EDGE]


def _cases() -> list[tuple[str, str, str, str]]:
    cases = []
    for name in PAPER_PROMPTS:
        cfg = yaml.safe_load((PROMPTS / f"{name}.yaml").read_text(encoding="utf-8"))
        for family, views in cfg["templates"].items():
            for view, template in views.items():
                cases.append((name, family, view, template))
    return cases


CASES = _cases()
IDS = [f"{n}-{f}-{v}" for n, f, v, _ in CASES]


# ------------------------------------------------------------------ the official rules, written out


def official_bs_es(template: str, tokenizer, family: str) -> tuple[str, str]:
    """PromptBERT train.py:618-629 / CoT-BERT train.py:656-669: the prefix and suffix strings."""
    assert " " not in template  # train.py:620
    t = template.replace("*mask*", tokenizer.mask_token).replace("*sep+*", "").replace("*cls*", "")
    t = t.replace("*sent_0*", " ").split(" ")
    bs = t[0].replace("_", " ")
    if family == "roberta":  # 'roberta' in model_name_or_path
        bs = bs.strip()
    es = t[1].replace("_", " ")
    return bs, es


def official_train_ids(template: str, tokenizer, family: str, s: str, max_seq_length: int = 32) -> list[int]:
    """PromptBERT train.py:674-687: ``bs + s + es`` with the sentence tokenized alone and cut first."""
    bs, es = official_bs_es(template, tokenizer, family)
    bs_ids = tokenizer.encode(bs)[:-1]
    es_ids = tokenizer.encode(es)[1:]  # remove cls or bos
    return bs_ids + tokenizer.encode(s, add_special_tokens=False)[:max_seq_length] + es_ids


def official_test_ids(template: str, tokenizer, s: str) -> list[int]:
    """PromptBERT evaluation.py:194-202 and :229 (CoT-BERT evaluation.py:221-228): one string, stripped."""
    t = template.replace("*mask*", tokenizer.mask_token).replace("_", " ").replace("*sep+*", "").replace("*cls*", "")
    if len(s) > 0 and s[-1] not in ".?\"'":
        s += "."
    return tokenizer([t.replace("*sent 0*", s).strip()])["input_ids"][0]  # batch_encode_plus in 4.2.1


def official_dev_ids(template: str, tokenizer, family: str, s: str) -> list[int]:
    """PromptBERT trainers.py:105-111 + models.py:307-335: the sentence tokenized alone, re-wrapped."""
    bs, es = official_bs_es(template, tokenizer, family)
    bs_ids = tokenizer.encode(bs, add_special_tokens=False)  # train.py:783-784 (model.bs / model.es)
    es_ids = tokenizer.encode(es, add_special_tokens=False)
    ii = tokenizer([s])["input_ids"][0]  # batch_encode_plus in 4.2.1
    ni = ii[:1] + bs_ids
    if len(ii) > 2:
        ni += ii[1:-1]
    return ni + es_ids + ii[-1:]


# ------------------------------------------------------------------ helpers


def _tok(family: str, bert_tokenizer, roberta_tokenizer):
    return bert_tokenizer if family == "bert" else roberta_tokenizer


def _rows(out: dict) -> list[list[int]]:
    ids, mask = out["input_ids"][:, 0], out["attention_mask"][:, 0]
    return [[int(t) for t, m in zip(row, am, strict=True) if m] for row, am in zip(ids, mask, strict=True)]


def _check(out: dict, expected: list[list[int]], mask_id: int) -> None:
    assert _rows(out) == expected
    for b, row in enumerate(expected):  # the representation is the last [MASK] of the official input
        assert int(out["rep_index"][b, 0]) == max(i for i, t in enumerate(row) if t == mask_id)


# ------------------------------------------------------------------ the strings


@pytest.mark.parametrize("name", sorted(OFFICIAL))
def test_paper_prompts_are_the_official_strings(name: str) -> None:
    cfg = yaml.safe_load((PROMPTS / f"{name}.yaml").read_text(encoding="utf-8"))
    assert cfg["templates"] == OFFICIAL[name]


@pytest.mark.parametrize(("name", "family", "view", "template"), CASES, ids=IDS)
def test_paper_templates_follow_the_official_spelling(name: str, family: str, view: str, template: str) -> None:
    assert template.startswith("*cls*_") and template.endswith("*sep+*") and " " not in template
    assert template.count("*sent_0*") == 1
    if family == "roberta":  # the official RoBERTa quoting: ' with a space on each side of the sentence
        assert "'_*sent_0*_'" in template
    else:
        assert '"*sent_0*"' in template


# ------------------------------------------------------------------ the token ids


@pytest.mark.parametrize(("name", "family", "view", "template"), CASES, ids=IDS)
def test_training_ids_equal_the_official_piecewise_formula(
    name: str, family: str, view: str, template: str, bert_tokenizer, roberta_tokenizer
) -> None:
    tok = _tok(family, bert_tokenizer, roberta_tokenizer)
    out = ViewCollate(tok, [ViewSpec("text", template)], max_seq_len=32)(ALL_SENTENCES)
    expected = [official_train_ids(template, tok, family, s) for s in ALL_SENTENCES]
    _check(out, expected, tok.mask_token_id)
    # the official denoising template is encode(bs + es), asserted equal to the pieces (train.py:785-792)
    bs, es = official_bs_es(template, tok, family)
    tt = tokenize_template(Template.parse(template), tok)
    assert list(tt.prefix_ids + tt.suffix_ids) == tok.encode(bs + es)


@pytest.mark.parametrize(("name", "family", "view", "template"), CASES, ids=IDS)
def test_test_ids_equal_the_official_whole_string(
    name: str, family: str, view: str, template: str, bert_tokenizer, roberta_tokenizer
) -> None:
    tok = _tok(family, bert_tokenizer, roberta_tokenizer)
    collate = ViewCollate(tok, [ViewSpec("text", template)], max_seq_len=None, add_period=True,
                          official_test_tokenization=True)
    out = collate(ALL_SENTENCES)
    _check(out, [official_test_ids(template, tok, s) for s in ALL_SENTENCES], tok.mask_token_id)


@pytest.mark.parametrize(("name", "family", "view", "template"), CASES, ids=IDS)
def test_dev_ids_equal_the_official_rewrapping(
    name: str, family: str, view: str, template: str, bert_tokenizer, roberta_tokenizer
) -> None:
    tok = _tok(family, bert_tokenizer, roberta_tokenizer)
    out = ViewCollate(tok, [ViewSpec("text", template)], max_seq_len=None)(ALL_SENTENCES)
    _check(out, [official_dev_ids(template, tok, family, s) for s in ALL_SENTENCES], tok.mask_token_id)


def test_promptbert_test_bias_template_equals_the_official_one(bert_tokenizer, roberta_tokenizer) -> None:
    """PromptBERT evaluation.py:50-56 (sup, ``--mask_embedding_sentence_delta`` at test): the bias template is
    the whole template string, stripped, ``'   '`` -> ``' '`` "for roberta tokenizer"; cselab's test-time
    prefix + suffix ids are the same."""
    for family, views in OFFICIAL["promptbert"].items():
        tok = _tok(family, bert_tokenizer, roberta_tokenizer)
        for template in views.values():
            t = template.replace("*mask*", tok.mask_token).replace("*sep+*", "").replace("*cls*", "")
            t = t.replace("*sent_0*", " ")
            official = tok([t.replace("_", " ").strip().replace("   ", " ")])["input_ids"][0]
            tt = tokenize_template(Template.parse(template), tok, whole_string=True)
            assert list(tt.prefix_ids + tt.suffix_ids) == official


# ------------------------------------------------------------------ the rules really bite on the tiny BPE


def test_roberta_test_and_training_ids_differ_as_the_official_ones_do(roberta_tokenizer) -> None:
    tok = roberta_tokenizer
    template = OFFICIAL["promptbert"]["roberta"]["view1"]
    s = "a cat sat."  # ends in ".": the period rule leaves it alone
    train, test = official_train_ids(template, tok, "roberta", s), official_test_ids(template, tok, s)
    assert tok.convert_ids_to_tokens(train) == [
        "<s>", "This", "Ġsentence", "Ġ:", "Ġ'", "a", "Ġcat", "Ġsat", ".", "Ġ'", "Ġmeans", "<mask>", ".", "</s>"]
    assert tok.convert_ids_to_tokens(test) == [
        "<s>", "This", "Ġsentence", "Ġ:", "Ġ'", "Ġa", "Ġcat", "Ġsat", ".", "Ġ'", "Ġmeans", "<mask>", ".", "</s>"]


def test_cot_roberta_training_suffix_keeps_the_trailing_space_test_drops_it(roberta_tokenizer) -> None:
    tok = roberta_tokenizer
    template = OFFICIAL["cot_bert"]["roberta"]["anchor"]
    train = tok.convert_ids_to_tokens(official_train_ids(template, tok, "roberta", "birds fly"))
    test = tok.convert_ids_to_tokens(official_test_ids(template, tok, "birds fly"))
    assert train[-4:] == ["<mask>", "Ġ.", "Ġ", "</s>"]  # es = " ' means <mask> , ... <mask> . " (`_._*sep+*`)
    assert test[-3:] == ["<mask>", "Ġ.", "</s>"]
    train_tt = tokenize_template(Template.parse(template), tok)
    test_tt = tokenize_template(Template.parse(template), tok, whole_string=True)
    assert test_tt.suffix_ids == train_tt.suffix_ids[:-2] + train_tt.suffix_ids[-1:]
    assert test_tt.prefix_ids == train_tt.prefix_ids and test_tt.sentence_prefix == " "
    assert train_tt.sentence_prefix == ""


def test_an_unknown_train_tokenization_is_refused_by_name(bert_tokenizer) -> None:
    """``ViewCollate`` built directly: a ``train_tokenization`` other than promptbert / sncse is named, not read as
    PromptBERT's (the sentence budget would silently exclude the template)."""
    with pytest.raises(ValueError, match=r"train_tokenization='sncse2': expected one of \('promptbert', 'sncse'\)"):
        ViewCollate(bert_tokenizer, [ViewSpec("text", "[X]")], max_seq_len=32, train_tokenization="sncse2")
