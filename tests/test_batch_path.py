"""The batch path has one channel for each thing a method adds (#43): the run builds the training collate with
its seed and pad width (nothing writes them into it afterwards), the method's corpus transform is the
DataModule's to apply, the loss's extra inputs reach the uncached and the cached step the same way, and the
non-finite policy's callback is in every Trainer that fits a method."""

from __future__ import annotations

import copy

import lightning as L
import pytest
import torch

from cselab.data.unsup import UnsupDataModule
from cselab.methods.cached_step import CachedStep
from cselab.methods.esimcse.loss import QueueInfoNCE
from cselab.methods.nonfinite import NonFiniteCheck
from cselab.methods.simcse.method import SimCSE
from tests.conftest import build_method, compose_tiny_run, loss_and_grads

ROWS = [{"text": f"a sentence about the number {i} and more"} for i in range(6)]


class _Unwritable:
    """A collate whose attributes cannot be written: a DataModule that writes into its collate fails on it."""

    mlm_seed, pad_to_multiple_of = 0, None

    def __setattr__(self, name: str, value) -> None:
        raise AttributeError(f"the DataModule wrote {name}={value!r} into the collate")

    def __call__(self, rows):
        return rows


def test_the_datamodule_writes_nothing_into_its_collate(tmp_path) -> None:
    corpus = tmp_path / "c.txt"
    corpus.write_text("one sentence\nanother sentence\n")
    dm = UnsupDataModule(_Unwritable(), path=str(corpus), batch_size=2, seed=5)
    dm.setup("fit")
    assert len(dm.train_set) == 2


def test_the_run_builds_the_collate_with_its_seed_and_pad_width(tmp_path, tiny_bert_dir, sts_data_dir) -> None:
    from cselab.run import assemble
    from cselab.run.spec import RunSpec

    cfg = compose_tiny_run(tmp_path, tiny_bert_dir, sts_data_dir, "seed=5", "data.pad_to_multiple_of=8")
    spec = RunSpec.from_config(cfg, tmp_path / "run")
    method = build_method(cfg)
    dm = assemble.build_datamodule(spec.training, method)
    assert (dm.collate.mlm_seed, dm.collate.pad_to_multiple_of, dm.seed) == (5, 8, 5)
    assert dm.collate is method.train_collate(seed=5, pad_to_multiple_of=8)
    plain = method.train_collate()  # the model's default training collate is another object, untouched
    assert (plain.mlm_seed, plain.pad_to_multiple_of) == (0, None) and plain is not dm.collate
    assert dm.transform == method.prepare_train_set
    assert dm.collate(ROWS[:2])["input_ids"].shape[-1] % 8 == 0


class _WithQueue(SimCSE):
    """SimCSE whose loss takes a queue of negatives as its extra input (ESimCSE's channel)."""

    def loss_inputs(self, batch):
        return {"queue": self.queue}


def _queue_method(tiny_bert_dir, chunk: int | None = None) -> _WithQueue:
    torch.manual_seed(0)
    method = _WithQueue(backbone={"name_or_path": str(tiny_bert_dir), "family": "bert"}, model={"pooler": "cls"},
                        loss={"name": "infonce_queue"},
                        cached_step=None if chunk is None else {"chunk_size": chunk}).double()
    with torch.no_grad():  # negatives as close as the positives (the tiny model's embeddings are all alike)
        method.queue = method.embed(method.train_collate()(ROWS))[:, 0].clone()
    return method


def test_extra_loss_inputs_reach_the_uncached_and_the_cached_step_alike(tiny_bert_dir) -> None:
    uncached = _queue_method(tiny_bert_dir)
    assert isinstance(uncached.loss_fn, QueueInfoNCE) and not hasattr(uncached.loss_fn, "queue")
    batch = uncached.train_collate()(ROWS)
    loss, grads = loss_and_grads(uncached, batch)
    torch.manual_seed(1)  # the same dropout masks: the loss by hand, with and without the queue
    z = uncached.embed(batch)
    assert float(loss) == pytest.approx(float(uncached.loss_fn(z, uncached.queue)), rel=1e-10)
    torch.manual_seed(1)
    assert abs(float(loss) - float(uncached.loss_fn(uncached.embed(batch)))) > 1e-6  # the queue counts
    cached = copy.deepcopy(uncached)
    cached.cached_step = CachedStep(2 * len(ROWS))
    cached_loss, cached_grads = loss_and_grads(cached, batch)
    assert float(cached_loss) == pytest.approx(float(loss), rel=1e-10)
    assert cached_grads.keys() == grads.keys()
    for name, g in grads.items():
        torch.testing.assert_close(cached_grads[name], g, rtol=1e-8, atol=1e-12)


def test_every_trainer_that_fits_a_method_gets_its_non_finite_check(tiny_bert_dir, tmp_path) -> None:
    method = SimCSE(backbone={"name_or_path": str(tiny_bert_dir), "family": "bert"}, model={"pooler": "cls"})
    loader = torch.utils.data.DataLoader([ROWS] * 1, batch_size=None, collate_fn=method.train_collate())
    trainer = L.Trainer(max_steps=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, limit_val_batches=0, accelerator="cpu", callbacks=[],
                        default_root_dir=str(tmp_path))
    trainer.fit(method, loader)
    checks = [c for c in trainer.callbacks if isinstance(c, NonFiniteCheck)]
    assert len(checks) == 1 and checks[0].policy is method.nonfinite
