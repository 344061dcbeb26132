"""A key that no code reads is refused, naming the closest known key: ``+optim.lrr=1e-4`` (Hydra's own hint for
``optim.lrr=1e-4``) trained with the default learning rate on 446911a; documented additions keep working."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

import cselab.io.config  # noqa: F401  (resolvers)
from cselab.model.spec import ConfigError
from cselab.run.config_keys import added_keys, check_added_keys, closest_key, missing_key_error
from tests import forked

ROOT = Path(__file__).resolve().parents[1]


def _check(*overrides: str) -> None:
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=list(overrides), return_hydra_config=True)
    check_added_keys(cfg, overrides, cfg.hydra.runtime.choices.keys())


@pytest.mark.parametrize(("override", "near"), [("+optim.lrr=1e-4", "optim.lr"),
                                                 ("++optim.weight_decy=0.1", "optim.weight_decay"),
                                                 ("+eval.batchsize=8", "eval.batch_size"),
                                                 ("+method.poler=avg", "method.pooler")])
def test_an_unread_key_is_refused_with_the_closest_known_key(override, near):
    with pytest.raises(ConfigError, match=rf"{override.replace('+', '[+]')}: no code reads .*did you mean {near}\?"):
        _check(override)


@pytest.mark.parametrize("overrides", [
    ("method=simcse", "+method.head_init=pytorch"),                                              # read through an interpolation
    ("+backbone.dtype=float32",),
    ("+callbacks.lr_monitor._target_=lightning.pytorch.callbacks.LearningRateMonitor",),  # a new callback
    ("+trainer.limit_val_batches=1",),                                             # an instantiated node's argument
    ("+tuning.variant=deep",),                                                     # read by the code with a default
])
def test_documented_additions_pass(overrides):
    _check(*overrides)


def test_group_selections_are_hydra_s():
    assert added_keys(["+experiment=demo", "+optim.lrr=1", "optim.lr=1", "+transfer@transfer.x=test"],
                      groups=["experiment"]) == [("+optim.lrr=1", "optim.lrr")]


def test_closest_key_falls_back_to_any_key():
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("config")
    assert closest_key(cfg, "optim.lrr") == "optim.lr"
    assert closest_key(cfg, "nothing.like.it.at.all") is None


def test_without_plus_the_closest_key_is_named_too():
    """Hydra's own refusal of optim.lrr=1e-4 suggests +optim.lrr=1e-4; run.py names optim.lr instead."""
    message = missing_key_error(["optim.lrr=1e-4", "trainer.max_steps=1"], ROOT / "conf")
    assert message.startswith("optim.lrr=1e-4: the config has no key optim.lrr; did you mean optim.lr?")
    assert missing_key_error(["optim.lr=1e-4", "method=simcse"], ROOT / "conf") is None
    assert missing_key_error(["method=nosuchmethod"], ROOT / "conf") is None  # Hydra's own message for that


def test_run_py_refuses_in_one_line_and_leaves_no_run_directory(tmp_path):
    """The command exits 1 with one line naming optim.lr, before any data or weights are read, and leaves no
    outputs/<run> behind (on 446911a the run trained with the default lr)."""
    proc = forked.run([sys.executable, str(ROOT / "run.py"), "+optim.lrr=1e-4", "trainer.max_steps=1"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines == [lines[0]] and "did you mean optim.lr?" in lines[0], proc.stderr[-3000:]
    assert not (tmp_path / "outputs").exists()


def test_the_code_names_come_from_the_whole_package():
    """The names a +key may take are read from every module of ``src/cselab`` (not only the folder the checker
    lives in: it moved into ``run/``): keys read by a method's options, a loss and the data."""
    from cselab.run.config_keys import code_names

    assert {"dup_rate", "queue_size", "hard_negative_weight", "soft_negatives", "teacher_temperature"} <= code_names()
