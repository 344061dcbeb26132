"""Decoder LLMs: embeddings per second at evaluation and the LoRA training step's time and memory (a script, not
a test).

    python benchmarks/bench_decoder.py --size 125m                          # CPU, float32
    python benchmarks/bench_decoder.py --size 1.3b --device cuda --bf16     # a GPU: bf16 weights, bf16 autocast

The model is a RANDOM OPT of the named size (``OPTConfig``: 125m = 12 x 768, 350m = 24 x 1024 (512 out),
1.3b = 24 x 2048; 50,272-token vocabulary) with the tiny byte-level BPE of :mod:`cselab.cli.tiny_decoders` (trained
on the wiki sample; its ids are a subset of the model's vocabulary), built the way ``run.py`` builds
``method=prompteol`` (:class:`cselab.methods.prompteol.method.PromptEOL`, the PromptEOL template, ``last_token``).

* Evaluation: ``encode`` of ``--n`` real wiki sentences (length-sorted batches of ``--eval-batch-size``, the one
  encode loop of cselab), after one warm-up batch: sentences per second.
* Training: one optimizer step (forward of 3B prompts, InfoNCE with hard negatives, backward, AdamW on the
  LoRA weights) on ``--batch`` triplets of wiki sentences, LoRA r=64 on every Linear, optionally with
  activation checkpointing; 1 warm-up + ``--steps`` timed.  Memory: on CUDA ``torch.cuda.max_memory_allocated``
  over the timed steps minus the allocation before them (activations, gradients, optimizer state); on CPU not
  measured (``-``).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
SIZES = {  # OPT configs (hidden, layers, heads, ffn, word_embed_proj_dim)
    "125m": (768, 12, 12, 3072, 768),
    "350m": (1024, 24, 16, 4096, 512),
    "1.3b": (2048, 24, 32, 8192, 2048),
}


def build(size: str, folder: Path) -> Path:
    from transformers import AutoTokenizer, OPTConfig, OPTModel

    from cselab.cli.tiny_decoders import build_tiny_decoder, read_corpus

    build_tiny_decoder("opt", folder, read_corpus(ROOT / "tests" / "data" / "wiki1m_head300.txt", limit=None))
    hidden, layers, heads, ffn, proj = SIZES[size]
    config = OPTConfig(vocab_size=50272, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                       ffn_dim=ffn, word_embed_proj_dim=proj, max_position_embeddings=2048, pad_token_id=1,
                       bos_token_id=2, eos_token_id=2)
    torch.manual_seed(0)
    OPTModel(config).save_pretrained(folder)
    AutoTokenizer.from_pretrained(folder)  # the tiny BPE stays
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="125m")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--bf16", action="store_true", help="bf16 weights (dtype) and bf16 autocast")
    parser.add_argument("--n", type=int, default=512, help="sentences to encode")
    parser.add_argument("--eval-batch-size", type=int, default=64)
    parser.add_argument("--batch", type=int, default=16, help="NLI-like triplets per training step")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--checkpointing", action="store_true", help="activation checkpointing in training")
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    import yaml

    from cselab.methods.prompteol.method import PromptEOL

    folder = build(args.size, Path(tempfile.mkdtemp()) / f"opt_{args.size}")
    lines = [s for s in (ROOT / "tests" / "data" / "wiki1m_head300.txt").read_text().splitlines() if s.strip()]
    sentences = (lines * (args.n // len(lines) + 1))[: args.n]
    prompt = yaml.safe_load((ROOT / "conf" / "prompt" / "prompteol.yaml").read_text())
    dtype = "bfloat16" if args.bf16 else "float32"
    model = {"pooler": "last_token", "head": "none", "prompt": prompt,
             "tuning": {"name": "lora", "r": 64, "alpha": 16, "dropout": 0.05, "target_modules": "all-linear"},
             "eval_precision": "bf16" if args.bf16 else "32"}
    method = PromptEOL(backbone={"name_or_path": str(folder), "family": "decoder", "dtype": dtype}, setting="sup",
                       model=model, loss={"name": "infonce", "temperature": 0.05}).to(args.device)
    cuda = args.device.startswith("cuda")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    params = sum(p.numel() for p in method.parameters())
    print(f"random OPT-{args.size}: {params / 1e6:.1f}M parameters, {dtype}, device {args.device}, "
          f"torch threads {torch.get_num_threads()}")

    method.encode(sentences[: args.eval_batch_size], batch_size=args.eval_batch_size)  # warm-up
    sync()
    start = time.perf_counter()
    method.encode(sentences, batch_size=args.eval_batch_size)
    sync()
    took = time.perf_counter() - start
    print(f"encode: {len(sentences)} sentences in {took:.2f} s = {len(sentences) / took:.1f} sentences/s "
          f"(batch {args.eval_batch_size})")

    if args.checkpointing:
        method.encoder.enable_activation_checkpointing()
    method.train()
    optimizer = torch.optim.AdamW([p for p in method.parameters() if p.requires_grad], lr=5e-4)
    triplets = [{"sent0": sentences[i], "sent1": sentences[i + 1], "hard_neg": sentences[i + 2]}
                for i in range(args.batch)]
    batch = {k: v.to(args.device) for k, v in method.train_collate()(triplets).items()}
    autocast = torch.autocast(torch.device(args.device).type, dtype=torch.bfloat16, enabled=args.bf16)
    times, base = [], 0
    for step in range(args.steps + 1):
        if step == 1 and cuda:
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
        sync()
        start = time.perf_counter()
        with autocast:
            loss = method.loss_fn(method.embed(batch))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        sync()
        if step:
            times.append(time.perf_counter() - start)
    peak = f"{(torch.cuda.max_memory_allocated() - base) / 2**20:.0f} MiB" if cuda else "-"
    trainable = sum(p.numel() for p in method.parameters() if p.requires_grad)
    print(f"LoRA step: batch {args.batch} triplets ({3 * args.batch} prompts, width {batch['input_ids'].shape[-1]}), "
          f"{trainable / 1e6:.2f}M trainable, checkpointing {args.checkpointing}: median "
          f"{statistics.median(times):.3f} s over {len(times)} steps, peak memory above the weights {peak}, "
          f"loss {loss.item():.3f}")


if __name__ == "__main__":
    main()
