"""What the intervals cost: the 7 STS tasks' bootstrap intervals, and their share of the test phase (a script,
not a test).

    python benchmarks/bench_intervals.py                       # MiniLM (avg pooling) test phase, then intervals
    python benchmarks/bench_intervals.py --run RUN_DIR         # a finished run's test_pairs.npz, no test phase

Measured:

* ``intervals``: :func:`cselab.evaluation.results.score_intervals` on the 7 test tasks' real pairs (26k sentences,
  18,850 pairs), 1,000 resamples, percentile -- what the test phase adds to a run (``eval.bootstrap``); the
  median of ``--repeats`` calls, and the same with ``scipy.stats.rankdata`` ranking instead of the counting
  ranks, for reference;
* ``npz``: writing ``test_pairs.npz`` (median of ``--repeats``);
* ``test phase``: ``STSCallback.evaluate_encoder`` on the embedded MiniLM (``method=baseline
  method.pooler=avg backbone=minilm_l6``, as ``run.py`` builds it): the 7 test tasks and STS-B dev, encoding
  included, without the intervals; the overhead is (intervals + npz) / test phase.  Timing the test phase
  twice, with and without intervals, would measure the load of a shared CPU more than a 0.5 s difference;
* ``compare``: :func:`cselab.evaluation.stats.paired_comparison` of the run with a noisy copy of itself
  (1,000 resamples and permutations; ``cselab compare``'s cost, not part of a run).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def test_phase(data_dir: str) -> tuple[float, dict, dict]:
    """Time the test phase of ``method=baseline method.pooler=avg backbone=minilm_l6`` (no intervals)."""
    from hydra import compose, initialize_config_dir

    import cselab.io.config  # noqa: F401  (resolvers)
    from cselab.evaluation.callback import STSCallback
    from cselab.run import assemble
    from cselab.run.spec import module_node

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=["method=baseline", "method.pooler=avg", "backbone=minilm_l6",
                                           f"data_dir={data_dir}"])
    method = assemble.build_method(module_node(cfg))
    sts = STSCallback(data_dir=cfg.data_dir, test_tasks=list(cfg.eval.test_tasks), dev_task=cfg.eval.dev_task,
                      aggregation=cfg.eval.aggregation, batch_size=cfg.eval.batch_size, progress_every_s=1e9)
    start = time.perf_counter()
    sts.evaluate_encoder(method)
    return time.perf_counter() - start, sts.test_pairs, sts.test_subsets


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", type=Path, default=None, help="a run directory with test_pairs.npz (no test phase)")
    p.add_argument("--data-dir", default=os.environ.get("CSELAB_DATA_DIR", str(ROOT / "data")))
    p.add_argument("--n-resamples", type=int, default=1000)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args(argv)

    import torch
    from scipy import stats as sps

    from cselab.evaluation import stats
    from cselab.evaluation.pair_scores import compact, read_pair_scores, write_pair_scores
    from cselab.evaluation.results import score_intervals

    print(f"torch threads {torch.get_num_threads()}, load average {os.getloadavg()[0]:.2f} (2 cores, shared)")
    phase = None
    if args.run is not None:
        raw, _ = read_pair_scores(args.run / "test_pairs.npz")
        pairs = {t: (d["system"].tolist(), d["gold"].tolist()) for t, d in raw.items()}
        subsets = {t: dict(zip([str(n) for n in d["subset_names"]], [int(s) for s in d["subsets"]], strict=True))
                   for t, d in raw.items()}
    else:
        phase, pairs, subsets = test_phase(args.data_dir)
    n_pairs = sum(len(s) for s, _ in pairs.values())
    print(f"{len(pairs)} tasks, {n_pairs:,} pairs, {args.n_resamples} resamples")

    out = {}
    seconds = median_time(lambda: out.update(score_intervals(pairs, subsets, n_resamples=args.n_resamples)),
                          args.repeats)
    print(f"intervals (counting ranks)    {seconds:7.2f} s   median of {args.repeats}   goal < 10 s")
    for task, (low, high) in out["test_ci"].items():
        print(f"  {task:6s} [{low:6.2f}, {high:6.2f}]")

    # the same bootstrap with scipy's rankdata along the resample axis (reference for the counting ranks)
    tasks = {t: stats.TaskPairs(compact(s), compact(g)) for t, (s, g) in pairs.items()}

    def rankdata_version():
        sizes = [len(tp.system) for tp in tasks.values()]

        def statistic(*idx, axis=-1):
            vals = []
            for tp, i in zip(tasks.values(), idx, strict=True):
                rx = sps.rankdata(tp.system[i], axis=-1)
                ry = sps.rankdata(tp.gold[i], axis=-1)
                vals.append(stats._pearson_centered(rx, ry, (i.shape[-1] + 1) / 2))
            v = np.stack(vals)
            return 100 * np.concatenate([v, v.mean(0, keepdims=True)])

        return stats._bootstrap(statistic, sizes, args.n_resamples, 0, 0.95, "percentile", 250)

    reference = median_time(rankdata_version, 1)
    low, _ = rankdata_version()
    same = np.allclose(low, [out["test_ci"][t][0] for t in out["test_ci"]], atol=1e-3)
    print(f"intervals (scipy rankdata)    {reference:7.2f} s   (same intervals: {same})")

    with tempfile.TemporaryDirectory() as tmp:
        npz = median_time(lambda: write_pair_scores(Path(tmp) / "test_pairs.npz", pairs, subsets), args.repeats)
        size = (Path(tmp) / "test_pairs.npz").stat().st_size
    print(f"test_pairs.npz write          {npz:7.2f} s   {size / 1024:.0f} KB")

    if phase is not None:
        share = 100 * (seconds + npz) / phase
        print(f"test phase (7 tasks + dev)    {phase:7.2f} s   without intervals")
        print(f"overhead of the intervals     {share:7.2f} %   goal <= 5 %")

    rng = np.random.default_rng(0)
    noisy = {t: stats.TaskPairs(tp.system + rng.normal(0, 0.02, tp.system.size), tp.gold) for t, tp in tasks.items()}
    start = time.perf_counter()
    cmp = stats.paired_comparison(tasks, noisy, n_resamples=args.n_resamples)
    print(f"paired comparison (compare)   {time.perf_counter() - start:7.2f} s   avg diff "
          f"{cmp.tasks['avg'].diff:+.2f} [{cmp.tasks['avg'].interval.low:+.2f}, {cmp.tasks['avg'].interval.high:+.2f}]")
    print(f"load average after            {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
