"""The typed embedding spec (:mod:`cselab.model.spec`): defaults, rules, serialisation, and the checkpoints
and exports written before it (``tests/data/legacy_v1``, by main b00f39d) loading and encoding identically."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from cselab.methods.checks import check_module, split_legacy
from cselab.model.spec import ConfigError, EmbeddingSpec, TuningSpec

ROOT = Path(__file__).resolve().parents[1]
LEGACY = ROOT / "tests" / "data" / "legacy_v1"


def test_defaults_round_trip_and_json() -> None:
    spec = EmbeddingSpec()
    assert (spec.pooler, spec.head_on, spec.tuning, spec.mlp_only_train) == ("cls", "difference", TuningSpec(), True)
    data = json.loads(json.dumps(spec.to_dict()))
    assert data["spec_version"] == 2 and EmbeddingSpec.from_dict(data) == spec
    prefix = EmbeddingSpec(tuning={"name": "prefix", "pre_seq_len": 4, "_doc": "ignored"}, dev_encoder={"denoise": True})
    assert prefix.tuning == TuningSpec("prefix", pre_seq_len=4) and prefix.tuning.dropout_value == 0.1
    assert prefix.dev_encoder.denoise is False  # no template bias to subtract
    assert TuningSpec("lora").dropout_value == 0.05
    assert EmbeddingSpec.from_dict(prefix.to_dict()) == prefix
    with pytest.raises(AttributeError):
        spec.pooler = "avg"  # frozen


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"pooler": "max"}, "method.pooler='max': expected cls, "),
    ({"head_on": "both"}, "method.head_on='both': expected difference or each"),
    ({"denoise": "position"}, "method.denoise=position needs a template"),
    ({"pooler": "mask"}, "method.pooler=mask needs a template"),
    ({"denoise_at_eval": True}, "method.denoise_at_eval=true needs method.denoise"),
    ({"eval_precision": "fp16"}, "eval.precision='fp16': expected auto, 32 or bf16"),
    ({"tuning": {"name": "prefix", "pre_seq_len": 0}}, "tuning.pre_seq_len must be >= 1"),
    ({"tuning": {"name": "prefix", "pre_seq_length": 4}}, r"tuning: unknown key\(s\) \['pre_seq_length'\]"),
    ({"tuning": {"name": "lora"}}, "tuning=lora is the decoder LLMs' tuning"),
    ({"family": "decoder", "pooler": "mask", "eval_view": ("text", "[X] [MASK]")}, "Pretended CoT"),
    ({"dev_encoder": {"period": True}}, r"method.dev_encoder: unknown key\(s\) \['period'\]"),
])
def test_refusals_name_the_key(kwargs, message) -> None:
    with pytest.raises(ConfigError, match=message):
        EmbeddingSpec(**kwargs)


def test_from_config_reads_the_prompt_and_refuses_what_is_not_a_setting() -> None:
    from cselab.model.template_input import ViewSpec

    views = [ViewSpec("text", "a [X] b [MASK] ."), ViewSpec("text", "c [X] d [MASK] .")]
    spec = EmbeddingSpec.from_config({"pooler": "mask", "head_on": None, "prompt": {"mask_index": 0, "layer": -2,
                                                                                    "add_period_at_eval": True}},
                                     family="bert", train_views=views, eval_view=views[0])
    assert (spec.mask_index, spec.pool_layer, spec.add_period_at_eval, spec.head_on) == (0, -2, True, "difference")
    with pytest.raises(ConfigError, match="module.model.train_views is not a setting"):
        EmbeddingSpec.from_config({"train_views": []}, family="bert", train_views=views, eval_view=views[0])
    with pytest.raises(ConfigError, match=r"module.model: unknown key\(s\) \['poolr'\]"):
        EmbeddingSpec.from_config({"poolr": "avg"}, family="bert", train_views=views, eval_view=views[0])


def test_the_old_flat_module_spelling_is_refused_naming_the_new_key() -> None:
    from cselab.io.config import moved_key_error
    from cselab.methods.checks import MOVED_MODULE_KEYS
    from cselab.methods.simcse.method import SimCSE

    backbone = {"name_or_path": "unused", "family": "bert"}
    with pytest.raises(ConfigError, match=r"module.pooler: the embedding settings moved to module.model "
                                          r"\(module.model.pooler\)"):
        check_module(SimCSE, {"backbone": backbone, "pooler": "avg"})
    with pytest.raises(ConfigError, match=r"module.lr: .* module.optim \(module.optim.lr\)"):
        check_module(SimCSE, {"backbone": backbone, "model": {}, "lr": 1e-5})
    message = moved_key_error(["module.head_on=each"], MOVED_MODULE_KEYS)
    assert "type module.model.head_on=each" in message
    assert split_legacy({"backbone": backbone, "pooler": "avg", "lr": 1.0, "setting": "sup"}) == {
        "backbone": backbone, "setting": "sup", "model": {"pooler": "avg"}, "optim": {"lr": 1.0}}


def test_the_head_on_default_is_written_once() -> None:
    """``head_on``'s default lives in the spec only (conf/config.yaml passes null; no other source file has it)."""
    sources = [p for p in (ROOT / "src" / "cselab").rglob("*.py") if p.name != "spec.py"]
    assert not [p for p in sources if 'head_on: str = "difference"' in p.read_text()
                or '"head_on", "difference"' in p.read_text()]
    assert "head_on: ${oc.select:method.head_on,null}" in (ROOT / "conf" / "config.yaml").read_text()


# --------------------------------------------------------------------- checkpoints and exports of the old main
@pytest.fixture(scope="module")
def legacy_backbones(tmp_path_factory):
    sys.path.insert(0, str(ROOT / "scripts"))
    from parity_snapshot import tiny_backbones

    return tiny_backbones(tmp_path_factory.mktemp("legacy"))


@pytest.fixture(scope="module")
def expected() -> dict:
    return json.loads((LEGACY / "expected.json").read_text())


CASES = ["promptbert_unsup_bert", "promptbert_sup_bert", "dcpcse_unsup_roberta"]


@pytest.mark.parametrize("case", CASES)
def test_an_old_checkpoint_loads_and_encodes_identically(case, legacy_backbones, expected) -> None:
    import cselab

    info = expected["cases"][case]
    method = cselab.load(LEGACY / f"{case}.ckpt", backbone={"name_or_path": str(legacy_backbones[info["family"]])})
    assert "model" in method.hparams and "pooler" not in method.hparams  # read in today's layout
    ours = method.encode(expected["test_sentences"])
    torch.testing.assert_close(ours, torch.tensor(info["embeddings"]), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("case", CASES)
def test_an_old_export_loads_and_encodes_identically(case, expected) -> None:
    from cselab.model.embedding import EmbeddingModel

    model = EmbeddingModel.load(LEGACY / f"{case}_export")
    assert json.loads((LEGACY / f"{case}_export" / "cselab_model.json").read_text()).get("spec_version") is None
    ours = model.encode(expected["test_sentences"])
    torch.testing.assert_close(ours, torch.tensor(expected["cases"][case]["embeddings"]), atol=1e-6, rtol=1e-5)


def test_a_method_takes_a_whole_spec_as_its_model(tiny_bert_dir, make_method) -> None:
    from cselab.methods.simcse.method import SimCSE

    backbone = {"name_or_path": str(tiny_bert_dir), "family": "bert"}
    torch.manual_seed(0)
    given = SimCSE(backbone=backbone, model=EmbeddingSpec(pooler="avg", head="none", eval_batch_size=2))
    from_node = make_method("simcse", "bert", pooler="avg", head="none", eval_batch_size=2)
    assert given.spec == from_node.spec
    sentences = ["a cat sat", "the dog ran", "birds fly"]
    torch.testing.assert_close(given.encode(sentences), from_node.encode(sentences), rtol=0, atol=0)
    with pytest.raises(ConfigError, match="the spec's family=roberta is not the backbone's"):
        SimCSE(backbone=backbone, model=EmbeddingSpec(family="roberta", pooler="avg", head="none"))


def test_every_evaluated_object_is_a_sentence_encoder(make_method, tiny_mlm_dir, tmp_path) -> None:
    """One protocol for what evaluation needs (encode, describe, num_trainable_parameters): a method, its
    saved embedding model and a token representation implement it; nothing else is asked of them."""
    from cselab.evaluation.encoder import SentenceEncoder
    from cselab.model.embedding import EmbeddingModel
    from cselab.representations.token import TokenRepresentation

    method = make_method("simcse", "bert", pooler="avg", head="none")
    method.model.save(tmp_path / "saved")
    static = TokenRepresentation(backbone={"name_or_path": str(tiny_mlm_dir), "family": "bert"}, pooler="static_avg")
    for model in (method, EmbeddingModel.load(tmp_path / "saved"), static):
        assert isinstance(model, SentenceEncoder), type(model).__name__
        assert model.encode(["a cat sat", "birds fly"]).shape[0] == 2
        assert model.describe()["pooler"] in ("avg", "static_avg")
    assert static.num_trainable_parameters() == 0 and static.describe()["representation"] == "token"
    assert not isinstance(object(), SentenceEncoder)


@pytest.mark.parametrize(("values", "match"), [
    ({"pre_seq_len": 0}, r"tuning.pre_seq_len must be >= 1"),
    ({"variant": "every_layer"}, r"tuning.variant='every_layer'"),
    ({"prefix_positions": "left"}, r"tuning.prefix_positions='left'"),
    ({"variant": "input_layer", "prefix_positions": "unshifted"}, r"tuning.prefix_positions must be 'shifted'"),
])
def test_a_prefix_config_that_cannot_hold_is_a_config_error_naming_its_key(values, match):
    """Refused with the config (before any directory or model), the input-layer prompt with unshifted positions
    included: it was refused only when the backbone was wrapped, after the run had started."""
    with pytest.raises(ConfigError, match=match):
        TuningSpec("prefix", **values)

