"""The classifier stage of SentEval's transfer tasks: cselab's batched grid vs SentEval's own classifier, on the
same precomputed embeddings.

    # once: encode the seven tasks with a model and keep the embeddings (SentEval's row order)
    python benchmarks/bench_transfer.py --cache /tmp/minilm_avg.pt --model minilm_l6 --pooler avg --which none
    # cselab's classifiers / SentEval's classifiers on them (a checkout of facebookresearch/SentEval @ 5d6dc117)
    python benchmarks/bench_transfer.py --cache /tmp/minilm_avg.pt --which cselab --mode test
    python benchmarks/bench_transfer.py --cache /tmp/minilm_avg.pt --which senteval --senteval /tmp/SentEval --mode test
    farm-bench --vs ...                                                 # the two side by side (docs/benchmarks.md)

SentEval's code is imported from ``--senteval`` (not shipped with cselab).  It runs on the CPU here with three
shims that change no arithmetic: ``.cuda()`` is the identity, every classifier keeps its tensors on the CPU
(``cudaEfficient``), and ``inspect.getargspec`` (removed in Python 3.11) is ``getfullargspec``.  ``--seed``
changes SentEval's seed (its run-to-run spread); cselab's protocol takes the same seed.

Prints one line per task: accuracy (dev / test; MRPC also F1), the chosen L2 values and the seconds of the
classifier stage, then the total.
"""

from __future__ import annotations

import argparse
import inspect
import sys
import time
from pathlib import Path

import numpy as np
import torch

from cselab.data.transfer import PAPER_NAMES, TRANSFER_TASKS, load_transfer_task
from cselab.evaluation.transfer import PROTOCOLS, TransferEvaluator, _features, run_classifier


def build_cache(path: Path, model_name: str, pooler: str, data_dir: str | None) -> None:
    """Encode every sentence of the seven tasks once and save ``{sentence: row}`` + the embeddings."""
    import cselab

    model = cselab.load(model_name, pooler=pooler)  # any model target (cselab.io.targets)
    evaluator = TransferEvaluator(data_dir, TRANSFER_TASKS, "fasttest")
    tasks = {t: load_transfer_task(data_dir, t) for t in TRANSFER_TASKS}
    start = time.perf_counter()
    sentences, embeddings = evaluator.encode_distinct(tasks, model.encode)
    torch.save({"sentences": sentences, "embeddings": embeddings, "model": model_name, "pooler": pooler}, path)
    print(f"encoded {len(sentences):,} distinct sentences in {time.perf_counter() - start:.1f} s -> {path}")


def senteval_classifier(task, features: dict[str, np.ndarray], mode: str, seed: int, senteval: Path) -> dict:
    """The same task scored by SentEval's own ``tools/validation.py`` (as its ``<task>.run`` calls it)."""
    inspect.getargspec = lambda f: inspect.getfullargspec(f)  # removed in Python 3.11; utils.get_optimizer uses it
    torch.nn.Module.cuda = lambda self, *a, **k: self
    torch.Tensor.cuda = lambda self, *a, **k: self
    sys.path.insert(0, str(senteval))
    from senteval.tools import classifier as se_classifier
    from senteval.tools.validation import InnerKFoldClassifier, KFoldClassifier, SplitClassifier

    if not getattr(se_classifier.PyTorchClassifier, "_cpu_shim", False):
        init = se_classifier.PyTorchClassifier.__init__

        def cpu_init(self, *args, **kwargs):
            init(self, *args, **kwargs)
            self.cudaEfficient = True  # tensors stay on the CPU (prepare_split's device)

        se_classifier.PyTorchClassifier.__init__ = cpu_init
        se_classifier.PyTorchClassifier._cpu_shim = True
    proto = PROTOCOLS[mode]
    c = proto.classifier
    params = {"nhid": 0, "optim": c.optim, "batch_size": c.batch_size, "tenacity": c.tenacity,
              "epoch_size": c.epoch_size}
    config = {"nclasses": task.nclasses, "seed": seed, "usepytorch": True, "classifier": params, "nhid": 0,
              "kfold": proto.kfold}
    y = {k: s.labels for k, s in task.splits.items()}
    if task.classifier == "inner_kfold":
        dev, acc = InnerKFoldClassifier(features["all"], y["all"], config).run()
        return {"devacc": dev, "acc": acc}
    if task.classifier == "kfold":
        dev, acc, yhat = KFoldClassifier({"X": features["train"], "y": y["train"]},
                                         {"X": features["test"], "y": y["test"]}, config).run()
        out = {"devacc": dev, "acc": acc}
        if task.name == "mrpc":
            from sklearn.metrics import f1_score

            out["f1"] = round(100 * f1_score(y["test"], yhat), 2)
        return out
    dev, acc = SplitClassifier({"train": features["train"], "valid": features["valid"], "test": features["test"]},
                               {"train": y["train"], "valid": y["valid"], "test": y["test"]}, config).run()
    return {"devacc": dev, "acc": acc}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cache", type=Path, required=True, help="embeddings file (written with --model)")
    p.add_argument("--model", default=None, help="encode into --cache first: backbone name / hub id / folder")
    p.add_argument("--pooler", default="avg")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--which", choices=["cselab", "senteval", "none"], default="cselab")
    p.add_argument("--senteval", type=Path, default=None, help="a checkout of facebookresearch/SentEval")
    p.add_argument("--mode", choices=sorted(PROTOCOLS), default="test")
    p.add_argument("--tasks", nargs="+", default=list(TRANSFER_TASKS))
    p.add_argument("--seed", type=int, default=1111, help="SentEval's seed (classifier init and batches)")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads for both classifiers (default 1, "
                   "cselab's own default for the grid; the same for SentEval so the two are timed alike)")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    if args.model:
        build_cache(args.cache, args.model, args.pooler, args.data_dir)
    if args.which == "none":
        return 0
    cache = torch.load(args.cache)
    index = {s: i for i, s in enumerate(cache["sentences"])}
    table = cache["embeddings"].float()

    def embed(sentences: list[str]) -> torch.Tensor:
        return table[torch.tensor([index[s] for s in sentences], dtype=torch.long)]

    total = 0.0
    print(f"{args.which} classifiers, mode {args.mode}, seed {args.seed}, {cache['model']} ({cache['pooler']})")
    for name in args.tasks:
        task = load_transfer_task(args.data_dir, name)
        features = _features(task, embed)
        start = time.perf_counter()
        if args.which == "cselab":
            proto = PROTOCOLS[args.mode]
            if args.seed != 1111:
                from dataclasses import replace

                proto = replace(proto, seed=args.seed, classifier=replace(proto.classifier, seed=args.seed))
            out = run_classifier(task, features, proto, threads=args.threads)
        else:
            if args.senteval is None:
                p.error("--which senteval needs --senteval PATH")
            out = senteval_classifier(task, {k: v.numpy() for k, v in features.items()}, args.mode, args.seed,
                                      args.senteval)
        seconds = time.perf_counter() - start
        total += seconds
        f1 = f"  f1 {out['f1']:.2f}" if "f1" in out else ""
        l2 = f"  l2 {out['l2']}" if "l2" in out else ""
        print(f"{PAPER_NAMES[name]:>6}: dev {out['devacc']:.2f}  test {out['acc']:.2f}{f1}{l2}  {seconds:.1f} s",
              flush=True)
    print(f"classifier stage total: {total:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
