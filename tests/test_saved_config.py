"""SavedRunConfig: a saved run config read once -- the current layout, the old layouts, absent keys -> defaults."""

from __future__ import annotations

from dataclasses import fields

import pytest

from cselab.report.published import variant_of
from cselab.report.saved_config import SOURCES, SavedRunConfig, config_value

NEW = {
    "method": {"name": "baseline", "pooler": "topk", "denoise": "position", "train": False, "topk": 100,
               "topk_denoise": True, "mlm": {"weight": 0.1, "probability": 0.15}},
    "backbone": {"name": "bert_base", "name_or_path": "bert-base-uncased"},
    "setting": {"name": "unsup"},
    "loss": {"name": "infonce_eh", "margin": "0.3", "ranking": "listmle", "positive_negative_term": False},
    "prompt": {"name": "custom", "template": "*cls*_This_sentence_:_\"*sent_0*\"_means*mask*.*sep+*",
               "train_views": ["a", "a"]},
    "tuning": {"name": "prefix", "variant": "layer_shared", "pre_seq_len": 16},
    "eval": {"whitening": {"enabled": True, "fit_on": "wiki", "k": 256}},
}


def test_the_current_layout_is_read_into_every_field() -> None:
    c = SavedRunConfig.from_config(NEW)
    assert (c.method, c.backbone, c.backbone_name_or_path, c.setting) == \
        ("baseline", "bert_base", "bert-base-uncased", "unsup")
    assert (c.loss, c.loss_margin, c.ranking, c.positive_negative_term) == ("infonce_eh", 0.3, "listmle", False)
    assert (c.prompt, c.prompt_template, c.train_views) == ("custom", NEW["prompt"]["template"], ["a", "a"])
    assert (c.pooler, c.denoise, c.train, c.topk, c.topk_denoise) == ("topk", "position", False, 100, True)
    assert (c.tuning_variant, c.pre_seq_len, c.mlm) == ("layer_shared", 16, True)
    assert (c.whitening, c.whitening_fit_on, c.whitening_k) == (True, "wiki", 256)


@pytest.mark.parametrize("config", [None, {}, {"method": "simcse", "loss": None, "eval": []}])
def test_absent_keys_and_levels_that_are_not_mappings_give_the_defaults(config) -> None:
    c = SavedRunConfig.from_config(config)
    assert c == SavedRunConfig()
    assert (c.method, c.setting, c.loss_margin, c.ranking, c.positive_negative_term, c.train, c.topk) == \
        (None, None, 0.2, "listnet", True, True, 200)
    assert (c.topk_denoise, c.mlm, c.whitening, c.whitening_fit_on, c.whitening_k) == (False, False, False, "nli", None)


def test_old_runs_top_level_pooler_denoise_train_are_read_and_the_new_keys_win() -> None:
    old = {"method": {"name": "prompteol"}, "pooler": "mask", "denoise": "none", "train": False}
    c = SavedRunConfig.from_config(old)
    assert (c.pooler, c.denoise, c.train) == ("mask", "none", False)
    both = {"method": {"name": "prompteol", "pooler": "cls", "denoise": None, "train": True},
            "pooler": "mask", "denoise": "none", "train": False}
    c = SavedRunConfig.from_config(both)
    assert (c.pooler, c.denoise, c.train) == ("cls", None, True)  # present (even null) under method: it wins
    # the labels follow: an old cot_bert run without denoising is still "without denoise"
    assert variant_of({"method": {"name": "cot_bert"}, "denoise": "none"}) == "without denoise"
    assert variant_of({"method": {"name": "prompteol"}, "prompt": {"name": "pretcot"}, "train": False}) == \
        "no fine-tuning: pretcot"


@pytest.mark.parametrize(("saved", "mlm"), [(True, True), (False, False), (None, False), ({}, False),
                                             ({"weight": 0.1}, True), ("yes", None), (0, None)])
def test_method_mlm_old_bool_and_new_options_mapping(saved, mlm) -> None:
    assert SavedRunConfig.from_config({"method": {"mlm": saved}}).mlm is mlm


@pytest.mark.parametrize(("saved", "margin"), [(0.2, 0.2), ("0.5", 0.5), ("x", None), (None, None), ([1], None)])
def test_loss_margin_is_a_float_or_none(saved, margin) -> None:
    assert SavedRunConfig.from_config({"loss": {"margin": saved}}).loss_margin == margin


@pytest.mark.parametrize(("saved", "value"), [(False, False), (True, True), (None, True), ("false", True), (0, True)])
def test_train_and_positive_negative_term_are_false_only_for_a_saved_false(saved, value) -> None:
    c = SavedRunConfig.from_config({"method": {"train": saved}, "loss": {"positive_negative_term": saved}})
    assert (c.train, c.positive_negative_term) == (value, value)


def test_whitening_is_on_only_for_a_mapping_with_a_true_enabled() -> None:
    assert not SavedRunConfig.from_config({"eval": {"whitening": {"enabled": False, "fit_on": "wiki"}}}).whitening
    assert not SavedRunConfig.from_config({"eval": {"whitening": "on"}}).whitening
    assert SavedRunConfig.from_config({"eval": {"whitening": {"enabled": 1}}}).whitening


def test_a_saved_run_config_passes_through_and_labels_as_its_config() -> None:
    c = SavedRunConfig.from_config(NEW)
    assert SavedRunConfig.from_config(c) is c
    assert variant_of(c) == variant_of(NEW) == "+EH (m=0.3) + whitening (wiki), k=256"


def test_every_field_has_its_sources_and_config_value_reads_dotted_keys() -> None:
    derived = {"whitening_fit_on", "whitening_k"}  # read from the eval.whitening node
    assert set(SOURCES) == {f.name for f in fields(SavedRunConfig)} - derived
    assert config_value(NEW, "loss.name") == "infonce_eh"
    assert config_value(NEW, "loss.name.x", "d") == "d" and config_value(None, "a") is None
