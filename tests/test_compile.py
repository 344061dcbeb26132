"""The compiled training step (``compile.*``, :mod:`cselab.methods.compiled`): the repeated layer compiled once for
all layers and the loss in its own graph (regional compilation), no graph break, a few graphs for a whole run, the
eager step's loss and gradients on every method, checkpoints unchanged, resume both ways, the on-disk caches under
``compile.cache_dir`` loaded by a second compilation, the FLOP counter's step leaving the compiled code alone; the
combinations that cannot hold refused by name.  Inductor on CPU (gcc); the models are tiny."""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import pytest
import torch
import torch._dynamo
from torch._dynamo.utils import counters

from cselab.methods.compiled import CompileOptions, compile_report, compile_training
from cselab.model.spec import ConfigError
from tests.conftest import no_dropout
from tests.test_cached_step import CASES, _assert_same, _build, dirs  # noqa: F401

CORPUS = str(Path(__file__).resolve().parent / "data" / "wiki1m_head300.txt")  # real sentences of varied lengths: widths change from batch to batch


class _Killed(RuntimeError):
    pass


def _clear_in_memory_compile_caches() -> None:
    """What a new process would not have: dynamo's code caches and inductor's loaded modules (the on-disk FX graph
    and AOTAutograd caches stay)."""
    from torch._inductor.codecache import PyCodeCache

    torch._dynamo.reset()
    PyCodeCache.cache_clear(purge=True)
    counters.clear()


@pytest.mark.parametrize("name", ["simcse", "promptbert"])
def test_compiled_step_equals_the_eager_step_and_reuses_its_graphs_from_disk(name, make_method, tmp_path,
                                                                             fresh_dynamo, quick_kernel_link) -> None:
    """Dropout off, float64 (float32 would compare inductor's reduction order, ~1e-4 on PromptBERT's head bias at
    temperature 0.05): the compiled (inductor) training step's loss and gradients equal the eager one's to 1e-5;
    the state dict's keys do not change (nothing is wrapped).  Regional: ONE graph for both layers plus the loss's
    (2 graphs, compiled once); the compiled artefacts are written under ``compile.cache_dir`` and a second
    compilation (a new process's: in-memory caches cleared) loads every graph from there (FX graph and
    AOTAutograd cache hits, no miss)."""
    extra = {"pooler": "mask", "denoise": "position", "prompt": "promptbert"} if name == "promptbert" else {}
    method = make_method(name, "bert", **extra).double().train()
    no_dropout(method)
    rows = [{"text": s} for s in ["a man is playing a guitar", "the cat sat on the mat", "birds fly", "a cat sat"]]
    batch = method.train_collate()(rows)
    keys = list(method.state_dict())

    def loss_and_grads(forward):
        method.zero_grad(set_to_none=True)
        loss = forward(batch)[0]
        loss.backward()
        return loss.detach(), {n: p.grad.clone() for n, p in method.named_parameters() if p.grad is not None}

    eager_loss, eager_grads = loss_and_grads(method.forward_loss)
    cache = tmp_path / "compile_cache"
    assert compile_training(method, CompileOptions(enabled=True, backend="inductor", cache_dir=str(cache))) == "layers"
    assert method.training_forward() == method.forward_loss and method.compiled_forward_loss is None
    compiled_loss, compiled_grads = loss_and_grads(method.training_forward())
    torch.testing.assert_close(compiled_loss, eager_loss, rtol=1e-5, atol=1e-5)
    assert compiled_grads.keys() == eager_grads.keys()
    for key, grad in eager_grads.items():
        torch.testing.assert_close(compiled_grads[key], grad, rtol=1e-5, atol=1e-5, msg=key)
    assert list(method.state_dict()) == keys
    cold = compile_report()
    assert (cold["graphs"], cold["recompilations"], cold["graph_breaks"]) == (2, 0, 0), cold
    assert cold["fx_cache_misses"] > 0 and (cache / "fxgraph").is_dir() and (cache / "aotautograd").is_dir()

    _clear_in_memory_compile_caches()
    warm_loss, warm_grads = loss_and_grads(method.training_forward())
    warm = compile_report()
    assert warm["fx_cache_hits"] > 0 and warm["fx_cache_misses"] == 0, warm
    # every graph traced once (use_tracing_settings): a trace that dynamo restarts would add an AOTAutograd miss
    assert cold["aot_cache_misses"] == cold["graphs"] and warm["aot_cache_misses"] == 0, (cold, warm)
    torch.testing.assert_close(warm_loss, compiled_loss, rtol=0, atol=0)


def test_a_compiled_run_logs_its_graphs_once_and_keeps_its_cache_where_configured(tmp_path, tiny_bert_dir,
                                                                                   sts_data_dir, fresh_dynamo,
                                                                                   caplog) -> None:
    """``run.py compile.enabled=true compile.cache_dir=<dir>``: the layers compile although the FLOP counter's first
    step of each shape runs eagerly (under ``set_stance("force_eager")``: a frame that dynamo skipped under the
    counter's dispatch mode would never compile), inductor's cache points at ``compile.cache_dir``, and the run logs
    its graphs and recompilations once, at the end of fit."""
    import logging
    import os

    from tests.conftest import compose_tiny_run, run

    cache = tmp_path / "my_cache"
    cfg = compose_tiny_run(tmp_path, tiny_bert_dir, sts_data_dir, "eval.test_tasks=[stsb]", "compile.enabled=true",
                           "compile.backend=eager", f"compile.cache_dir={cache}", "data.pad_to_multiple_of=8")
    with warnings.catch_warnings(), caplog.at_level(logging.INFO, logger="cselab.methods.compiled"):
        warnings.simplefilter("ignore")
        results = run(cfg, tmp_path / "run")
    assert results["global_step"] == 4
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(cache) and cache.is_dir()
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("torch.compile (layers)")]
    assert len(lines) == 1, lines
    report = compile_report()
    assert report["graphs"] >= 2 and report["graph_breaks"] == 0, report  # the layer's and the loss's, at least
    assert f"{report['graphs']} graphs" in lines[0] and str(cache) in lines[0]


@pytest.mark.integration
@pytest.mark.parametrize("name", ["simcse", "promptbert"])
def test_a_200_step_run_recompiles_at_most_4_times_without_a_graph_break(name, tmp_path, tiny_bert_dir,
                                                                         sts_data_dir, quick_kernel_link) -> None:
    """``run.py compile.enabled=true data.pad_to_multiple_of=8`` (the GPU defaults) on real sentences of varied
    lengths: 200 steps, a validation and the test, at most 4 recompilations (the layer's and the loss's graphs
    first compiled, then e.g. the layer without gradients for the evaluation), 0 graph breaks (dynamo's counters)."""
    from tests.conftest import compose_tiny_run, run

    torch._dynamo.reset()
    counters.clear()
    cfg = compose_tiny_run(tmp_path, tiny_bert_dir, sts_data_dir, f"method={name}", f"data.path={CORPUS}",
                           f"compile.cache_dir={tmp_path / 'cache'}",
                           "data.batch_size=6", "trainer.max_steps=200", "trainer.max_epochs=4", "trainer.val_check_interval=200",
                           "eval.test_tasks=[stsb]", "compile.enabled=true", "data.pad_to_multiple_of=8")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results = run(cfg, tmp_path / "run")
    assert results["global_step"] == 200
    assert dict(counters["graph_break"]) == {}
    report = compile_report()
    assert report["graphs"] >= 2 and report["recompilations"] <= 4, report


@pytest.mark.integration
def test_a_compiled_run_resumes_eager_and_compiled(tmp_path, tiny_bert_dir, sts_data_dir, monkeypatch) -> None:
    """A compiled run killed after its step-2 checkpoint resumes to the end with ``compile.enabled=false`` and with
    ``compile.enabled=true`` (the checkpoint holds the plain module's keys)."""
    from cselab.methods.base import ContrastiveMethod
    from tests.conftest import compose_tiny_run, run

    real_step = ContrastiveMethod.training_step

    def dies_at_step_3(self, batch, batch_idx):
        if self.global_step == 3:
            raise _Killed("killed at step 3")
        return real_step(self, batch, batch_idx)

    def config(out, compiled: bool, *extra):
        return compose_tiny_run(tmp_path, tiny_bert_dir, sts_data_dir, "eval.test_tasks=[stsb]",
                                f"compile.enabled={str(compiled).lower()}", "compile.backend=eager",
                                f"compile.cache_dir={tmp_path / 'cache'}", *extra)

    out = tmp_path / "run"
    with monkeypatch.context() as patch, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        patch.setattr(ContrastiveMethod, "training_step", dies_at_step_3)
        with pytest.raises(_Killed):
            run(config(out, True), out)
    state = torch.load(out / "checkpoints" / "last.ckpt", weights_only=False)
    assert state["global_step"] == 2 and not any("_orig_mod" in k for k in state["state_dict"])
    for compiled in (False, True):
        copy = tmp_path / f"resumed_{compiled}"
        shutil.copytree(out, copy)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            results = run(config(copy, compiled, f"resume.dir={copy}"), copy)
        assert results["global_step"] == 4


def test_options_refused_by_name() -> None:
    with pytest.raises(ConfigError, match=r"compile.backend='nope': expected one of .*inductor"):
        CompileOptions(enabled=True, backend="nope")
    with pytest.raises(ConfigError, match="compile.enabled='yes'"):
        CompileOptions(enabled="yes")
    with pytest.raises(ConfigError, match="compile.mode='fast'"):
        CompileOptions(mode="fast")
    graphs = CompileOptions(enabled="auto", mode="reduce-overhead")
    assert graphs.active(cuda=True) and not graphs.active(cuda=False)
    assert not graphs.active(cuda=True, quantized=True)  # auto: a 4-bit backbone stays eager
    assert CompileOptions(enabled=True).active(cuda=False, quantized=True)
    graphs.check(cuda=False, activation_checkpointing=True, cached_step=True)  # auto on CPU: off, nothing to refuse
    with pytest.raises(ConfigError, match="reduce-overhead replays CUDA graphs: it needs a CUDA GPU"):
        CompileOptions(enabled=True, mode="reduce-overhead").check(cuda=False, activation_checkpointing=False,
                                                                   cached_step=False)
    with pytest.raises(ConfigError, match="reduce-overhead with activation_checkpointing=true"):
        graphs.check(cuda=True, activation_checkpointing=True, cached_step=False)
    with pytest.raises(ConfigError, match="reduce-overhead with trainer.cached_step"):
        graphs.check(cuda=True, activation_checkpointing=False, cached_step=True)
    graphs.check(cuda=True, activation_checkpointing=False, cached_step=False)
    assert CompileOptions.from_config(None).active(cuda=True) is False


def test_validate_refuses_bad_compile_and_data_keys(tiny_bert_dir) -> None:
    from hydra import compose, initialize_config_dir

    from cselab.run.spec import RunSpec
    conf = str(Path(__file__).resolve().parents[1] / "conf")
    for override, match in (("compile.mode=fast", "compile.mode='fast'"),
                            ("data.num_workers=-1", "data.num_workers=-1"),
                            ("data.pad_to_multiple_of=0", "data.pad_to_multiple_of=0"),
                            ("optim.fused=maybe", "optim.fused='maybe'")):
        with initialize_config_dir(config_dir=conf, version_base="1.3"):
            cfg = compose("config", overrides=["method=simcse", f"backbone.name_or_path={tiny_bert_dir}",
                                                "backbone.family=bert", override])
        with pytest.raises(ConfigError, match=match):
            RunSpec.from_config(cfg)


def test_sibling_linears_become_one_matmul_with_the_same_outputs_and_gradients(fresh_dynamo) -> None:
    """``FuseSiblingLinears`` on dynamo's graph of an attention-like block: the query, key and value projections
    of one (N, T, D) input become one linear (a value projection of another width included); a linear without a
    bias on the same input and one on another input stay apart; outputs and parameter gradients equal eager's."""
    from cselab.methods.sibling_linears import FuseSiblingLinears

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.q, self.k, self.v = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8), torch.nn.Linear(8, 4)
            self.gate, self.out = torch.nn.Linear(8, 8, bias=False), torch.nn.Linear(4, 8)

        def forward(self, x):
            scores = (self.q(x) @ self.k(x).transpose(1, 2)).softmax(-1)
            return self.out(scores @ self.v(x)) * self.gate(x).sigmoid()

    linears = []

    def backend(gm, example_inputs):
        FuseSiblingLinears()(gm.graph)
        gm.recompile()
        linears.extend(n for n in gm.graph.nodes if n.target is torch._C._nn.linear)
        return gm.forward

    torch.manual_seed(0)
    block = Block().double()
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    eager = block(x)
    eager.sum().backward()
    grads = {n: p.grad.clone() for n, p in block.named_parameters()}
    block.zero_grad(set_to_none=True)
    fused = torch.compile(block, backend=backend)(x)
    fused.sum().backward()
    assert len(linears) == 3  # q + k + v as one; gate; out
    torch.testing.assert_close(fused, eager, rtol=1e-12, atol=1e-12)
    for name, p in block.named_parameters():
        torch.testing.assert_close(p.grad, grads[name], rtol=1e-12, atol=1e-12, msg=name)
    assert FuseSiblingLinears().uuid() == FuseSiblingLinears().uuid()
