"""The training step as a run takes it (Lightning's loop, the run's callbacks): time, MFU, host ops and syncs, eager
against compiled (a script, not a test).

    python benchmarks/bench_step.py --layers 12 --batch-sizes 32 --modes eager compiled --steps 3   # CPU
    python benchmarks/bench_step.py --device cuda --bf16 --batch-sizes 64 256 --modes eager compiled reduce-overhead
    python benchmarks/bench_step.py --ops --layers 12 --batch-sizes 64       # host ops per step, eager vs compiled
    python benchmarks/bench_step.py --device cuda --bf16 --sync-check 20     # torch.cuda.set_sync_debug_mode("error")
    python benchmarks/bench_step.py --device cuda --bf16 --cached 64 128 --batch-sizes 512 --methods promptbert

What is measured.  Each (method, mode) runs in its own process: the method built as ``run.py`` builds it (Hydra
compose + ``cselab.run.assemble.build_run_method``, so ``compile.*`` applies as in a run) on a RANDOM BERT of bert-base shape
(12 x 768, 12 heads, 3072; ``--layers``) with the real bert-base-uncased vocabulary (30,522 entries, from the
embedded MiniLM package), a batch of B real sentences of the wiki1m sample collated as the run's DataModule collates
them (``data.pad_to_multiple_of`` 8 on a GPU), then ``lightning.Trainer.fit`` for ``--warmup + --steps`` steps on
that batch (pinned host memory, as the run's loader) with the run's non-evaluation callbacks (FLOP counter,
throughput, RNG state) and AdamW as configured (``optim.fused: auto``).

* ``step_ms``: the wall time of the timed steps divided by their number, the device synchronised once before the
  first and once after the last (steps overlap as they do in a run);
* ``mfu``: the step's matmul / attention FLOPs (``torch.utils.flop_counter``, forward + backward) per second over the
  card's dense peak for the dtype (Lightning's table); None on CPU;
* ``--ops``: one more step under ``torch.profiler``: the top-level ``aten::`` ops the host dispatches (most of them
  a kernel launch) and, compiled, the calls of inductor's own kernels in that step (a layer's kernels once per
  layer: :func:`count_host_ops`); their sum over eager's is #41's host-ops goal (at most 35 %);
* ``--sync-check N``: N more steps with ``torch.cuda.set_sync_debug_mode("error")`` (CUDA) and
  ``trainer.log_every_n_steps`` above them: the first synchronising call raises, and its place is reported;
* ``--modes``: ``eager``, ``compiled`` (the run's ``compile.enabled=true``), ``reduce-overhead`` (CUDA graphs), and
  ``compiled-autograd`` (compiled, and each ``backward()`` under compiled autograd: a measurement, not a run setting);
* ``--cached C ...``: the cached step (``trainer.cached_step.chunk_size=C``) besides the uncached one;
* ``first_step_s``: seconds from the case process's start to the end of its first step run as configured (eager:
  step 1; compiled: step 2, the FLOP counter's step 1 running eagerly), model build included; ``compile``: the
  case's :func:`cselab.methods.compiled.compile_report` (graphs, recompilations, compile seconds, cache hits);
* ``--warm``: every compiled case run twice, in two processes sharing one fresh ``compile.cache_dir``: ``start``
  ``cold`` (empty cache) then ``warm`` (the on-disk FX graph and AOTAutograd caches hit);
* ``--eval``: the 7-task STS test evaluation of the method's ``encode`` (``eval.precision: auto``) and the STS-B dev
  evaluation (``dev_s``, what a run repeats every ``val_check_interval`` steps);
* ``--paper-runs``: the full unsup paper runs extrapolated from the measured cases (:data:`PAPER_RUNS`): steps x
  ``step_ms`` + evaluations x ``dev_s`` + compile seconds (the largest cold ``compile_s``);
* ``--peer``: sentence-transformers' ``MultipleNegativesRankingLoss`` step on the same model and batch
  (``benchmarks/bench_train_eval.py``'s peer case), when sentence-transformers is installed.

The script prints one ``RESULT`` JSON line per case and a table; ``--json`` writes them all.  Figures:
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import lightning as L

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_train_eval import available_flops, build_random_bert_base, count_step_flops, load_sentences  # noqa: E402

METHODS = {"simcse": [], "promptbert": [], "cot_bert": []}  # unsup, the paper defaults (denoising included)
#: the unsup paper runs on bert-base (conf/method/*.yaml hparams; SimCSE's 1M wiki sentences, one epoch, STS-B dev
#: every 125 steps): method -> (batch, steps, evaluations)
PAPER_RUNS = {"simcse": (64, -(-1_000_000 // 64), -(-1_000_000 // 64) // 125),
              "promptbert": (256, -(-1_000_000 // 256), -(-1_000_000 // 256) // 125)}
MODES = {"eager": ["compile.enabled=false"], "compiled": ["compile.enabled=true"],
         "reduce-overhead": ["compile.enabled=true", "compile.mode=reduce-overhead"],
         "compiled-autograd": ["compile.enabled=true"]}  # + the backward under compiled autograd (measured, not kept)


def use_compiled_autograd(method) -> None:
    """``method``'s ``backward`` hook (the one Lightning's loop and :func:`count_host_ops` call) run under PyTorch's
    compiled autograd (``torch._dynamo.compiled_autograd._enable``: the whole backward, ``AccumulateGrad`` included,
    traced at each ``backward()`` and compiled by inductor, ``dynamic=True``).  The ``compiled-autograd`` mode, not
    a run's setting: the #41 measurement of whether it takes the 199 ``AccumulateGrad`` detaches off the host
    (docs/benchmarks.md)."""
    import torch
    from torch._dynamo import compiled_autograd

    compiler, plain = torch.compile(dynamic=True), method.backward

    def backward(loss, *args, **kwargs):
        with compiled_autograd._enable(compiler):
            plain(loss, *args, **kwargs)

    method.backward = backward


def compose(args, method: str, mode: str, batch_size: int, cached: int | None):
    """The run's config for this case (as ``run.py`` composes it)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    import cselab.io.config  # noqa: F401  (resolvers)

    overrides = [f"method={method}", "backbone=bert_base", f"backbone.name_or_path={args.model}",
                 "backbone.family=bert", f"data.batch_size={batch_size}", f"data_dir={args.data_dir}",
                 "trainer.enable_progress_bar=false", *METHODS[method], *MODES[mode], *args.override]
    if args.device == "cpu":
        overrides.append("trainer.accelerator=cpu")
    if cached:
        overrides.append(f"trainer.cached_step.chunk_size={cached}")
    conf = Path(cselab.io.config.__file__).resolve().parents[3] / "conf"  # the conf/ of the cselab imported
    with initialize_config_dir(str(conf), version_base="1.3"):
        return hydra_compose("config", overrides=overrides)


class _Clock(L.Callback):
    """Lightning callback: the wall time from the start of step ``first`` to the end of training (the device
    synchronised at both ends); optionally the CUDA sync debug mode over steps ``[sync_from, sync_to)``."""

    def __init__(self, first: int, cuda: bool, sync_from: int | None = None, sync_to: int | None = None):
        self.first, self.cuda, self.sync_from, self.sync_to = first, cuda, sync_from, sync_to
        self.t0 = self.t1 = None
        self.ends: list[float] = []  # time.time() at the end of each of the first two steps

    def _sync(self):
        import torch

        if self.cuda:
            torch.cuda.synchronize()

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        import torch

        if batch_idx == self.first:
            self._sync()
            self.t0 = time.perf_counter()
        if self.cuda and self.sync_from is not None and batch_idx == self.sync_from:
            torch.cuda.set_sync_debug_mode("error")

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        import torch

        if len(self.ends) < 2:
            self._sync()
            self.ends.append(time.time())
        if self.cuda and self.sync_to is not None and batch_idx == self.sync_to - 1:
            torch.cuda.set_sync_debug_mode(0)
            self._sync()
            self.t1 = time.perf_counter()

    def on_train_end(self, trainer, pl_module):
        if self.t1 is None:
            self._sync()
            self.t1 = time.perf_counter()


def run_case(args) -> dict:
    """One (method, mode, cached) case at each batch size, in this process."""
    import torch
    import torch._dynamo
    from torch.utils.data import DataLoader

    from cselab.run import assemble
    from cselab.run.pieces import resolve_precision
    from cselab.run.spec import RunSpec

    try:
        from cselab.run.pieces import resolve_pad_to_multiple_of
    except ImportError:  # an older cselab (the "before" of a before / after comparison: PYTHONPATH=<old>/src)
        def resolve_pad_to_multiple_of(value, cuda):
            return None

    warnings.simplefilter("ignore")
    if args.threads:
        torch.set_num_threads(args.threads)
    cuda = args.device == "cuda"
    out = {"method": args.method, "mode": args.mode, "cached": args.cached, "device": args.device,
           "gpu": torch.cuda.get_device_name() if cuda else None, "torch": torch.__version__, "by_batch": []}
    for b in args.batch_sizes:
        cfg = compose(args, args.method, args.mode, b, args.cached)
        torch.manual_seed(0)
        t_build = time.perf_counter()
        method = assemble.build_run_method(RunSpec.from_config(cfg))
        if args.mode == "compiled-autograd":
            use_compiled_autograd(method)
        collate = method.train_collate(
            pad_to_multiple_of=resolve_pad_to_multiple_of(cfg.data.get("pad_to_multiple_of"), cuda))
        rows = [{"text": t} for t in load_sentences(args.data_dir, b)]
        batch = collate(rows)
        precision = resolve_precision("auto") if cuda and args.bf16 else ("bf16-mixed" if args.bf16 else "32-true")
        sync_from = sync_to = None
        # the FLOP counter's first step of a batch shape runs eagerly (cselab.methods.base.training_forward): a
        # compiled case compiles on its second step, so it gets one more warm-up step
        warmup = args.warmup + (1 if args.mode != "eager" else 0)
        steps = warmup + args.steps
        if args.sync_check:
            sync_from, sync_to = steps, steps + args.sync_check
            steps += args.sync_check
        clock = _Clock(warmup, cuda, sync_from, sync_to)
        from cselab.callbacks.flops import FlopCounter
        from cselab.callbacks.rng_state import RNGState
        from cselab.data.datamodule import batch_size as batch_size_fn

        try:
            from cselab.callbacks.throughput import LoggingStepThroughput
        except ImportError:  # an older cselab: Lightning's monitor, as its run used
            from lightning.pytorch.callbacks import ThroughputMonitor as LoggingStepThroughput

        trainer = L.Trainer(accelerator="cuda" if cuda else "cpu", devices=1, precision=precision, max_steps=steps,
                            logger=False, enable_checkpointing=False, enable_progress_bar=False,
                            enable_model_summary=False, limit_val_batches=0, num_sanity_val_steps=0,
                            gradient_clip_val=1.0, log_every_n_steps=max(steps + 1, 50),
                            callbacks=[FlopCounter(), LoggingStepThroughput(batch_size_fn, window_size=2), RNGState(),
                                       clock])
        loader = DataLoader([batch] * steps, batch_size=None, pin_memory=cuda)
        error = None
        try:
            trainer.fit(method, train_dataloaders=loader)
        except RuntimeError as err:  # the sync debug mode's error, or out of memory
            error = f"{type(err).__name__}: {str(err).splitlines()[0][:300]}"
            if cuda:
                torch.cuda.set_sync_debug_mode(0)
        timed = args.steps if clock.t1 is not None and sync_to is None else None
        row = {"batch_size": b, "width": int(batch["input_ids"].shape[-1]), "build_s": time.perf_counter() - t_build,
               "error": error}
        first = 0 if args.mode == "eager" else 1  # the FLOP counter's step runs eagerly (set_stance force_eager)
        if len(clock.ends) > first and args.t0:
            row["first_step_s"] = clock.ends[first] - args.t0
        if getattr(method, "compile_scope", None):
            from cselab.methods.compiled import compile_report

            row["compile"] = {"scope": method.compile_scope,
                              **compile_report(regions=2 if method.compile_scope == "layers" else 1)}
        if timed and clock.t0 is not None:
            row["step_ms"] = 1000 * (clock.t1 - clock.t0) / timed
        elif clock.t0 is not None and clock.t1 is not None and sync_to is not None:
            row["step_ms"] = 1000 * (clock.t1 - clock.t0) / (args.steps + args.sync_check)
            row["sync_check_steps"] = args.sync_check
        device_batch = {k: v.to(method.device) for k, v in batch.items()}
        autocast = torch.autocast(args.device, dtype=torch.bfloat16, enabled=args.bf16)
        optimizer = trainer.optimizers[0] if trainer.optimizers else torch.optim.AdamW(method.parameters())
        def loss_of(m=method, b=device_batch):
            if hasattr(m, "forward_loss"):
                return m.forward_loss(b)[0]
            return m.loss_fn(m.gather_embeddings(m.embed(b)))  # an older cselab

        with torch.compiler.set_stance("force_eager"):  # a dispatch mode would make dynamo skip the layers for good
            flops = count_step_flops(loss_of, autocast, optimizer)
        peak = available_flops(torch.device(args.device), torch.bfloat16 if args.bf16 else torch.float32)
        row["gflop_per_step"] = flops / 1e9
        if row.get("step_ms"):
            row["tflops_per_s"] = flops / (row["step_ms"] / 1000) / 1e12
            row["mfu"] = row["tflops_per_s"] * 1e12 / peak if peak else None
        if cuda:
            row["peak_mem_GB"] = torch.cuda.max_memory_allocated() / 1e9
            torch.cuda.reset_peak_memory_stats()
        if args.ops:
            row.update(count_host_ops(method, device_batch, autocast, optimizer))
        out["by_batch"].append(row)
        torch._dynamo.reset()
    return out


def count_host_ops(method, batch, autocast, optimizer) -> dict:
    """One step (forward through the method's training forward, compiled if it is, backward, the optimizer) under
    ``torch.profiler``: ``host_aten_ops`` (top-level ``aten::`` calls), ``inductor_kernels`` (the calls of the
    compiled graphs' own kernels in that step: on CPU the ``cpp_fused_*`` functions, recorded because the case
    process compiles with ``TORCHINDUCTOR_CPP_ENABLE_KERNEL_PROFILE=1``; on CUDA the kernel launches outside an
    ``aten::`` op, Triton's) and ``accumulate_grad_detaches`` (the ``aten::detach`` with which autograd's
    ``AccumulateGrad`` stores each parameter's new gradient: C++, no kernel; counted in ``host_aten_ops``).  The
    backward is the method's ``backward`` hook, as in Lightning's loop (:func:`use_compiled_autograd`)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    forward = method.training_forward() if hasattr(method, "training_forward") else (
        lambda b: (method.loss_fn(method.gather_embeddings(method.embed(b))),))  # an older cselab

    def step():
        optimizer.zero_grad(set_to_none=True)
        with autocast:
            loss = forward(batch)[0]
        method.backward(loss)
        optimizer.step()

    step()  # compiled: the graphs exist before the profiled step
    cuda = next(method.parameters()).is_cuda
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        step()
        if cuda:
            torch.cuda.synchronize()
    events = list(prof.events())
    top = [e for e in events if e.name.startswith("aten::") and not _has_aten_parent(e)]
    kernels = None
    if getattr(method, "compile_scope", None):
        kernels = sum(1 for e in events if ("cpp_fused" in e.name and not e.name.startswith("aten::")) or (
            "LaunchKernel" in e.name and not _has_aten_parent(e)))
    detaches = sum(1 for e in top if e.name == "aten::detach" and e.cpu_parent is not None
                   and "AccumulateGrad" in e.cpu_parent.name)
    return {"host_aten_ops": len(top), "inductor_kernels": kernels, "host_calls": len(top) + (kernels or 0),
            "accumulate_grad_detaches": detaches}


def _has_aten_parent(event) -> bool:
    parent = event.cpu_parent
    while parent is not None:
        if parent.name.startswith("aten::"):
            return True
        parent = parent.cpu_parent
    return False


def run_eval(args) -> dict:
    """The 7-task STS test evaluation (``STSEvaluator``) of SimCSE's ``encode`` on this model."""
    import torch

    from cselab.evaluation.sts import TEST_TASKS, STSEvaluator
    from cselab.run import assemble
    from cselab.run.spec import RunSpec

    warnings.simplefilter("ignore")
    cfg = compose(args, "simcse", "eager", 64, None)
    method = assemble.build_run_method(RunSpec.from_config(cfg)).to(args.device).eval()
    evaluator = STSEvaluator(args.data_dir)
    evaluator.load(TEST_TASKS, "test")
    if args.device == "cuda":
        torch.cuda.synchronize()
    t = time.perf_counter()
    evaluator.evaluate_detailed(method.encode, TEST_TASKS)
    if args.device == "cuda":
        torch.cuda.synchronize()
    eval_s = time.perf_counter() - t
    evaluator.load(["stsb"], "dev")
    method.encode(["warm up"])
    t = time.perf_counter()
    evaluator.evaluate_detailed(lambda s: method.encode(s, encoder="dev"), ["stsb"], split="dev")
    if args.device == "cuda":
        torch.cuda.synchronize()
    return {"method": "sts_eval", "mode": "7 test tasks", "eval_s": eval_s, "dev_s": time.perf_counter() - t}


def run_peer(args) -> dict:
    """sentence-transformers' MultipleNegativesRankingLoss step (bench_train_eval's peer case), per batch size."""
    rows = []
    for b in args.batch_sizes:
        cmd = [sys.executable, str(ROOT / "benchmarks" / "bench_train_eval.py"), "--_child", "peer_st_simcse_unsup",
               "--_model", args.model, "--device", args.device, "--batch-size", str(b), "--steps", str(args.steps),
               "--warmup", str(args.warmup), "--data-dir", str(args.data_dir), "--threads", str(args.threads)]
        if args.bf16:
            cmd.append("--bf16")
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        result = next((json.loads(line[7:]) for line in proc.stdout.splitlines() if line.startswith("RESULT ")), None)
        rows.append({"batch_size": b, "step_ms": 1000 * result["step_s"], "mfu": result.get("mfu")} if result else
                    {"batch_size": b, "error": proc.stderr.strip().splitlines()[-1][:300] if proc.stderr else "?"})
    return {"method": "peer_st_mnrl", "mode": "eager", "by_batch": rows}


def child(args, kind: str, **case) -> dict:
    cmd = [sys.executable, __file__, "--_child", kind, "--_model", args.model, "--device", args.device,
           "--steps", str(args.steps), "--warmup", str(args.warmup), "--data-dir", str(args.data_dir),
           "--threads", str(args.threads), "--sync-check", str(args.sync_check),
           "--batch-sizes", *[str(b) for b in case.get("batch_sizes", args.batch_sizes)], "--_t0", str(time.time())]
    if case.get("cache_dir"):
        cmd += ["--override", f"compile.cache_dir={case['cache_dir']}"]
    for key in ("method", "mode", "cached", "start"):
        if case.get(key) is not None:
            cmd += [f"--_{key}", str(case[key])]
    if args.bf16:
        cmd.append("--bf16")
    if args.ops:
        cmd.append("--ops")
    for item in args.override:
        cmd += ["--override", item]
    env = {**os.environ, **({"TORCHINDUCTOR_CPP_ENABLE_KERNEL_PROFILE": "1"} if args.ops else {})}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env)
    _RUNNING[:] = [proc]
    try:
        stdout, stderr = proc.communicate(timeout=args.case_timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return {**{k: v for k, v in case.items() if k != "cache_dir"}, "error": f"timed out after {args.case_timeout} s"}
    finally:
        _RUNNING.clear()
    for line in stdout.splitlines():
        if line.startswith("RESULT "):
            return {**json.loads(line[len("RESULT "):]), **({"start": case["start"]} if case.get("start") else {})}
    return {**{k: v for k, v in case.items() if k != "cache_dir"},
            "error": (stderr or "?").strip().splitlines()[-1][:400]}


#: the case process in flight, killed with this one (a `timeout` around the script stops the whole case)
_RUNNING: list[subprocess.Popen] = []


def _stop(signum, frame) -> None:
    for proc in _RUNNING:
        proc.kill()
    raise SystemExit(128 + signum)


def print_table(results: list[dict]) -> None:
    print(f"\n{'method':<12}{'mode':<17}{'start':>6}{'cached':>7}{'batch':>7}{'width':>7}{'step ms':>10}{'MFU':>7}"
          f"{'GFLOP':>9}{'peak GB':>9}{'host ops':>10}{'kernels':>9}{'1st s':>8}{'comp s':>8}{'graphs':>7}  error")
    for r in results:
        for row in r.get("by_batch", [{}]) or [{}]:
            mfu = f"{100 * row['mfu']:.1f}%" if row.get("mfu") else "-"
            step = f"{row['step_ms']:.1f}" if row.get("step_ms") else "-"
            comp = row.get("compile") or {}
            first = f"{row['first_step_s']:.1f}" if row.get("first_step_s") else "-"
            print(f"{r.get('method', '?'):<12}{r.get('mode', '?'):<17}{r.get('start', '-'):>6}"
                  f"{str(r.get('cached') or '-'):>7}"
                  f"{row.get('batch_size', '-'):>7}{row.get('width', '-'):>7}{step:>10}{mfu:>7}"
                  f"{row.get('gflop_per_step', 0):>9.0f}{row.get('peak_mem_GB', 0):>9.1f}"
                  f"{str(row.get('host_aten_ops', '-')):>10}{str(row.get('inductor_kernels', '-')):>9}"
                  f"{first:>8}{comp.get('compile_s', '-'):>8}{comp.get('graphs', '-'):>7}"
                  f"  {row.get('error') or r.get('error') or ''}")
        if "eval_s" in r:
            print(f"sts_eval: the 7 test tasks {r['eval_s']:.1f} s, STS-B dev {r.get('dev_s', float('nan')):.1f} s")


def paper_runs(results: list[dict]) -> list[dict]:
    """The unsup paper runs of :data:`PAPER_RUNS` extrapolated from ``results``: for each method and mode measured
    at its paper batch, steps x ``step_ms`` + evaluations x the STS-B dev time (``--eval``; 0 when not measured)
    + the compile seconds (the case's cold ``compile_s``; 0 eager).  Printed and returned (``minutes``)."""
    dev_s = next((r["dev_s"] for r in results if "dev_s" in r), None)
    out = []
    for r in results:
        if r.get("method") not in PAPER_RUNS or r.get("cached") or r.get("start") == "warm":
            continue
        batch, steps, evals = PAPER_RUNS[r["method"]]
        row = next((x for x in r.get("by_batch", []) if x.get("batch_size") == batch and x.get("step_ms")), None)
        if row is None:
            print(f"paper run {r['method']} unsup, {r['mode']}: no step measured at its batch of {batch}")
            continue
        compile_s = (row.get("compile") or {}).get("compile_s", 0.0)
        total = steps * row["step_ms"] / 1000 + evals * (dev_s or 0.0) + compile_s
        out.append({"method": r["method"], "mode": r["mode"], "batch": batch, "steps": steps, "evaluations": evals,
                    "step_ms": row["step_ms"], "dev_s": dev_s, "compile_s": compile_s, "minutes": total / 60})
        dev = f"{dev_s:.1f} s" if dev_s is not None else "(not measured: --eval)"
        print(f"paper run {r['method']} unsup, {r['mode']}: {steps:,} steps x {row['step_ms']:.1f} ms + {evals} x "
              f"STS-B dev {dev} + compile "
              f"{compile_s:.0f} s = {total / 60:.1f} min")
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--device", default="cpu", help="cpu | cuda")
    p.add_argument("--bf16", action="store_true", help="bf16-mixed precision (the GPU default)")
    p.add_argument("--layers", type=int, default=12, help="encoder layers of the bert-base-shaped model")
    p.add_argument("--methods", nargs="*", default=list(METHODS), help=f"of {list(METHODS)}")
    p.add_argument("--modes", nargs="*", default=["eager", "compiled"], help=f"of {list(MODES)}")
    p.add_argument("--batch-sizes", nargs="*", type=int, default=[64], help="sentences per step")
    p.add_argument("--cached", nargs="*", type=int, default=[], help="also the cached step at these chunk sizes")
    p.add_argument("--steps", type=int, default=10, help="timed steps")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps before (compilation happens there)")
    p.add_argument("--sync-check", type=int, default=0, help="N more steps under the CUDA sync debug mode")
    p.add_argument("--ops", action="store_true", help="count the host ops of one step (torch.profiler)")
    p.add_argument("--eval", action="store_true", help="time the 7-task STS test and the STS-B dev evaluation")
    p.add_argument("--warm", action="store_true", help="compiled cases twice: cold, then warm from the same cache")
    p.add_argument("--paper-runs", action="store_true", help="print the paper runs extrapolated (PAPER_RUNS)")
    p.add_argument("--peer", action="store_true", help="sentence-transformers' MNRL step on the same model")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--override", action="append", default=[], help="a Hydra override for every case")
    p.add_argument("--case-timeout", type=int, default=900, help="seconds per case process")
    p.add_argument("--vocab", type=Path, default=None, help="a bert-base-uncased vocab.txt (default: MiniLM's)")
    p.add_argument("--data-dir", type=Path, default=Path(os.environ.get("CSELAB_DATA_DIR", ROOT / "data")))
    p.add_argument("--json", type=Path, default=None, help="also write the results here")
    for hidden in ("--_child", "--_model", "--_method", "--_mode", "--_cached", "--_start"):
        p.add_argument(hidden, default=None, help=argparse.SUPPRESS)
    p.add_argument("--_t0", type=float, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.data_dir = args.data_dir.resolve()
    if args._child:
        args.model, args.method, args.mode = args._model, args._method, args._mode
        args.cached = int(args._cached) if args._cached else None
        args.t0 = args._t0
        res = {"case": run_case, "eval": run_eval, "peer": run_peer}[args._child](args)
        print("RESULT " + json.dumps(res), flush=True)
        return
    import signal

    signal.signal(signal.SIGTERM, _stop)
    results = []
    with tempfile.TemporaryDirectory(prefix="bench_step_") as tmp:
        args.model = str(build_random_bert_base(Path(tmp) / "bert", args.layers, args.vocab))
        print(f"model: random BERT, bert-base shape, {args.layers} layers, bert-base-uncased vocabulary | device "
              f"{args.device} | bf16 {args.bf16} | batches {args.batch_sizes} | {args.warmup} warm-up + {args.steps}"
              f" timed steps", flush=True)
        def done(result: dict) -> None:  # printed and written at once: a timeout loses only the case in flight
            results.append(result)
            print(json.dumps(result), flush=True)
            if args.json:
                args.json.write_text(json.dumps(results, indent=1))

        for method in args.methods:
            for mode in args.modes:
                if mode == "eager":
                    done(child(args, "case", method=method, mode=mode))
                    continue
                cache = str(Path(tmp) / f"compile_cache_{method}_{mode}")  # cold: a fresh cache per case
                for start in ("cold", "warm") if args.warm else ("cold",):
                    done(child(args, "case", method=method, mode=mode, start=start, cache_dir=cache))
            for chunk in args.cached:
                done(child(args, "case", method=method, mode=args.modes[-1], cached=chunk,
                           cache_dir=str(Path(tmp) / f"compile_cache_{method}_cached")))
        if args.eval:
            done(child(args, "eval", batch_sizes=[64]))
        if args.peer:
            done(child(args, "peer"))
    print_table(results)
    if args.paper_runs:
        runs = paper_runs(results)
        if args.json:
            args.json.write_text(json.dumps(results + [{"paper_runs": runs}], indent=1))


if __name__ == "__main__":
    main()
