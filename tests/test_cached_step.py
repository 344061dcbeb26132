"""The cached contrastive step (``trainer.cached_step.chunk_size``, GradCache) gives the uncached step's loss and
gradients, for every method as ``run.py`` builds it, in float64 with dropout ON.

Three references:

* ``chunk_size >= B * V``: the cached step draws the uncached step's dropout masks, so its loss and every gradient
  equal the real uncached ``training_step``'s (every registered method: ``tests/test_contract.py``);
* smaller chunks, dividing B * V or not: the masks are drawn chunk by chunk, and the reference is the uncached
  computation on those masks: ONE graph over the same chunked forward passes (the prompt draw first, the chunks,
  the template-bias rows, the loss, the MLM passes), ONE backward, no generator state restored;
* dropout OFF: the cached step with small chunks equals the real uncached ``training_step``.

Relative tolerance 1e-10 (float64).  DDP with gathered negatives: ``tests/test_ddp.py``.
"""

from __future__ import annotations

import copy
import warnings
from pathlib import Path

import lightning as L
import pytest
import torch
from hydra import compose, initialize_config_dir
from torch import nn
from torch.utils.data import DataLoader

import cselab.io.config  # noqa: F401  (resolvers)
from cselab.methods.cached_step import CachedStep, check_options, chunk_rows
from cselab.model.spec import ConfigError
from cselab.run.spec import RunSpec
from tests.conftest import build_method, loss_and_grads, no_dropout

CONF = str(Path(__file__).resolve().parents[1] / "conf")
SENTENCES = ["a man is playing a guitar", "the cat sat on the mat", "two dogs are running in the park",
             "it is raining today", "birds fly", "a woman is slicing an onion", "the dog ran"]
TRIPLETS = [{"sent0": s, "sent1": s + " today", "hard_neg": SENTENCES[(i + 3) % 7]} for i, s in enumerate(SENTENCES)]

#: case -> (method, setting, overrides); each runs with dropout on (backbone 0.1, prefix 0.1, LoRA 0.05)
CASES = {
    "simcse_unsup": ("simcse", "unsup", []),
    "simcse_sup_hard_negatives": ("simcse", "sup", []),
    "promptbert_position": ("promptbert", "unsup", ["method.denoise=position"]),
    "promptbert_sup_head_each": ("promptbert", "sup", []),
    "cot_bert_pad_3_views": ("cot_bert", "unsup", []),
    "dcpcse_prefix_mlm": ("dcpcse", "unsup", ["method.mlm=${method.mlm_config}"]),
    "promcse_energy_hinge": ("promcse", "sup", ["loss=infonce_eh"]),
    "promcse_input_layer": ("promcse", "sup", ["loss=infonce_eh", "tuning.variant=input_layer"]),
    "scpcse_soft_prompt": ("scpcse", "unsup", []),
    "simcse_loss_groups": ("simcse", "unsup", ["loss.groups=2"]),
    "prompteol_lora": ("prompteol", "sup", ["tuning=lora", "tuning.r=4"]),
}


def _build(case: str, mlm_dir: Path, decoder_dir: Path, chunk: int | None = None, device: str = "cpu"):
    """The method as run.py builds it (float64, train mode, on ``device``) and one training batch of 7 examples."""
    method, setting, extra = CASES[case]
    backbone = [f"backbone.name_or_path={decoder_dir}", "backbone.family=decoder"] \
        if method == "prompteol" else [f"backbone.name_or_path={mlm_dir}", "backbone.family=bert"]
    cached = [f"trainer.cached_step.chunk_size={chunk}"] if chunk else []
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        cfg = compose("config", overrides=[f"method={method}", f"setting={setting}", *backbone, *extra, *cached])
    torch.manual_seed(0)
    model = build_method(cfg).double().train().to(device)
    rows = TRIPLETS if setting == "sup" else [{"text": s} for s in SENTENCES]
    return model, {k: t.to(device) for k, t in model.train_collate()(rows).items()}


def _served(prompt, rows):
    if prompt is None:
        return None
    part = prompt if rows is None else prompt[rows]
    return {part.shape: part}


def _chunked_reference(method, batch, chunk: int, seed: int = 1):
    """The uncached loss and gradients on the masks the cached step draws: one graph, one backward."""
    method.zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    model, encoder = method.model, method.encoder
    b, v = batch["input_ids"].shape[:2]
    chunks = chunk_rows(b * v, chunk)
    prompt = encoder.draw_prompt(b * v)
    hs = []
    for rows in chunks:
        with encoder.one_prompt_draw(_served(prompt, rows)):
            hs.append(model.sequence_states(batch, rows))
    with encoder.one_prompt_draw(_served(prompt, None)):
        bias = model.bias_states(batch)
    loss = method.loss_fn(model.embed_states(torch.cat(hs).view(b, v, -1), bias, batch))
    if method.aux_mlm is not None and "mlm_input_ids" in batch:
        masked = int((batch["mlm_labels"] != -100).sum())
        assert masked > 0
        ce = 0.0
        for rows in chunks:
            with encoder.one_prompt_draw(_served(prompt, rows)):
                ce = ce + method.aux_mlm.loss_sum(encoder, batch, rows)
        loss = loss + method.aux_mlm.weight(0) * ce / masked
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in method.named_parameters() if p.grad is not None}


def _assert_same(loss, grads, ref_loss, ref_grads, rtol: float = 1e-10) -> None:
    assert grads.keys() == ref_grads.keys(), sorted(set(grads) ^ set(ref_grads))
    assert ref_grads, "no parameter got a gradient"
    assert abs(float(loss) - float(ref_loss)) <= rtol * abs(float(ref_loss))
    scale = max(float(g.abs().max()) for g in ref_grads.values())
    assert scale > 0
    for name, ref in ref_grads.items():
        err = float((grads[name] - ref).abs().max())
        assert err <= rtol * max(float(ref.abs().max()), 1e-3 * scale), f"{name}: |diff| {err:.3e}"


@pytest.fixture(scope="module")
def dirs(tiny_mlm_dir, tiny_decoder_dirs):
    return tiny_mlm_dir, tiny_decoder_dirs["opt"]


#: what each case's batch must hold: (views V, template-bias rows, MLM inputs), so that each case tests its feature
SHAPES = {"simcse_unsup": (2, False, False), "simcse_sup_hard_negatives": (3, False, False),
          "promptbert_position": (2, True, False), "promptbert_sup_head_each": (3, True, False),
          "cot_bert_pad_3_views": (3, True, False), "dcpcse_prefix_mlm": (2, False, True),
          "promcse_energy_hinge": (3, False, False), "promcse_input_layer": (3, False, False),
          "scpcse_soft_prompt": (2, False, False), "simcse_loss_groups": (2, False, False),
          "prompteol_lora": (3, False, False)}


@pytest.mark.parametrize("case", list(CASES))
def test_cached_step_equals_uncached_step(case, dirs) -> None:
    uncached, batch = _build(case, *dirs)
    n = batch["input_ids"].shape[0] * batch["input_ids"].shape[1]
    assert (batch["input_ids"].shape[1], "bias_input_ids" in batch, "mlm_input_ids" in batch) == SHAPES[case]
    if case == "promptbert_sup_head_each":
        assert uncached.spec.head_on == "each" and uncached.head is not None
    ref_loss, _ = loss_and_grads(uncached, batch)
    assert ref_loss.dtype == torch.float64
    # dropout is on: another seed gives another loss (so the equalities below are about the same masks)
    assert abs(float(loss_and_grads(uncached, batch, seed=2)[0]) - float(ref_loss)) > 1e-6
    divides = max(d for d in range(2, n) if n % d == 0)  # 7 of 14 or 21 rows
    assert n % 4  # 4 does not divide B*V
    cached, _ = _build(case, *dirs, chunk=divides)
    assert cached.cached_step.chunk_size == divides
    for chunk in (divides, 4, 1):  # (one chunk of all rows = the uncached step: tests/test_contract.py)
        cached.cached_step = CachedStep(chunk)
        loss, grads = loss_and_grads(cached, batch)
        _assert_same(loss, grads, *_chunked_reference(copy.deepcopy(uncached), batch, chunk))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (dropout draws from its generator)")
@pytest.mark.parametrize("case", ["simcse_unsup", "promptbert_position", "cot_bert_pad_3_views", "dcpcse_prefix_mlm",
                                  "promcse_energy_hinge", "prompteol_lora"])
def test_cached_step_on_cuda_restores_the_cuda_generator(case, dirs) -> None:
    """On a GPU, dropout draws its masks from the CUDA generator, whose state the cached step records and restores
    per chunk: the same equalities as on the CPU (float64, dropout on).  Run where a GPU is; CI has none."""
    uncached, batch = _build(case, *dirs, device="cuda")
    assert batch["input_ids"].is_cuda and next(uncached.parameters()).is_cuda
    ref_loss, ref_grads = loss_and_grads(uncached, batch)
    assert abs(float(loss_and_grads(uncached, batch, seed=2)[0]) - float(ref_loss)) > 1e-6
    n = batch["input_ids"].shape[0] * batch["input_ids"].shape[1]
    cached = copy.deepcopy(uncached)
    cached.cached_step = CachedStep(n)
    _assert_same(*loss_and_grads(cached, batch), ref_loss, ref_grads)
    for chunk in (4, 1):
        cached.cached_step = CachedStep(chunk)
        _assert_same(*loss_and_grads(cached, batch), *_chunked_reference(copy.deepcopy(uncached), batch, chunk))


@pytest.mark.parametrize("case", ["simcse_sup_hard_negatives", "promptbert_position", "cot_bert_pad_3_views",
                                  "dcpcse_prefix_mlm", "prompteol_lora"])
def test_cached_step_without_dropout_equals_uncached_step(case, dirs) -> None:
    uncached, batch = _build(case, *dirs)
    no_dropout(uncached)
    ref_loss, ref_grads = loss_and_grads(uncached, batch)
    assert float(loss_and_grads(uncached, batch, seed=2)[0]) == float(ref_loss)  # deterministic
    cached = copy.deepcopy(uncached)
    for chunk in (3, 4):
        cached.cached_step = CachedStep(chunk)
        _assert_same(*loss_and_grads(cached, batch), ref_loss, ref_grads)


def test_cached_step_keeps_existing_gradients_and_skips_nonfinite(dirs, tmp_path, monkeypatch) -> None:
    """Gradients already in ``.grad`` (accumulation) are kept and the cached ones added by the returned loss's
    backward; a non-finite loss under ``skip`` leaves no gradient behind."""
    method, batch = _build("promptbert_position", *dirs, chunk=3)
    _, grads = loss_and_grads(method, batch)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.manual_seed(1)
        loss = method.training_step(batch, 0)  # .grad still holds the first step's
        assert all(torch.equal(p.grad, grads[n]) for n, p in method.named_parameters() if n in grads)
        loss.backward()
    for n, p in method.named_parameters():
        if n in grads:
            torch.testing.assert_close(p.grad, 2 * grads[n], rtol=1e-12, atol=0)

    method.nonfinite.policy = "skip"
    method.zero_grad(set_to_none=True)
    class NaNLoss(nn.Module):
        def __init__(self, loss):
            super().__init__()
            self.loss = loss

        def forward(self, z):
            return self.loss(z) * float("nan")

    method.loss_fn = NaNLoss(method.loss_fn)
    monkeypatch.chdir(tmp_path)  # the batch's sentences: ./nonfinite_step0.json without a Trainer
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert method.training_step(batch, 0) is None
    assert all(p.grad is None for p in method.parameters())
    assert method.skipped_nonfinite == 1 and (tmp_path / "nonfinite_step0.json").is_file()


def test_cached_step_with_activation_checkpointing_and_bf16(dirs) -> None:
    """Composes with activation checkpointing (same loss and gradients) and bf16 autocast (finite, close)."""
    method, batch = _build("promptbert_position", *dirs, chunk=4)
    method.float()
    loss, grads = loss_and_grads(method, batch)
    method.encoder.enable_activation_checkpointing()
    loss_ckpt, grads_ckpt = loss_and_grads(method, batch)
    assert float(loss_ckpt) == pytest.approx(float(loss), rel=1e-6)
    for name, grad in grads.items():
        torch.testing.assert_close(grads_ckpt[name], grad, rtol=1e-5, atol=1e-6, msg=name)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss_bf16, grads_bf16 = loss_and_grads(method, batch)
    assert loss_bf16.dtype == torch.float32 and torch.isfinite(loss_bf16)
    assert float(loss_bf16) == pytest.approx(float(loss), rel=0.05, abs=0.05)
    assert all(torch.isfinite(g).all() for g in grads_bf16.values())


class _Rows(L.LightningDataModule):
    def __init__(self, rows, collate, steps):
        super().__init__()
        self.rows, self.collate, self.steps = rows, collate, steps

    def train_dataloader(self):
        return DataLoader([self.rows] * self.steps, batch_size=None, collate_fn=self.collate)


class _Grads(L.Callback):
    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        self.grads = {n: p.grad.detach().clone() for n, p in pl_module.named_parameters() if p.grad is not None}


def test_lightning_fit_with_cached_step_equals_uncached(dirs, tmp_path) -> None:
    """Through Lightning's loop (accumulation over 2 batches, gradient clipping, AdamW): the accumulated gradients
    and the weights after the optimizer step equal the uncached run's (dropout off, float32)."""
    grads, trained = {}, {}
    for chunk in (None, 3):
        method, _ = _build("simcse_sup_hard_negatives", *dirs)
        method.float()
        no_dropout(method)
        method.cached_step = CachedStep(chunk) if chunk else None
        dump = _Grads()
        trainer = L.Trainer(accelerator="cpu", devices=1, max_steps=1, accumulate_grad_batches=2,
                            gradient_clip_val=0.5, logger=False, enable_checkpointing=False,
                            enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                            limit_val_batches=0, callbacks=[dump], default_root_dir=str(tmp_path / str(chunk)))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trainer.fit(method, datamodule=_Rows(TRIPLETS, method.train_collate(), 2))
        grads[chunk], trained[chunk] = dump.grads, {n: p.detach().clone() for n, p in method.named_parameters()}
    _assert_same(torch.tensor(1.0), grads[3], torch.tensor(1.0), grads[None], rtol=1e-4)  # float32 sums
    first, _ = _build("simcse_sup_hard_negatives", *dirs)
    for name, p in first.named_parameters():
        before = p.detach().float()
        torch.testing.assert_close(trained[3][name] - before, trained[None][name] - before, rtol=0, atol=1e-6,
                                   msg=name)  # AdamW's first step: about lr x sign(gradient) for each weight
    assert any(not torch.equal(p.detach().float(), trained[3][n]) for n, p in first.named_parameters())


def test_refused_combinations_are_named(dirs) -> None:
    for bad in (0, -2, 2.5, "32", True):
        with pytest.raises(ConfigError, match="trainer.cached_step.chunk_size"):
            CachedStep(bad)
    with pytest.raises(ConfigError, match="trainer.precision=16-mixed"):
        check_options(precision="16-mixed")
    with pytest.raises(ConfigError, match="trainer.strategy=fsdp"):
        check_options(strategy="fsdp")
    check_options(precision="bf16-mixed", strategy="ddp")
    mlm_dir, _ = dirs
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        for overrides, match in ((["trainer.cached_step.chunk_size=0"], "chunk_size=0"),
                                 (["trainer.cached_step.chunk_size=8", "trainer.precision=16-mixed"],
                                  "trainer.precision=16-mixed")):
            cfg = compose("config", overrides=["method=simcse", f"backbone.name_or_path={mlm_dir}",
                                                "backbone.family=bert", *overrides])
            with pytest.raises(ConfigError, match=match):
                RunSpec.from_config(cfg)


def test_run_with_cached_step_trains_and_may_resume_with_another_chunk_size(tmp_path, tiny_bert_dir, sts_data_dir):
    """``run.py trainer.cached_step.chunk_size=3``: the Trainer is built without the key (the module takes it) and
    the run trains with the cached step; the chunk size is not a change of the run's recipe (a resume may change
    it, and the W&B variant does not name it)."""
    from cselab.callbacks.run_config import config_changes
    from cselab.io.config import variant_name
    from cselab.run.spec import copies_of, resolved_config
    from tests.conftest import compose_tiny_run, run

    cfg = compose_tiny_run(tmp_path, tiny_bert_dir, sts_data_dir, "eval.test_tasks=[stsb]",
                           "trainer.cached_step.chunk_size=3", "trainer.max_steps=2",
                           "checkpointing.keep_last=true")
    results = run(cfg, tmp_path / "run")
    assert results["global_step"] == 2
    ckpt = torch.load(tmp_path / "run" / "checkpoints" / "last.ckpt", weights_only=False)
    assert ckpt["hyper_parameters"]["cached_step"] == {"chunk_size": 3}
    other = compose_tiny_run(tmp_path, tiny_bert_dir, sts_data_dir, "eval.test_tasks=[stsb]",
                             "trainer.cached_step.chunk_size=5", "trainer.max_steps=2")
    assert config_changes(resolved_config(cfg), resolved_config(other), copies_of(other)) == []
    assert variant_name(["trainer.cached_step.chunk_size=32"]) == "default"


def test_cached_step_with_a_compiled_backbone(dirs, tmp_path) -> None:
    """``compile.enabled=true`` (here the ``eager`` backend: dynamo's tracing without a C compiler): the compiled
    layers run the first pass without a graph and the second with one; same loss and gradients (dropout off)."""
    from cselab.methods.compiled import CompileOptions, compile_training

    uncached, batch = _build("promptbert_position", *dirs)
    no_dropout(uncached)
    ref_loss, ref_grads = loss_and_grads(uncached, batch)
    cached = copy.deepcopy(uncached)
    cached.cached_step = CachedStep(4)
    assert compile_training(cached, CompileOptions(enabled=True, backend="eager", cache_dir=str(tmp_path))) == "layers"
    _assert_same(*loss_and_grads(cached, batch), ref_loss, ref_grads)
