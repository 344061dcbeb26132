"""Every template is parsed in ``RunSpec.from_config``, before any weights load, and a bad one is refused with a
message naming the config key it comes from."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import transformers
from hydra import compose, initialize_config_dir
from transformers.models.auto.auto_factory import _BaseAutoModelClass

import cselab.io.config  # noqa: F401  (resolvers)
from cselab.model.spec import ConfigError

CONF = str(Path(__file__).resolve().parents[1] / "conf")


class WeightsRead(AssertionError):
    """Raised by every weight loader in these tests."""


@pytest.fixture
def no_weights(monkeypatch):
    """Any attempt to read model weights raises :class:`WeightsRead`."""

    def refuse(*args, **kwargs):
        raise WeightsRead("weights were read")

    monkeypatch.setattr(_BaseAutoModelClass, "from_pretrained", classmethod(refuse))
    monkeypatch.setattr(transformers.PreTrainedModel, "from_pretrained", classmethod(refuse))
    monkeypatch.setattr(torch, "load", refuse)
    import safetensors.torch

    monkeypatch.setattr(safetensors.torch, "load_file", refuse)
    monkeypatch.setattr(safetensors.torch, "load_model", refuse)


def _cfg(tmp_path, tiny_bert_dir, sts_data_dir, *overrides):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"sentence number {i} is here\n" for i in range(40)))
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        return compose("config", overrides=[
            "method=promptbert", f"backbone.name_or_path={tiny_bert_dir}", "backbone.family=bert",
            f"data.path={corpus}", "data.batch_size=8", "trainer.max_steps=2", "trainer.enable_progress_bar=false",
            "eval.test_tasks=[stsb]", f"data_dir={sts_data_dir}", *overrides])


@pytest.mark.parametrize(("overrides", "key", "why"), [
    (["prompt=custom", "prompt.template='This sentence means [MASK] .'"], "prompt.template=", "exactly one [X]"),
    (["prompt=custom", "prompt.template='This [X] means .'"], "prompt.template=", "at least one [MASK]"),
    (["prompt=custom", "prompt.template='This [X] means [MASK] .'", "prompt.mask_index=2"], "prompt.template=",
     "prompt.mask_index=2"),
    (["prompt=promptbert", "prompt.templates.bert.view2='[X] [X] [MASK]'"], "prompt.templates.bert.view2=",
     "exactly one [X]"),
    (["prompt=promptbert", "prompt.eval_view=view9"], "prompt.eval_view", "view9"),
], ids=["no-sentence", "no-mask", "mask-index", "official-view", "unknown-view"])
def test_a_bad_template_is_refused_before_any_weights_load(tmp_path, tiny_bert_dir, sts_data_dir, no_weights,
                                                           overrides, key, why):
    from tests.conftest import run

    cfg = _cfg(tmp_path, tiny_bert_dir, sts_data_dir, *overrides)
    with pytest.raises(ConfigError) as refused:
        run(cfg, tmp_path / "run")
    print(refused.value)
    assert key in str(refused.value) and why in str(refused.value)


def test_a_good_template_gets_to_the_weights(tmp_path, tiny_bert_dir, sts_data_dir, no_weights):
    """The same run with a valid template passes validate and reaches the (patched) weight loader."""
    from tests.conftest import run

    cfg = _cfg(tmp_path, tiny_bert_dir, sts_data_dir, "prompt=custom", "prompt.template='This [X] means [MASK] .'")
    with pytest.raises(WeightsRead):
        run(cfg, tmp_path / "run")


def test_a_decoder_template_with_a_mask_names_the_key(tmp_path, tiny_bert_dir, sts_data_dir):
    from cselab.run.spec import RunSpec

    cfg = _cfg(tmp_path, tiny_bert_dir, sts_data_dir, "prompt=custom", "prompt.template='This [X] means [MASK] .'",
               "backbone.family=decoder")
    with pytest.raises(ConfigError, match=r"prompt.template=.*backbone.family=decoder.*has a \[MASK\]"):
        RunSpec.from_config(cfg)
