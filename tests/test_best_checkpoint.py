"""The best STS-B dev checkpoint with the official tie rules (``eval.best_on_tie``, ``eval.best_decimals``;
:class:`cselab.run.checkpoints.BestCheckpoint`): the HF Trainer's (a strictly better score replaces the best) and
PromptEOL's (``"%.2f"`` of the score, ``>=`` the best so far: a tie goes to the later checkpoint), each through a
Lightning fit against the official rule written out as a loop."""

from __future__ import annotations

import warnings

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from cselab.callbacks.run_config import config_changes
from cselab.run.checkpoints import BestCheckpoint

#: the dev score of each validation (Spearman x 100): 80.004, then two scores below it that print as 80.00 too
SCORES = [70.0, 80.004, 80.001, 79.5, 80.0039]


class _Scored(L.LightningModule):
    """One weight; validation ``i`` logs ``SCORES[i]`` as the STS callback logs the dev score."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))
        self.validations = 0

    def training_step(self, batch, batch_idx):
        return (self.w * batch).sum()

    def validation_step(self, batch, batch_idx):
        return None

    def on_validation_epoch_end(self) -> None:
        self.log("val/stsb_spearman", SCORES[self.validations])
        self.validations += 1

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _best_step(tmp_path, **rule) -> int:
    """The step of the checkpoint the callback keeps after one validation per step, one per score."""
    best = BestCheckpoint(dirpath=tmp_path, filename="best-step{step}", auto_insert_metric_name=False,
                          monitor="val/stsb_spearman", mode="max", save_top_k=1, **rule)
    data = torch.utils.data.DataLoader(torch.ones(len(SCORES), 1), batch_size=1)
    trainer = L.Trainer(max_steps=len(SCORES), val_check_interval=1, check_val_every_n_epoch=None,  # as a run
                        limit_val_batches=1, num_sanity_val_steps=0,
                        callbacks=[best], logger=False, enable_progress_bar=False, enable_model_summary=False,
                        accelerator="cpu", default_root_dir=str(tmp_path))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(_Scored(), data, data)
    assert len(list(tmp_path.glob("best-step*.ckpt"))) == 1  # save_top_k=1: the best only
    return int(best.best_model_path.rsplit("best-step", 1)[1].removesuffix(".ckpt"))


def _hf_trainer(scores) -> int:
    """SimCSE ``simcse/trainers.py:163-170``: ``np.greater(metric, best_metric)`` replaces the best (1-based)."""
    best, index = None, None
    for i, score in enumerate(scores, 1):
        if best is None or score > best:
            best, index = score, i
    return index


def _prompteol(scores) -> int:
    """PromptEOL ``evaluation.py:292, 297-311``: the printed ``"%.2f"`` score ``>=`` the largest printed before
    (0 without ``dev_results``) copies the checkpoint to ``best_model`` (1-based)."""
    printed, index = [], None
    for i, score in enumerate(scores, 1):
        line = f"{score:.2f}"  # the official "%.2f" % (spearman * 100)
        max_scores = max((float(p) for p in printed), default=0)
        if float(line) >= max_scores:
            index = i
        printed.append(line)
    return index


def test_the_default_is_the_hf_trainers_rule(tmp_path) -> None:
    assert _best_step(tmp_path) == _hf_trainer(SCORES) == 2


def test_prompteols_rule_keeps_the_later_of_two_scores_equal_at_two_decimals(tmp_path) -> None:
    assert _best_step(tmp_path / "last2", on_tie="last", decimals=2) == _prompteol(SCORES) == 5
    # each part alone keeps the first: ties at two decimals kept first; unrounded, no later score equals 80.004
    assert _best_step(tmp_path / "first2", on_tie="first", decimals=2) == 2
    assert _best_step(tmp_path / "last", on_tie="last") == 2


def test_the_state_is_saved_under_lightnings_key_and_bad_rules_are_refused(tmp_path) -> None:
    """A checkpoint written with Lightning's ``ModelCheckpoint`` resumes into this callback with its best."""
    kwargs = {"dirpath": tmp_path, "monitor": "val/stsb_spearman", "mode": "max", "save_top_k": 1}
    assert BestCheckpoint(**kwargs, on_tie="last", decimals=2).state_key == ModelCheckpoint(**kwargs).state_key
    with pytest.raises(ValueError, match="eval.best_on_tie='middle': expected one of first, last"):
        BestCheckpoint(**kwargs, on_tie="middle")
    with pytest.raises(ValueError, match="eval.best_decimals=-1"):
        BestCheckpoint(**kwargs, decimals=-1)
    with pytest.raises(ValueError, match="save_top_k=1, not 3"):
        BestCheckpoint(**{**kwargs, "save_top_k": 3}, on_tie="last")
    # a run saved before the keys existed kept the first best: no change while they keep that rule
    saved = {"eval": {"dev_task": "stsb"}}
    assert config_changes(saved, {"eval": {"dev_task": "stsb", "best_on_tie": "first", "best_decimals": None}}) == []
    assert config_changes(saved, {"eval": {"dev_task": "stsb", "best_on_tie": "last", "best_decimals": 2}}) == [
        ("eval.best_decimals", "(absent)", 2), ("eval.best_on_tie", "(absent)", "last")]
