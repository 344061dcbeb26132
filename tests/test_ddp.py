"""DDP on CPU (2 processes, gloo): gathered negatives give the one-process loss and gradients; STS on rank 0.

The 2-process runs use a real Lightning ``Trainer`` with ``trainer=ddp_sim``'s accelerator (cpu), devices (2),
precision and ``DDPStrategy`` (its ``ddp...`` strategy name launched as ``ddp_fork...``: forking this process
instead of re-running the command line, which under pytest would re-run pytest).  Each rank trains one step on its
own part of a global batch; a callback saves the loss and the parameter gradients after DDP's all-reduce
(``on_before_optimizer_step``).  The reference is ONE process running ``training_step`` on the global batch.
Dropout is off (a copy of the tiny BERT with dropout 0), so both see the same function.
"""

from __future__ import annotations

import copy
import json
import shutil
import warnings
from pathlib import Path

import lightning as L
import pytest
import torch
from omegaconf import OmegaConf
from torch.utils.data import DataLoader

from cselab.callbacks.sigterm import SigtermOnLoggingSteps
from cselab.evaluation.callback import STSCallback
from tests.sync_probe import SyncProbe

ROOT = Path(__file__).resolve().parents[1]

SENTS = [
    "a man is playing a guitar", "the cat sat on the mat", "two dogs are running in the park",
    "a woman is slicing an onion", "it is raining today", "the dog ran", "a cat sat", "birds fly",
]
TRIPLETS = [
    {"sent0": a, "sent1": b, "hard_neg": c}
    for a, b, c in [
        ("a man is playing a guitar", "a man plays music", "a woman is slicing an onion"),
        ("the cat sat on the mat", "a cat sat", "two dogs are running in the park"),
        ("it is raining today", "the sky is not blue", "it is sunny"),
        ("the dog ran", "a dog runs", "birds fly"),
        ("two dogs are running in the park", "dogs run", "the cat sat on the mat"),
        ("a woman is slicing an onion", "a woman cuts food", "a man is playing a guitar"),
        ("birds fly", "birds are flying in the sky", "the dog ran"),
        ("a cat sat", "the cat is sitting", "it is raining today"),
    ]
]


def _cot_prompt() -> dict:
    return OmegaConf.to_container(OmegaConf.load(ROOT / "conf" / "prompt" / "cot_bert.yaml"), resolve=True)


#: case -> (method name, method kwargs, rows)
CASES = {
    "infonce_hard_negatives": ("simcse", dict(setting="sup", loss={"name": "infonce", "hard_negative_weight": 0.5}),
                               TRIPLETS),
    "cot_infonce": ("cot_bert", dict(setting="unsup", pooler="mask", denoise="pad", loss={"name": "cot_infonce"}),
                    SENTS),
    "infonce_eh": ("simcse", dict(setting="sup", loss={"name": "infonce_eh"}), TRIPLETS),
}


@pytest.fixture(scope="module")
def nodrop_bert_dir(tiny_bert_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny BERT with hidden and attention dropout 0 (deterministic forward in train mode)."""
    d = tmp_path_factory.mktemp("tiny_bert_nodrop")
    for f in tiny_bert_dir.iterdir():
        shutil.copy(f, d / f.name)
    cfg = json.loads((d / "config.json").read_text())
    cfg.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    (d / "config.json").write_text(json.dumps(cfg))
    return d


def _build(nodrop_bert_dir: Path, case: str, negatives: str = "global"):
    from cselab.methods.registry import method_class

    name, kwargs, rows = CASES[case]
    kwargs = dict(kwargs)
    prompt = _cot_prompt() if name == "cot_bert" else None
    torch.manual_seed(0)
    from cselab.methods.checks import split_legacy

    method = method_class(name)(**split_legacy({"backbone": {"name_or_path": str(nodrop_bert_dir), "family": "bert"},
                                                "prompt": prompt, "negatives": negatives, "lr": 1e-5, **kwargs}))
    return method, rows


class _RankData(L.LightningDataModule):
    """Rank r trains on ``rows[splits[r]:splits[r + 1]]`` (the same batch for each of ``steps`` steps);
    ``equal``: it declares every rank's batch the same size (``equal_rank_batches``, as cselab's DataModules)."""

    def __init__(self, rows, collate, splits, steps: int = 1, equal: bool = False):
        super().__init__()
        self.rows, self.collate, self.splits, self.steps = rows, collate, splits, steps
        self.equal_rank_batches = equal

    def train_dataloader(self):
        r = self.trainer.global_rank
        chunk = self.rows[self.splits[r] : self.splits[r + 1]]
        return DataLoader([chunk] * self.steps, batch_size=None, collate_fn=self.collate)

    def val_dataloader(self):
        return DataLoader([0], batch_size=1, collate_fn=lambda rows: rows)


class _Dump(L.Callback):
    """Saves rank r's first-step loss and gradients (after DDP's all-reduce) to ``out/rank{r}.pt``."""

    def __init__(self, out: Path):
        self.out, self.grads = out, None

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        if self.grads is None:
            self.grads = {n: p.grad.detach().clone() for n, p in pl_module.named_parameters() if p.grad is not None}

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if batch_idx == 0:
            torch.save({"loss": outputs["loss"].detach().clone(), "grads": self.grads,
                        "world_size": trainer.world_size},
                       self.out / f"rank{trainer.global_rank}.pt")


class _FakeEvaluator:
    """Stands in for STSEvaluator: encodes two sentences, records which rank evaluated, returns a rank-specific score."""

    def __init__(self, out: Path):
        self.out = out

    def evaluate(self, encode, tasks, split, aggregation, progress=None):
        import torch.distributed as dist

        rank = dist.get_rank()
        emb = encode(["a cat sat", "the dog ran"])
        (self.out / f"evaluated_rank{rank}").write_text(str(tuple(emb.shape)))
        return {t: 50.0 + 10.0 * rank for t in tasks}

    def evaluate_detailed(self, encode, tasks, split, aggregation, progress=None):
        from types import SimpleNamespace

        return SimpleNamespace(scores=self.evaluate(encode, tasks, split, aggregation), tasks={})


class _History(L.Callback):
    def __init__(self, sts: STSCallback, out: Path):
        self.sts, self.out = sts, out

    def on_train_end(self, trainer, pl_module):
        (self.out / f"history_rank{trainer.global_rank}.json").write_text(json.dumps(self.sts.history))


def _ddp_sim_config():
    """``conf/trainer/ddp_sim.yaml`` as composed (the test launches its strategy by fork instead of re-running)."""
    from hydra import compose, initialize_config_dir

    import cselab.io.config  # noqa: F401  (resolvers)

    with initialize_config_dir(str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=["trainer=ddp_sim"])
    assert cfg.trainer.strategy.startswith("ddp") and cfg.trainer.accelerator == "cpu" and cfg.trainer.devices == 2
    return cfg.trainer


class _ProbeDump(SyncProbe):
    """The sync probe (tests/sync_probe.py) of each rank, its windows saved to ``out/probe_rank{r}.json``."""

    def __init__(self, out: Path):
        super().__init__()
        self.out = out

    def on_train_end(self, trainer, pl_module) -> None:
        super().on_train_end(trainer, pl_module)
        (self.out / f"probe_rank{trainer.global_rank}.json").write_text(json.dumps(self.windows))


def _run_ddp(method, rows, out: Path, splits, steps: int = 1, sts: bool = False,
             precision: str | None = None, equal: bool = False, probe: bool = False,
             callbacks: list[L.Callback] = ()) -> list[dict]:
    out.mkdir(parents=True, exist_ok=True)
    callbacks = [_Dump(out), *callbacks] + ([_ProbeDump(out), SigtermOnLoggingSteps()] if probe else [])
    if sts:
        cb = STSCallback(data_dir=str(out), dev_task="stsb")
        cb.evaluator = _FakeEvaluator(out)
        callbacks += [cb, _History(cb, out)]
    sim = _ddp_sim_config()
    trainer = L.Trainer(
        strategy=sim.strategy.replace("ddp", "ddp_fork", 1), accelerator=sim.accelerator, devices=sim.devices,
        precision=precision or sim.precision,
        max_steps=steps, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, num_sanity_val_steps=0, use_distributed_sampler=False,
        gradient_clip_val=None, callbacks=callbacks,
        val_check_interval=1 if sts else 1.0, limit_val_batches=1 if sts else 0,
        check_val_every_n_epoch=None if sts else 1,
        default_root_dir=str(out),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(method, datamodule=_RankData(rows, method.train_collate(), splits, steps, equal))
    return [torch.load(out / f"rank{r}.pt") for r in range(2)]


def _reference(method, rows) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Loss and gradients of ONE process on ``rows`` (no Trainer: no gathering)."""
    method.zero_grad(set_to_none=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # self.log() without a Trainer
        loss = method.training_step(method.train_collate()(rows), 0)
    loss.backward()
    return loss.detach(), {n: p.grad.detach().clone() for n, p in method.named_parameters() if p.grad is not None}


def _max_grad_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert set(a) == set(b), sorted(set(a) ^ set(b))
    return max(float((a[n] - b[n]).abs().max()) for n in a)


@pytest.mark.parametrize(
    "case,splits",
    [("infonce_hard_negatives", (0, 4, 8)), ("infonce_hard_negatives", (0, 5, 8)), ("cot_infonce", (0, 4, 8)),
     ("infonce_eh", (0, 4, 8))],
    ids=["infonce_hard-equal", "infonce_hard-unequal_5_3", "cot_infonce", "infonce_eh"],
)
def test_global_negatives_match_one_process(case, splits, nodrop_bert_dir, tmp_path) -> None:
    ref, rows = _build(nodrop_bert_dir, case)
    ddp_method = copy.deepcopy(ref)
    ref_loss, ref_grads = _reference(ref, rows)
    with_sts = splits == (0, 4, 8) and case == "infonce_hard_negatives"
    ranks = _run_ddp(ddp_method, rows, tmp_path, splits, steps=2 if with_sts else 1, sts=with_sts)
    for r, res in enumerate(ranks):
        assert res["world_size"] == 2
        loss_diff = abs(float(res["loss"]) - float(ref_loss))
        grad_diff = _max_grad_diff(res["grads"], ref_grads)
        print(f"{case} splits={splits} rank {r}: |loss - ref| = {loss_diff:.2e}, max |grad - ref| = {grad_diff:.2e}")
        scale = max(float(g.abs().max()) for g in ref_grads.values())
        assert loss_diff < 1e-5
        # float32, summed in another order: relative to the largest gradient.  Measured on a 2-core CPU: up to
        # 1.1e-5 x scale (cot_infonce, largest gradient 106); a wrong gather (a factor 1/W) would be 0.5 x scale
        assert grad_diff < 5e-5 * max(1.0, scale)
        assert max(float(g.abs().max()) for g in res["grads"].values()) > 1e-4  # not trivially zero
    if with_sts:  # STS callback: rank 0 evaluates (encode works under DDP), both ranks log rank 0's score
        assert (tmp_path / "evaluated_rank0").exists() and not (tmp_path / "evaluated_rank1").exists()
        hist = [json.loads((tmp_path / f"history_rank{r}.json").read_text()) for r in range(2)]
        assert [h["stsb_dev"] for h in hist[0]] == [h["stsb_dev"] for h in hist[1]] == [50.0, 50.0]


@pytest.mark.parametrize("chunk", [None, 3], ids=["uncached", "cached"])
def test_equal_rank_batches_gather_without_a_host_sync(chunk, nodrop_bert_dir, tmp_path) -> None:
    """A DataModule that declares equal batch sizes (cselab's do, ``equal_rank_batches``): the embeddings are
    gathered without exchanging the sizes; the same loss and gradients as one process, and no host sync on a step
    that does not log (the probe of tests/sync_probe.py, in each rank; with the run's SigtermOnLoggingSteps, which
    moves Lightning's per-step SIGTERM broadcast to the logging steps)."""
    from cselab.methods.cached_step import CachedStep

    ref, rows = _build(nodrop_bert_dir, "infonce_hard_negatives")
    ddp_method = copy.deepcopy(ref)
    ddp_method.cached_step = CachedStep(chunk) if chunk else None
    ref_loss, ref_grads = _reference(ref, rows)
    ranks = _run_ddp(ddp_method, rows, tmp_path, (0, 4, 8), steps=2, equal=True, probe=True)
    scale = max(float(g.abs().max()) for g in ref_grads.values())
    for r, res in enumerate(ranks):
        assert abs(float(res["loss"]) - float(ref_loss)) < 1e-5
        assert _max_grad_diff(res["grads"], ref_grads) < 5e-5 * max(1.0, scale)
        windows = json.loads((tmp_path / f"probe_rank{r}.json").read_text())
        assert windows[0]["syncs"] == {} and windows[0]["ops"] > 0, windows[0]  # step 0: neither logs nor validates


@pytest.mark.parametrize(
    "case,splits,chunk",
    [("infonce_hard_negatives", (0, 5, 8), 4), ("cot_infonce", (0, 4, 8), 3), ("infonce_eh", (0, 4, 8), 5)],
    ids=["infonce_hard-unequal_5_3-chunk4", "cot_infonce-chunk3", "infonce_eh-chunk5"],
)
def test_cached_step_with_global_negatives_matches_one_process(case, splits, chunk, nodrop_bert_dir, tmp_path) -> None:
    """``trainer.cached_step``: each rank embeds its part in chunks, the loss sees the gathered embeddings, and
    after DDP's all-reduce the gradients are those of ONE uncached process on the global batch."""
    from cselab.methods.cached_step import CachedStep

    ref, rows = _build(nodrop_bert_dir, case)
    ref.double()
    ddp_method = copy.deepcopy(ref)
    ddp_method.cached_step = CachedStep(chunk)
    ref_loss, ref_grads = _reference(ref, rows)
    ranks = _run_ddp(ddp_method, rows, tmp_path, splits, precision="64-true")
    for r, res in enumerate(ranks):
        assert res["world_size"] == 2 and res["loss"].dtype == torch.float64
        loss_diff = abs(float(res["loss"]) - float(ref_loss)) / abs(float(ref_loss))
        scale = max(float(g.abs().max()) for g in ref_grads.values())  # a parameter's own largest gradient, at
        grad_diff = max(float((res["grads"][n] - g).abs().max()) / max(float(g.abs().max()), 1e-3 * scale)
                        for n, g in ref_grads.items())  # least 1e-3 x the largest (a key bias's is ~0: noise)
        print(f"cached {case} splits={splits} chunk={chunk} rank {r}: relative |loss - ref| = {loss_diff:.2e}, "
              f"largest relative |grad - ref| of a parameter = {grad_diff:.2e}")
        assert res["grads"].keys() == ref_grads.keys()
        assert loss_diff < 1e-10
        assert grad_diff < 1e-10  # float64; a wrong gather (a factor 1/W) would be 0.5
        assert max(float(g.abs().max()) for g in res["grads"].values()) > 1e-4


def test_per_device_negatives_use_the_local_batch(nodrop_bert_dir, tmp_path) -> None:
    case = "infonce_hard_negatives"
    ref, rows = _build(nodrop_bert_dir, case, negatives="per_device")
    ddp_method = copy.deepcopy(ref)
    global_loss, _ = _reference(copy.deepcopy(ref), rows)
    ranks = _run_ddp(ddp_method, rows, tmp_path, (0, 4, 8))
    local = [_reference(copy.deepcopy(ref), rows[:4]), _reference(copy.deepcopy(ref), rows[4:])]
    mean_grads = {n: (local[0][1][n] + local[1][1][n]) / 2 for n in local[0][1]}
    for r, res in enumerate(ranks):
        assert abs(float(res["loss"]) - float(global_loss)) > 1e-3  # fewer negatives: another loss
        assert abs(float(res["loss"]) - float(local[r][0])) < 1e-5  # exactly the rank's own batch
        assert _max_grad_diff(res["grads"], mean_grads) < 1e-5  # DDP: mean of the per-rank gradients


def test_sts_callback_rank0_only_unit() -> None:
    """Without processes: rank 0 evaluates, other ranks receive the broadcast value."""

    class Strategy:
        def __init__(self, value):
            self.value = value

        def broadcast(self, obj, src=0):
            return self.value if obj is None else obj

    class Trainer:
        def __init__(self, zero, value):
            self.is_global_zero, self.strategy = zero, Strategy(value)

    calls = []

    class Evaluator:
        def evaluate_detailed(self, encode, tasks, split, aggregation, progress=None):
            from types import SimpleNamespace

            calls.append(split)
            return SimpleNamespace(scores={"stsb": 77.0}, tasks={})

    cb = STSCallback(data_dir=".")
    cb.evaluator = Evaluator()
    rank0 = cb._score(Trainer(True, None), None, ("stsb",), "dev")
    rank1 = cb._score(Trainer(False, rank0), None, ("stsb",), "dev")
    assert calls == ["dev"] and rank0 == rank1 == {"stsb": 77.0}


def test_negatives_key_validated(make_method) -> None:
    with pytest.raises(ValueError, match="negatives"):
        make_method("simcse", "bert", negatives="everything")
