"""A resumed run whose command changes a key that changes the result is refused, naming the key with both values;
``resume.allow_changed`` accepts it, applies it from the checkpoint's step and records it in ``results.json``;
keys that do not change the result (:data:`cselab.io.config.OUTPUT_ONLY_KEYS`) pass silently."""

from __future__ import annotations

import json

import pytest
import torch
from omegaconf import OmegaConf

from cselab.callbacks.run_config import config_changes
from cselab.io.config import resume_overrides
from cselab.model.spec import ConfigError
from cselab.run.spec import copies_of, resolved_config


class _Killed(RuntimeError):
    pass


def _interrupted_run(tmp_path, tiny_bert_dir, sts_data_dir, monkeypatch):
    """A 4-step run that dies at step 3, after the step-2 validation wrote checkpoints/last.ckpt."""
    from cselab.methods.base import ContrastiveMethod
    from tests.conftest import compose_tiny_run, run

    real_step = ContrastiveMethod.training_step

    def dies_at_step_3(self, batch, batch_idx):
        if self.global_step == 3:
            raise _Killed("killed at step 3")
        return real_step(self, batch, batch_idx)

    cfg = compose_tiny_run(tmp_path, tiny_bert_dir, sts_data_dir, "eval.test_tasks=[stsb]", "optim.lr=5e-5",
                           "trainer.deterministic=true")
    out = tmp_path / "run"
    with monkeypatch.context() as patch:
        patch.setattr(ContrastiveMethod, "training_step", dies_at_step_3)
        with pytest.raises(_Killed):
            run(cfg, out)
    assert torch.load(out / "checkpoints" / "last.ckpt", weights_only=False)["global_step"] == 2
    return out


@pytest.mark.integration
def test_resume_with_a_changed_lr_is_refused_then_accepted_and_recorded(tmp_path, tiny_bert_dir, sts_data_dir,
                                                                        monkeypatch):
    from tests.conftest import compose_tiny_run, run

    out = _interrupted_run(tmp_path, tiny_bert_dir, sts_data_dir, monkeypatch)

    def resumed(*extra):
        return compose_tiny_run(tmp_path, tiny_bert_dir, sts_data_dir, "eval.test_tasks=[stsb]",
                                "trainer.deterministic=true", f"resume.dir={out}", *extra)

    with pytest.raises(ConfigError) as refused:
        run(resumed("optim.lr=1e-4", "eval.batch_size=7", "data.num_workers=0", "trainer.log_every_n_steps=1"),
            out)
    message = str(refused.value)
    print(message)
    assert "optim.lr: 5e-05 in the checkpoint, 0.0001 now" in message
    assert "resume.allow_changed=[optim.lr]" in message
    # only optim.lr: eval.batch_size, workers and logging do not change the result, nor do the module's copies
    assert "batch_size" not in message and "log_every" not in message and "module." not in message
    assert not (out / "results.json").exists()

    results = run(resumed("optim.lr=1e-4", "resume.allow_changed=[optim.lr]", "checkpointing.keep_last=true"), out)
    assert results["changed_on_resume"] == [{"key": "optim.lr", "checkpoint": 5e-5, "now": 1e-4, "step": 2}]
    on_disk = json.loads((out / "results.json").read_text())
    assert on_disk["changed_on_resume"] == results["changed_on_resume"]
    assert on_disk["global_step"] == 4
    # the resumed optimizer really trained with the new lr (the checkpoint's optimizer state held 5e-5)
    last = torch.load(out / "checkpoints" / "last.ckpt", weights_only=False)
    [group] = last["optimizer_states"][0]["param_groups"]
    assert group["initial_lr"] == pytest.approx(1e-4)
    assert last["lr_schedulers"][0]["base_lrs"] == [pytest.approx(1e-4)]
    assert last["callbacks"]["RunConfig"]["changes"] == results["changed_on_resume"]  # kept for a later resume


def test_config_changes_ignore_output_only_keys_and_module_copies(tmp_path, tiny_bert_dir, sts_data_dir):
    from tests.conftest import compose_tiny_run

    base = compose_tiny_run(tmp_path, tiny_bert_dir, sts_data_dir)
    saved = resolved_config(base)
    same = compose_tiny_run(tmp_path, tiny_bert_dir, sts_data_dir, "eval.batch_size=3", "data.num_workers=2",
                            "logger=csv", "trainer.enable_progress_bar=true", "resume.allow_changed=[seed]")
    assert config_changes(saved, resolved_config(same), copies_of(same)) == []
    other = compose_tiny_run(tmp_path, tiny_bert_dir, sts_data_dir, "loss.temperature=0.1", "seed=3")
    assert [key for key, _, _ in config_changes(saved, resolved_config(other), copies_of(other))] == ["loss.temperature", "seed"]
    assert OmegaConf.select(other, "module.loss.temperature") == 0.1  # the module's copy is not listed again
    # a checkpoint's config from before the embedding spec: the flat module node (copies too) is not a change
    from cselab.methods.checks import LEGACY_OPTIM_KEYS, split_legacy

    flat = {**saved, "module": {k: v for k, v in saved["module"].items() if k not in ("model", "optim")}}
    old_optim = {k: v for k, v in saved["module"]["optim"].items() if k in LEGACY_OPTIM_KEYS}  # no optim.fused then
    flat["module"].update({**saved["module"]["model"], **old_optim})
    assert split_legacy(flat["module"])["model"] == saved["module"]["model"]
    assert config_changes(flat, resolved_config(base), copies_of(base)) == []


def test_resume_equals_dir_on_the_command_line_is_the_resume_node():
    assert resume_overrides(["resume=outputs/x", "optim.lr=1e-4", "resume.allow_changed=[optim.lr]"]) == [
        "resume.dir='outputs/x'", "optim.lr=1e-4", "resume.allow_changed=[optim.lr]"]


def test_a_node_added_since_keeps_old_runs_unchanged_while_its_switch_is_off(tmp_path, tiny_bert_dir, sts_data_dir):
    """A run saved before ``eval.whitening`` existed (#34) is no different from the same command now, while
    whitening stays off: its checkpoints resume and its finished directory is skipped, not refused."""
    from tests.conftest import compose_tiny_run

    now = compose_tiny_run(tmp_path, tiny_bert_dir, sts_data_dir)
    saved = resolved_config(now)
    del saved["eval"]["whitening"]  # the config as a run before #34 saved it
    assert config_changes(saved, resolved_config(now), copies_of(now)) == []
    whitened = compose_tiny_run(tmp_path, tiny_bert_dir, sts_data_dir, "eval.whitening.enabled=true")
    keys = [key for key, _, _ in config_changes(saved, resolved_config(whitened), copies_of(whitened))]
    assert "eval.whitening.enabled" in keys and all(k.startswith("eval.whitening.") for k in keys)
    # a run saved with the node compares it as any other key
    assert [key for key, _, _ in config_changes(resolved_config(now), resolved_config(whitened), copies_of(whitened))] == ["eval.whitening.enabled"]


def test_a_moved_target_is_not_a_change_another_target_is():
    """A checkpoint written before the method folders saved ``cselab.methods.prompt_tuning.DCPCSE``: the same class
    now (its module moved), so resuming it is no change; naming another class, or an old path that still
    imports, is one."""
    from cselab.callbacks.run_config import moved_target

    saved = {"method": {"_target_": "cselab.methods.prompt_tuning.DCPCSE"},
             "logger": {"_target_": "cselab.loggers.build_loggers"}}
    now = {"method": {"_target_": "cselab.methods.dcpcse.method.DCPCSE"},
           "logger": {"_target_": "cselab.run.loggers.build_loggers"}}
    assert config_changes(saved, now) == []
    other = {**now, "method": {"_target_": "cselab.methods.simcse.method.SimCSE"}}
    assert [key for key, _, _ in config_changes(saved, other)] == ["method._target_"]
    assert not moved_target("cselab.methods.scpcse.method.SCPCSE", "cselab.methods.optiprompt.method.SCPCSE")
    assert not moved_target("cselab.methods.prompt_tuning.Nothing", "cselab.methods.dcpcse.method.Nothing")
