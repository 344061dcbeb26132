"""A method's own options (:mod:`cselab.methods.options`), over every registered method: written once in its YAML
(``method.<node>``), read into its typed dataclass by the run, an unknown key or a bad value refused with the config
key in the message, and the old constructor arguments of saved checkpoints folded into ``options``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from cselab.methods.checks import check_module, fold_options
from cselab.methods.options import build_options, legacy_keys, option_key
from cselab.methods.registry import known_methods, method_target
from cselab.model.spec import ConfigError

CONF = str(Path(__file__).resolve().parents[1] / "conf")
#: the registered methods, by name (the folders of cselab.methods)
METHODS = sorted(known_methods())


def _compose(*overrides: str):
    from hydra import compose, initialize_config_dir

    import cselab.io.config  # noqa: F401  (resolvers)

    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        return compose("config", overrides=list(overrides))


def _options_type(name: str):
    return getattr(known_methods()[name], "options_type", None)


def test_the_registry_lists_every_method_folder() -> None:
    folders = {p.name for p in Path(CONF, "method").glob("*.yaml")}
    assert {f"{name}.yaml" for name in METHODS} == folders
    assert len(METHODS) == 13
    assert {n for n in METHODS if _options_type(n) is not None} == {"baseline", "diffcse", "esimcse", "rankcse"}


@pytest.mark.parametrize("name", METHODS)
def test_options_reject_an_unknown_key_and_a_bad_value_naming_the_config_key(name: str) -> None:
    """The run's ``module`` node carries the method's options from ``method.<node>`` (written once: the ``module``
    node of the composed config holds no copy of them); the config-time check of that node refuses an unknown key
    and, for every field, a value of the wrong type, naming ``method.<node>.<key>``; a method without options
    refuses any."""
    from cselab.run.spec import module_node

    cfg = _compose(f"method={name}")
    node = module_node(cfg)
    target = method_target(node.pop("_target_"))
    options_type = _options_type(name)
    if options_type is None:
        assert "options" not in node
        with pytest.raises(ConfigError, match=f"method={name} takes no options"):
            check_module(target, {**node, "options": {"bogus": 1}})
        return
    assert not set(cfg.module) & set(legacy_keys(options_type)), "an option spelled a second time under module"
    options = build_options(options_type, node["options"])  # the YAML's values are valid
    assert isinstance(options, options_type)
    with pytest.raises(ConfigError, match=re.escape(option_key(options_type, "bogus")) + ": not an option"):
        check_module(target, {**node, "options": {**node["options"], "bogus": 1}})
    for field in node["options"]:
        bad = {**node["options"], field: {"not": "a value"}}
        with pytest.raises(ConfigError, match=re.escape(option_key(options_type, field)) + r".*expected"):
            check_module(target, {**node, "options": bad})


def test_an_option_is_set_where_it_is_written() -> None:
    """The documented spellings reach the method's options: ``method.esimcse.momentum``, ``method.rtd.*``,
    ``method.teachers``, ``method.topk``."""
    from cselab.run.spec import module_node

    assert module_node(_compose("method=esimcse", "method.esimcse.momentum=0.9"))["options"]["momentum"] == 0.9
    assert module_node(_compose("method=diffcse", "method.rtd.lambda_weight=0.01"))["options"]["lambda_weight"] == 0.01
    teachers = module_node(_compose("method=rankcse", "method.teachers=[{path:a,weight:1.0}]",
                                    "method.teacher_temperature=0.1"))["options"]
    assert teachers == {"teachers": [{"path": "a", "weight": 1.0}], "teacher_temperature": 0.1}
    assert module_node(_compose("method=baseline", "method.topk=5"))["options"] == {"topk": 5, "topk_denoise": False}


@pytest.mark.parametrize("name", [n for n in METHODS if _options_type(n) is not None])
def test_old_constructor_arguments_are_folded_into_options(name: str) -> None:
    """The hyper-parameters of a checkpoint written before the typed options (``esimcse={...}``, ``teachers=...``)
    become ``options``; arguments that have ``options`` stay as they are."""
    target, options_type = known_methods()[name], _options_type(name)
    old = {key: f"value of {key}" for key in legacy_keys(options_type)}
    folded = fold_options(target, {"backbone": {}, **old})
    expected = old[options_type.node] if options_type.node else old
    assert folded == {"backbone": {}, "options": expected}
    assert fold_options(target, {"backbone": {}, "options": {"x": 1}}) == {"backbone": {}, "options": {"x": 1}}


def test_an_old_esimcse_checkpoint_loads_with_its_options(make_method, tmp_path) -> None:
    """A checkpoint whose hyper-parameters hold ``esimcse={...}`` (cselab before the typed options) loads with
    those options, through :func:`cselab.load`."""
    from cselab.methods.loading import load

    method = make_method("esimcse", "bert", pooler="cls", head="mlp", mlp_only_train=True,
                         loss={"name": "infonce_queue", "_target_": "cselab.methods.esimcse.loss.QueueInfoNCE"},
                         options={"momentum": 0.9, "queue_size": 6})
    hparams = dict(method.hparams)
    hparams["esimcse"] = hparams.pop("options")
    ckpt = tmp_path / "old.ckpt"
    torch.save({"state_dict": method.state_dict(), "hyper_parameters": hparams,
                "cselab_method_class": "cselab.methods.esimcse.method.ESimCSE",
                "pytorch-lightning_version": "2.6.6"}, ckpt)
    loaded = load(ckpt)
    assert (loaded.options.momentum, loaded.options.queue_size) == (0.9, 6)
    assert loaded.momentum.queue_size == 6


@pytest.mark.parametrize("name", [n for n in METHODS if _options_type(n) is not None])
def test_a_run_saved_with_the_module_copies_resumes_unchanged(name: str) -> None:
    """A config saved before the typed options held a copy of them under ``module`` (``module.esimcse``,
    ``module.teachers`` ...): resuming it with today's config is no change (the options compare where they live,
    in ``method``); a real change still is one."""
    from cselab.callbacks.run_config import config_changes
    from cselab.run.spec import copies_of, module_node, resolved_config

    cfg = _compose(f"method={name}")
    new, options_type = resolved_config(cfg), _options_type(name)
    options = module_node(cfg)["options"]
    copies = {options_type.node: options} if options_type.node else dict(options)
    saved = {**new, "module": {**new["module"], **copies}}
    assert config_changes(saved, new, copies_of(cfg)) == []
    changed = {**saved, "seed": new["seed"] + 1}
    assert [key for key, _, _ in config_changes(changed, new, copies_of(cfg))] == ["seed"]
