"""The run is assembled from ``_target_`` nodes (lightning-hydra-template's ``train.py``): a callback added and the
DataModule swapped from the config alone, the Trainer exactly ``lightning.Trainer``'s arguments, the old
spellings of the keys that left the ``trainer`` node refused with the new key named."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

import cselab.io.config  # noqa: F401  (resolvers)
from cselab.data.unsup import UnsupDataModule
from cselab.model.spec import ConfigError
from cselab.run import assemble
from cselab.run.spec import RunSpec, resolved_config

CONF = str(Path(__file__).resolve().parents[1] / "conf")


class Probe(L.Callback):
    """A user's callback: records the hooks it saw."""

    seen: list[str] = []

    def __init__(self, label: str = "probe") -> None:
        self.label = label

    def on_train_start(self, trainer, pl_module) -> None:
        Probe.seen.append(f"{self.label}:train_start")

    def on_test_end(self, trainer, pl_module) -> None:
        Probe.seen.append(f"{self.label}:test_end")


class CountingDataModule(UnsupDataModule):
    """A user's DataModule: the unsup one, counting its setups."""

    setups: list[str] = []

    def setup(self, stage: str | None = None) -> None:
        CountingDataModule.setups.append(str(stage))
        super().setup(stage)


def test_a_callback_and_a_datamodule_from_the_config_alone(tmp_path, tiny_bert_dir, sts_data_dir):
    from tests.conftest import compose_tiny_run, run

    Probe.seen.clear()
    CountingDataModule.setups.clear()
    cfg = compose_tiny_run(tmp_path, tiny_bert_dir, sts_data_dir, "eval.test_tasks=[stsb]",
                           f"+callbacks.probe._target_={__name__}.Probe", "+callbacks.probe.label=mine",
                           f"data.datamodule._target_={__name__}.CountingDataModule", "callbacks.throughput=null",
                           "checkpointing.keep_last=true")
    results = run(cfg, tmp_path / "run")
    assert Probe.seen == ["mine:train_start", "mine:test_end"]
    assert CountingDataModule.setups and results["global_step"] == 4
    assert (tmp_path / "run" / "checkpoints" / "last.ckpt").is_file()  # the default callbacks still there


def _compose(*overrides: str):
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        return compose("config", overrides=list(overrides))


def test_callbacks_are_built_in_order_and_refuse_an_unfilled_argument(tmp_path):
    cfg = _compose("callbacks.throughput=null", "checkpointing.save_last=false")
    runtime = {"sts": {"started": 0.0}, "run_config": {"config": {}, "changes": [], "resume_step": None},
               "checkpoint": {"dirpath": tmp_path}, "last_checkpoint": {"dirpath": tmp_path}}
    built = assemble.build_callbacks(resolved_config(cfg.callbacks), runtime)
    assert list(built) == ["sts", "progress", "flops", "rng_state", "run_config", "checkpoint",
                           "sigterm_broadcast"]  # no last / throughput
    assert built["checkpoint"].monitor == "val/stsb_spearman" and built["checkpoint"].dirpath == str(tmp_path)
    assert list(assemble.build_callbacks(resolved_config(cfg.callbacks), runtime, names=("sts",))) == ["sts"]
    with pytest.raises(ConfigError, match=r"callbacks.checkpoint.dirpath is \?\?\?"):
        assemble.build_callbacks(resolved_config(cfg.callbacks), {k: v for k, v in runtime.items() if k != "checkpoint"})
    with pytest.raises(ConfigError, match="callbacks.bad: expected a node with a _target_"):
        assemble.build_callbacks(resolved_config(_compose("+callbacks.bad.x=1").callbacks), runtime)


#: the Trainer's arguments before the trainer node held only them (main b00f39d: cfg.trainer minus save_last,
#: save_every_n_steps, progress_log_s, then check_val_every_n_epoch=None and num_sanity_val_steps=0 at the call)
BEFORE = {
    "default": {"accelerator": "auto", "devices": "auto", "precision": "auto", "max_epochs": 1, "max_steps": -1,
                "val_check_interval": 125, "gradient_clip_val": 1.0, "log_every_n_steps": 10, "fast_dev_run": False,
                "deterministic": False, "enable_progress_bar": True, "enable_model_summary": False},
}
BEFORE["ddp"] = {**BEFORE["default"], "accelerator": "gpu", "strategy": "ddp", "num_nodes": 1,
                 "sync_batchnorm": False, "use_distributed_sampler": True}
BEFORE["ddp_sim"] = {**BEFORE["ddp"], "accelerator": "cpu", "devices": 2, "precision": "32-true"}


@pytest.mark.parametrize("trainer", sorted(BEFORE))
def test_the_trainer_node_is_lightnings_arguments_as_before(trainer):
    from hydra.utils import instantiate

    cfg = _compose(f"trainer={trainer}", "method=simcse")
    node = OmegaConf.to_container(cfg.trainer, resolve=True)
    # the one key of the training step's (the module's, build_trainer leaves it out): trainer.cached_step (#27)
    assert node.pop("cached_step") == {"chunk_size": None} and cfg.module.cached_step.chunk_size is None
    partial = instantiate(node, _partial_=True)
    assert partial.func is L.Trainer and partial.keywords == BEFORE[trainer]


def test_a_trainer_is_built_with_the_run_arguments(tmp_path):
    from cselab.run import assemble
    from cselab.run.spec import RunSpec

    cfg = _compose("method=simcse", "trainer.max_steps=3")
    trainer = assemble.build_trainer(RunSpec.from_config(cfg).training, [Probe()], [], tmp_path)
    assert trainer.max_steps == 3 and trainer.num_sanity_val_steps == 0 and trainer.check_val_every_n_epoch is None
    assert trainer.precision == "32-true" and any(isinstance(c, Probe) for c in trainer.callbacks)


@pytest.mark.parametrize(("old", "new"), [("trainer.save_last", "checkpointing.save_last"),
                                          ("trainer.save_every_n_steps", "checkpointing.save_every_n_steps"),
                                          ("trainer.progress_log_s", "progress.log_s")])
def test_old_spellings_are_refused_naming_the_new_key(old, new):
    from cselab.io.config import moved_key_error

    assert f"type {new}=5" in moved_key_error([f"{old}=5"])  # the command line (run.py)
    cfg = _compose(f"+{old}=5")  # a YAML that still sets it
    with pytest.raises(ConfigError, match=f"{old} moved: it is {new} now"):
        RunSpec.from_config(cfg)
    assert OmegaConf.select(_compose(), new, default="absent") != "absent"
