"""The FLOP accounting of ``benchmarks/bench_train_eval.py`` (counts only; no timing is asserted)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_train_eval", ROOT / "benchmarks" / "bench_train_eval.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("kind,kwargs", [("simcse", {"pooler": "cls"}),
                                         ("promptbert", {"pooler": "mask", "prompt": "promptbert"})])
def test_per_width_flops_scaled_by_batch_equal_a_direct_count(bench, make_method, kind, kwargs):
    method = make_method(kind, "bert", **kwargs).eval()
    collate = method.eval_collate
    sentences = ["a man is playing a guitar .", "the cat sat on the mat", "hello", "two dogs run in a field together"]
    batches = [collate.tokenize(sentences[:3]), collate.tokenize(sentences[3:]), collate.tokenize(sentences)]
    flops_of = bench.EncodeFlops(method, collate)
    total, positions = flops_of.total(batches)

    direct, direct_positions = 0, 0
    for tokens in batches:
        batch = collate.build({collate.views[0].field: tokens})
        direct_positions += batch["input_ids"].shape[0] * batch["input_ids"].shape[-1]
        with torch.inference_mode(), FlopCounterMode(display=False) as counter:
            method.embed(batch)
        direct += counter.get_total_flops()
    assert positions == direct_positions
    assert total == direct > 0


def test_gemm_rate_is_a_positive_rate(bench):
    rate = bench.gemm_rate(32, torch.device("cpu"), torch.float32, rows=64, repeats=2)
    assert rate > 0
