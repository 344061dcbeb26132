"""Wall time of one ESimCSE training step against SimCSE's, on the embedded MiniLM (a script, not a test).

    python benchmarks/bench_esimcse_step.py --batch-size 64 --steps 5

Both methods are built as ``run.py`` builds them (Hydra compose + ``cselab.run.assemble.build_method``, ``backbone=minilm_l6``,
eager), on the same B sentences of the embedded wiki1m sample, collated by each method's own training collate
(ESimCSE: the repetition drawn with the run's seed).  A step is ``training_step`` + backward + AdamW's step; after one
warm-up step each, the methods' steps alternate (so that a busy machine slows both alike) and the median is printed.
ESimCSE's step adds the momentum update (one pass over the parameters), a no-graph eval-mode forward of B sentences
through the momentum copy, and Q more columns in the loss.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir

import cselab.io.config  # noqa: F401  (resolvers)
from cselab.methods.esimcse.repetition import PLAN_KEY, repetition_plan
from cselab.run import assemble
from cselab.run.spec import module_node

ROOT = Path(__file__).resolve().parents[1]
WIKI = ROOT / "tests" / "data" / "wiki1m_head300.txt"


def build(method: str):
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=[f"method={method}", "backbone=minilm_l6", "compile.enabled=false"])
    torch.manual_seed(0)
    module = assemble.build_method(module_node(cfg))
    module.log = lambda *a, **k: None  # no trainer: the step's logging is a no-op here
    return module


def step_fn(module, batch):
    optimizer = torch.optim.AdamW([p for p in module.parameters() if p.requires_grad], lr=3e-5)

    def step() -> float:
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss = module.training_step(batch, 0)
        loss.backward()
        optimizer.step()
        return time.perf_counter() - start

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    texts = [t for t in WIKI.read_text(encoding="utf-8").splitlines() if t.strip()][: args.batch_size]
    steps = {}
    for name in ("simcse", "esimcse"):
        module = build(name)
        module.train()
        collate = module.train_collate()
        if name == "esimcse":
            plan = repetition_plan(texts, collate.dup_rate, 42, collate.dup_type, lengths=collate.wrapped_lengths)
            rows = [{"text": t, PLAN_KEY: p} for t, p in zip(texts, plan, strict=True)]
            module.on_train_epoch_start()
        else:
            rows = [{"text": t} for t in texts]
        steps[name] = step_fn(module, collate(rows))
        steps[name]()  # warm-up (ESimCSE: fills the queue with B rows)
    times = {name: [] for name in steps}
    for _ in range(args.steps):
        for name, step in steps.items():
            times[name].append(step())
    med = {name: statistics.median(t) for name, t in times.items()}
    for name, t in times.items():
        print(f"{name:8s} median {med[name]:.3f} s/step  (steps: {', '.join(f'{x:.3f}' for x in t)})")
    print(f"esimcse / simcse = {med['esimcse'] / med['simcse']:.2f}  (B={args.batch_size}, "
          f"{torch.get_num_threads()} threads)")


if __name__ == "__main__":
    main()
