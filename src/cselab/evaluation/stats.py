"""How sure a score is: bootstrap intervals of Spearman, paired comparisons of two runs, seed statistics.

Every number here is in the evaluator's unit, Spearman x 100 (accuracies x 100 for
:func:`binomial_interval`).  Three kinds of uncertainty, which do not replace one another:

* **test pairs** (:func:`bootstrap_scores`): a 95 % bootstrap interval of one run's task scores, resampling the
  sentence pairs of the test set.  It says how much the score would move on another test set drawn like this
  one, for THIS trained model.  It does not cover seed (training) variance.
* **paired comparison** (:func:`paired_comparison`): two runs scored on the same pairs; the difference of each
  task's Spearman with a paired bootstrap interval and a paired permutation test's p-value.
* **seeds** (:func:`seed_statistics`): mean, sample std and a t-based 95 % interval of the mean over runs that
  differ only in seed.  It covers training variance on THIS test set, not test-set sampling.

A task's score is a weighted sum of Spearman correlations over *segments* of pairs (:class:`TaskPairs`): the
papers' STS12-16 ``all`` is one Spearman over the concatenated subsets (one segment); ``mean`` / ``wmean`` are
the (weighted) mean of per-subset Spearman (one segment per subset, resampled within each subset).

The vectorised Spearman (:func:`spearman_rows`) ranks each resample by counting (``numpy.bincount`` of the
values' dense codes), which gives exactly the average ranks of ``scipy.stats.rankdata`` (ties averaged, as
``scipy.stats.spearmanr``) at a fraction of a sort's cost: 7 tasks x 1,000 resamples take under a second on one
core (``benchmarks/bench_intervals.py``).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

# scipy.stats (about 1.2 s to import) is imported where it is used: the run's config specs import this module's
# options, and a refused command answers before anything heavy loads

#: the bootstrap interval methods offered (``scipy.stats.bootstrap``'s ``method``).  BCa is not offered: its
#: jackknife costs one Spearman per pair (~20 s for the 7 tasks here, far beyond 5 % of the test phase).
METHODS: tuple[str, ...] = ("percentile", "basic")


@dataclass(frozen=True)
class BootstrapOptions:
    """How the test scores' intervals are resampled (``eval.bootstrap``, ``cselab compare``): the one place their
    defaults are written and their one check.

    Attributes:
        n_resamples: bootstrap resamples (and random permutations of a paired comparison); 0: no intervals, else
            >= 100.
        seed: the resampling seed (same pairs, same seed: same interval).
        level: the confidence level, in (0, 1).
        method: one of :data:`METHODS` (``scipy.stats.bootstrap``'s ``method``).

    Raises:
        ValueError: names the key (``eval.bootstrap.<key>``), the value and what was expected.
    """

    n_resamples: int = 1000
    seed: int = 0
    level: float = 0.95
    method: str = "percentile"

    def __post_init__(self) -> None:
        n, seed, level = self.n_resamples, self.seed, self.level
        if isinstance(n, bool) or not isinstance(n, int) or (n != 0 and n < 100):
            raise ValueError(f"eval.bootstrap.n_resamples={n!r}: expected 0 (no intervals) or an int >= 100 "
                             f"({BootstrapOptions.n_resamples} is the default)")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"eval.bootstrap.seed={seed!r}: expected an int")
        if isinstance(level, bool) or not isinstance(level, int | float) or not 0 < level < 1:
            raise ValueError(f"eval.bootstrap.level={level!r}: expected a confidence level in (0, 1), e.g. 0.95")
        if self.method not in METHODS:
            raise ValueError(f"eval.bootstrap.method={self.method!r}: expected one of {', '.join(METHODS)}")

    @classmethod
    def from_config(cls, node: Mapping[str, Any] | None) -> BootstrapOptions:
        """From the ``eval.bootstrap`` node (missing keys and a null node: the defaults)."""
        return cls(**{f.name: node[f.name] for f in fields(cls) if f.name in (node or {})})


#: the defaults, for the functions' signatures
DEFAULT_BOOTSTRAP = BootstrapOptions()


@dataclass(frozen=True)
class Interval:
    """A confidence interval ``[low, high]`` (same unit as the score it belongs to, Spearman x 100 here).

    Attributes:
        low, high: the bounds.
        level: the confidence level (0.95).
        method: how it was computed (``"bootstrap percentile"``, ``"t"``, ``"wilson"`` ...).
    """

    low: float
    high: float
    level: float = 0.95
    method: str = "bootstrap percentile"

    def contains(self, value: float) -> bool:
        """``low <= value <= high``."""
        return self.low <= value <= self.high

    def as_list(self, digits: int = 4) -> list[float]:
        """``[low, high]`` rounded (for JSON)."""
        return [round(float(self.low), digits), round(float(self.high), digits)]


@dataclass(frozen=True)
class TaskPairs:
    """One task's per-pair predictions and gold scores, and how its score aggregates them.

    Attributes:
        system: Float[N], the cosine of each pair (any monotone score works: only ranks matter).
        gold: Float[N], the gold similarity of each pair, same order.
        segments: the lengths of consecutive segments of the N pairs, each scored by one Spearman (``(N,)`` for
            one Spearman over all pairs, the papers' ``all``; the subset sizes for ``mean`` / ``wmean``).
        weights: one weight per segment, summing to 1 (the task score = sum of weight x segment Spearman).

    Raises:
        ValueError: lengths differ, a segment has fewer than 2 pairs, or segments / weights do not match.
    """

    system: np.ndarray
    gold: np.ndarray
    segments: tuple[int, ...] = ()
    weights: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        system = np.asarray(self.system, dtype=np.float64).reshape(-1)
        gold = np.asarray(self.gold, dtype=np.float64).reshape(-1)
        if system.shape != gold.shape:
            raise ValueError(f"TaskPairs: system and gold differ in length: {system.size} and {gold.size}")
        segments = tuple(int(s) for s in self.segments) or (system.size,)
        weights = tuple(float(w) for w in self.weights) or (1.0 / len(segments),) * len(segments)
        if sum(segments) != system.size or min(segments) < 2:
            raise ValueError(f"TaskPairs: segments {segments} must be >= 2 pairs each and sum to {system.size}")
        if len(weights) != len(segments) or not math.isclose(sum(weights), 1.0, abs_tol=1e-9):
            raise ValueError(f"TaskPairs: {len(weights)} weights for {len(segments)} segments (must match, sum 1)")
        object.__setattr__(self, "system", system)
        object.__setattr__(self, "gold", gold)
        object.__setattr__(self, "segments", segments)
        object.__setattr__(self, "weights", weights)

    @classmethod
    def from_subsets(cls, system, gold, subset_sizes: Sequence[int], aggregation: str = "all") -> TaskPairs:
        """The pairs of a task whose subsets (STS12-16) lie one after the other, scored as ``aggregation``:
        ``all`` (one segment), ``mean`` (equal weights), ``wmean`` (weights = subset sizes).

        Raises:
            ValueError: unknown aggregation, or the sizes do not sum to the number of pairs.
        """
        sizes = tuple(int(s) for s in subset_sizes)
        n = int(np.asarray(system).size)
        if sum(sizes) != n:
            raise ValueError(f"subset sizes {sizes} do not sum to the {n} pairs")
        if aggregation == "all":
            return cls(system, gold)
        if aggregation == "mean":
            return cls(system, gold, sizes, tuple(1.0 / len(sizes) for _ in sizes))
        if aggregation == "wmean":
            return cls(system, gold, sizes, tuple(s / n for s in sizes))
        raise ValueError(f"unknown aggregation {aggregation!r}; expected all, mean or wmean")

    def bounds(self) -> list[tuple[int, int]]:
        """``[(start, stop)]`` of each segment."""
        ends = np.cumsum((0, *self.segments))
        return [(int(a), int(b)) for a, b in zip(ends[:-1], ends[1:], strict=True)]


def dense_codes(values: np.ndarray) -> tuple[np.ndarray, int]:
    """``(codes, k)``: each value's index among the sorted distinct values (Int64[N] in [0, k)), and k."""
    uniq, inverse = np.unique(np.asarray(values), return_inverse=True)
    return inverse.reshape(-1).astype(np.int64), int(uniq.size)


def _average_ranks(codes: np.ndarray, k: int) -> np.ndarray:
    """Average ranks (1-based, ties averaged) of each row of ``codes`` (Int[B, n] in [0, k)): Float64[B, n].

    Counting instead of sorting: the rank of a value is (# smaller values in the row) + (# equal + 1) / 2.
    """
    codes = np.atleast_2d(codes)
    rows = codes.shape[0]
    flat = (codes + (np.arange(rows, dtype=np.int64) * k)[:, None]).ravel()  # row r's values in [r k, (r+1) k)
    counts = np.bincount(flat, minlength=rows * k).astype(np.int32).reshape(rows, k)
    below = np.cumsum(counts, axis=1, dtype=np.int32)
    below -= counts
    twice = (2 * below + counts + 1).ravel()          # twice the average rank of each value: exact in int32
    return twice[flat].reshape(codes.shape) * 0.5


def _correlation(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Pearson correlation of centred rows: Float[B, n] with Float[B, n] or Float[n] -> Float[B] (``nan`` for a
    constant row)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return (x * y).sum(-1) / np.sqrt((x * x).sum(-1) * (y * y).sum(-1))


def spearman_rows(x_codes: np.ndarray, kx: int, y_codes: np.ndarray, ky: int) -> np.ndarray:
    """Spearman correlation of each row pair of ``x`` and ``y``, given as dense codes (:func:`dense_codes`).

    Args:
        x_codes, y_codes: Int[B, n] (or Int[n]) in [0, kx) / [0, ky); equal codes are ties.

    Returns:
        Float64[B] in [-1, 1] (``nan`` for a constant row), equal to ``scipy.stats.spearmanr`` row by row up to
        floating-point rounding (average ranks, Pearson of the ranks).
    """
    mid = (np.shape(x_codes)[-1] + 1) / 2.0
    return _correlation(_average_ranks(x_codes, kx) - mid, _average_ranks(y_codes, ky) - mid)


def _segments(tasks: Mapping[str, TaskPairs]) -> list[tuple[int, float, int, int]]:
    """``[(task index, weight, start, stop)]`` of every segment of every task, in order."""
    return [(t, w, a, b) for t, pairs in enumerate(tasks.values())
            for (a, b), w in zip(pairs.bounds(), pairs.weights, strict=True)]


def _check_bootstrap_args(n_resamples: int, level: float, method: str) -> None:
    """:class:`BootstrapOptions`' check, and at least one resample (0 turns the intervals off before a call)."""
    BootstrapOptions(n_resamples=n_resamples, level=level, method=method)
    if n_resamples == 0:
        raise ValueError("n_resamples=0: nothing to resample (0 turns the intervals off in eval.bootstrap.n_resamples)")


def _bootstrap(segs: list[tuple[int, float, int, int]], n_tasks: int, with_avg: bool, segment, n_resamples: int,
               seed: int, level: float, method: str, batch: int | None) -> tuple[np.ndarray, np.ndarray]:
    """``scipy.stats.bootstrap`` over independent index arrays, one per segment of ``segs`` (:func:`_segments`);
    returns (low, high) per task, then of the tasks' mean when ``with_avg``.

    The statistic of a resample: ``segment(j, idx)`` (Float[B], segment j's value on the resampled rows
    ``idx``, Int[B, n]) weighted into its task's score, x 100; with ``with_avg`` the tasks' mean as a last row.
    """
    def statistic(*idx, axis=-1):
        rows = idx[0].shape[:-1]
        scores = np.zeros((n_tasks, *rows))
        for j, ((t, w, _, _), i) in enumerate(zip(segs, idx, strict=True)):
            scores[t] += w * segment(j, i.reshape(-1, i.shape[-1])).reshape(rows)
        scores *= 100.0
        if with_avg:
            scores = np.concatenate([scores, scores.mean(axis=0, keepdims=True)])
        return scores

    from scipy import stats

    data = tuple(np.arange(b - a) for _, _, a, b in segs)
    with warnings.catch_warnings():  # a constant statistic (two identical runs) gives a degenerate distribution
        warnings.simplefilter("ignore", stats.DegenerateDataWarning)
        res = stats.bootstrap(data, statistic, n_resamples=n_resamples, batch=batch, vectorized=True,
                              paired=False, confidence_level=level, method=method, axis=-1,
                              rng=np.random.default_rng(seed))
    low = np.atleast_1d(np.asarray(res.confidence_interval.low, dtype=np.float64))
    high = np.atleast_1d(np.asarray(res.confidence_interval.high, dtype=np.float64))
    # a degenerate bootstrap distribution (every resample equal) gives nan bounds: the interval is that value
    dist = np.atleast_2d(res.bootstrap_distribution)
    for i in range(low.size):
        if not np.isfinite(low[i]) and np.all(dist[i] == dist[i][0]):
            low[i] = high[i] = dist[i][0]
    return low, high


def bootstrap_scores(
    tasks: Mapping[str, TaskPairs], n_resamples: int = DEFAULT_BOOTSTRAP.n_resamples,
    seed: int = DEFAULT_BOOTSTRAP.seed, level: float = DEFAULT_BOOTSTRAP.level, method: str = DEFAULT_BOOTSTRAP.method,
    average: bool = True, batch: int | None = 250,
) -> dict[str, Interval]:
    """Bootstrap confidence intervals of each task's score and of their plain average, resampling pairs.

    Each segment's pairs are resampled with replacement (``scipy.stats.bootstrap``, ``paired=False`` over one
    index array per segment, so a cosine stays with its gold score); in one resample every segment is redrawn
    independently, each task's score is recomputed (Spearman x 100, weighted over its segments) and the
    average is the plain mean of the tasks' scores of that same resample.

    Args:
        tasks: task -> :class:`TaskPairs`.
        n_resamples: bootstrap resamples (>= 100, :class:`BootstrapOptions`).
        seed: seed of the ``numpy.random.Generator`` that draws them (same seed, same intervals).
        level: confidence level.
        method: ``percentile`` or ``basic`` (:data:`METHODS`).
        average: also return ``"avg"`` (when there is more than one task).
        batch: resamples per vectorised call (memory ~ batch x pairs x 8 bytes x a few).

    Returns:
        ``{task: Interval, ..., "avg": Interval}`` in Spearman x 100; ``method`` reads ``"bootstrap <method>"``.

    Raises:
        ValueError: no tasks, bad ``n_resamples`` / ``level`` / ``method``.
    """
    _check_bootstrap_args(n_resamples, level, method)
    if not tasks:
        raise ValueError("bootstrap_scores: no tasks")
    segs = _segments(tasks)
    pairs = list(tasks.values())
    codes = [(dense_codes(pairs[t].system[a:b]), dense_codes(pairs[t].gold[a:b])) for t, _, a, b in segs]
    n_tasks = len(pairs)
    with_avg = average and n_tasks > 1

    def segment(j, i):
        (sc, sk), (gc, gk) = codes[j]
        return spearman_rows(sc[i], sk, gc[i], gk)

    low, high = _bootstrap(segs, n_tasks, with_avg, segment, n_resamples, seed, level, method, batch)
    names = list(tasks) + (["avg"] if with_avg else [])
    return {name: Interval(float(lo), float(hi), level, f"bootstrap {method}")
            for name, lo, hi in zip(names, low, high, strict=True)}


# ------------------------------------------------------------------------------------------ comparison

@dataclass(frozen=True)
class TaskComparison:
    """Run A - run B on one task (or ``avg``), Spearman x 100 points.

    Attributes:
        task: the task (``"avg"`` for the average).
        a, b: each run's score on the same pairs.
        diff: ``a - b``.
        interval: paired bootstrap interval of the difference.
        p: two-sided p-value of the paired permutation test (H0: the two runs' predictions are exchangeable).
        p_holm: ``p`` after Holm's correction across the tasks (``None`` for ``avg``, which is not in the family).
    """

    task: str
    a: float
    b: float
    diff: float
    interval: Interval
    p: float
    p_holm: float | None = None


@dataclass(frozen=True)
class Comparison:
    """:func:`paired_comparison`'s result: one :class:`TaskComparison` per task, then ``avg``."""

    tasks: dict[str, TaskComparison]
    n_resamples: int
    seed: int
    method: str
    alpha: float = 0.05
    notes: list[str] = field(default_factory=list)

    def significant(self, task: str) -> bool:
        """Holm-adjusted p (raw p for ``avg``) below ``alpha``."""
        c = self.tasks[task]
        p = c.p if c.p_holm is None else c.p_holm
        return p < self.alpha


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (family-wise error control), in the input order.

    ``p_(i)`` sorted ascending gets ``max_{j<=i} min(1, (m - j) * p_(j))`` (0-based j).  scipy has no Holm
    (``scipy.stats.false_discovery_control`` is Benjamini-Hochberg / -Yekutieli) and statsmodels is not a
    dependency; this is its ``multipletests(method="holm")``.

    Raises:
        ValueError: a p-value outside [0, 1] or not a number.
    """
    p = np.asarray(pvalues, dtype=np.float64).reshape(-1)
    if p.size and (not np.all(np.isfinite(p)) or p.min() < 0 or p.max() > 1):
        raise ValueError(f"holm: p-values must be in [0, 1], got {p.tolist()}")
    m = p.size
    order = np.argsort(p, kind="stable")
    adjusted = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * p[order]))
    out = np.empty(m)
    out[order] = adjusted
    return out.tolist()


def _rank_codes(values: np.ndarray) -> np.ndarray:
    """Twice the average rank minus 2 of each value (Int64, exact: average ranks are halves), so that the ranks
    of two runs are on one scale and can be swapped pair by pair."""
    codes, k = dense_codes(values)
    return (2.0 * _average_ranks(codes[None], k)[0] - 2.0).round().astype(np.int64)


def paired_comparison(
    a: Mapping[str, TaskPairs], b: Mapping[str, TaskPairs], n_resamples: int = DEFAULT_BOOTSTRAP.n_resamples,
    seed: int = DEFAULT_BOOTSTRAP.seed, level: float = DEFAULT_BOOTSTRAP.level, method: str = DEFAULT_BOOTSTRAP.method,
    alpha: float = 0.05,
) -> Comparison:
    """Compare two runs scored on the same pairs: per-task difference, paired bootstrap interval, p-value.

    * Interval: ``scipy.stats.bootstrap`` over the pairs, the SAME resampled pairs for both runs (so what the
      two runs share, the hard and easy pairs, cancels), score(A) - score(B) per resample; the average's
      difference from the same resample of every task.
    * p-value: ``scipy.stats.permutation_test(permutation_type="samples")`` on each pair's two predictions,
      swapped between the runs at random; the predictions are first replaced by their ranks within their run
      (which leaves each run's Spearman unchanged) so that runs whose cosines live on different scales can be
      swapped.  Two-sided; the smallest p is ``2 / (n_resamples + 1)`` (a note says when too few permutations
      leave no task able to reach ``alpha`` after Holm).  Holm-adjusted across the tasks; the average's p
      (all pairs swapped at once) is not in the family.

    Args:
        a, b: task -> :class:`TaskPairs` of each run; the tasks both have are compared, their gold scores and
            segments must be identical (the same test pairs in the same order).
        n_resamples, seed, level, method: as :func:`bootstrap_scores` (task i's permutations are seeded with
            ``seed + 1 + i``, the average's with ``seed + 1 + number of tasks``).
        alpha: the significance level that :meth:`Comparison.significant` uses.

    Returns:
        :class:`Comparison` (Spearman x 100 points).

    Raises:
        ValueError: no task in common, or a task's gold scores / segments differ (not the same pairs).
    """
    _check_bootstrap_args(n_resamples, level, method)
    common = [t for t in a if t in b]
    if not common:
        raise ValueError(f"no task in common: {list(a)} vs {list(b)}")
    notes = []
    only = sorted(set(a) ^ set(b))
    if only:
        notes.append(f"compared on the {len(common)} common tasks; only one run has {', '.join(only)}")
    for t in common:
        if a[t].segments != b[t].segments or a[t].weights != b[t].weights or not np.array_equal(a[t].gold,
                                                                                               b[t].gold):
            raise ValueError(f"task {t}: the two runs were not scored on the same pairs (gold scores or subsets "
                             "differ); a paired comparison needs the same test pairs in the same order")
    if n_resamples + 1 < 2 * len(common) / alpha:
        notes.append(f"with {n_resamples} permutations the smallest two-sided p is {2 / (n_resamples + 1):.3g}, "
                     f"{len(common)} x that after Holm: no task can reach {alpha:g}; use at least "
                     f"{math.ceil(2 * len(common) / alpha)} resamples")
    ta = {t: a[t] for t in common}
    segs = _segments(ta)
    codes = [(dense_codes(ta[common[t]].system[s:e]), dense_codes(b[common[t]].system[s:e]),
              dense_codes(ta[common[t]].gold[s:e])) for t, _, s, e in segs]
    n_tasks = len(common)
    with_avg = n_tasks > 1

    def segment(j, i):  # Spearman(A) - Spearman(B) on the same resampled pairs
        (ac, ak), (bc, bk), (gc, gk) = codes[j]
        mid = (i.shape[-1] + 1) / 2.0
        ry = _average_ranks(gc[i], gk) - mid
        return _correlation(_average_ranks(ac[i], ak) - mid, ry) - _correlation(_average_ranks(bc[i], bk) - mid, ry)

    low, high = _bootstrap(segs, n_tasks, with_avg, segment, n_resamples, seed, level, method, 250)

    # permutation test: per task (and the average, over all pairs at once)
    seg_ranks = []  # (task, weight, rank codes of A, of B, gold ranks centred, n)
    for (t, w, s, e), (_, _, (gc, gk)) in zip(segs, codes, strict=True):
        name = common[t]
        ra2 = _rank_codes(ta[name].system[s:e])
        rb2 = _rank_codes(b[name].system[s:e])
        ry = _average_ranks(gc[None], gk)[0]
        seg_ranks.append((t, w, ra2, rb2, ry - (e - s + 1) / 2.0, e - s))

    def run_perm(members, rng_seed, scale=1.0):
        def stat(x, y, axis=-1):
            rows = x.shape[:-1]
            total = np.zeros(rows)
            start = 0
            for _t, w, _, _, ryc, n in members:
                xs = x[..., start:start + n].reshape(-1, n).astype(np.int64)
                ys = y[..., start:start + n].reshape(-1, n).astype(np.int64)
                start += n
                rx = _average_ranks(xs, 2 * n)
                rz = _average_ranks(ys, 2 * n)
                mid = (n + 1) / 2.0
                d = (_correlation(rx - mid, ryc) - _correlation(rz - mid, ryc)) * w
                total += d.reshape(rows)
            return 100.0 * scale * total

        from scipy import stats

        x = np.concatenate([m[2] for m in members]).astype(np.float64)
        y = np.concatenate([m[3] for m in members]).astype(np.float64)
        res = stats.permutation_test((x, y), stat, permutation_type="samples",
                                     n_resamples=n_resamples, vectorized=True, alternative="two-sided",
                                     rng=np.random.default_rng(rng_seed))
        return float(min(1.0, res.pvalue))

    pvals = [run_perm([m for m in seg_ranks if m[0] == t], seed + 1 + t) for t in range(n_tasks)]
    adjusted = holm(pvals)
    intervals = [Interval(float(lo), float(hi), level, f"paired bootstrap {method}")
                 for lo, hi in zip(low, high, strict=True)]
    out: dict[str, TaskComparison] = {}
    for t, name in enumerate(common):
        sa = _score(ta[name])
        sb = _score(b[name])
        out[name] = TaskComparison(name, sa, sb, sa - sb, intervals[t], pvals[t], adjusted[t])
    if with_avg:
        sa = float(np.mean([c.a for c in out.values()]))
        sb = float(np.mean([c.b for c in out.values()]))
        p_avg = run_perm(seg_ranks, seed + 1 + n_tasks, 1.0 / n_tasks)
        out["avg"] = TaskComparison("avg", sa, sb, sa - sb, intervals[-1], p_avg, None)
    return Comparison(out, n_resamples, seed, method, alpha, notes)


def _score(pairs: TaskPairs) -> float:
    """A task's score (Spearman x 100) from its pairs, with ``scipy.stats.spearmanr`` per segment."""
    from scipy import stats

    return 100.0 * sum(w * float(stats.spearmanr(pairs.system[a:b], pairs.gold[a:b])[0])
                       for (a, b), w in zip(pairs.bounds(), pairs.weights, strict=True))


# ------------------------------------------------------------------------------------------ seeds

@dataclass(frozen=True)
class SeedStats:
    """One score over the seeds of one configuration.

    Attributes:
        n: number of seeds (runs).
        mean: their mean.
        std: sample standard deviation (``ddof=1``; ``None`` when n < 2).
        interval: t-based interval of the mean, ``mean +- t_{(1+level)/2, n-1} * std / sqrt(n)`` (``None`` when
            n < 2).
        warning: set when n < 3 (an interval from 2 seeds is very wide and its std unreliable; none from 1).
    """

    n: int
    mean: float | None
    std: float | None
    interval: Interval | None
    warning: str | None = None


#: fewer seeds than this get a warning with their statistics
MIN_SEEDS = 3


def seed_statistics(values: Sequence[float], level: float = 0.95) -> SeedStats:
    """Mean, sample std and t-based interval of the mean of one score over seeds (``scipy.stats.t``).

    Args:
        values: one score per seed (Spearman x 100), the runs already known to have distinct seeds.
        level: confidence level of the interval.

    Returns:
        :class:`SeedStats` (``mean`` ``None`` for no values; ``warning`` when fewer than :data:`MIN_SEEDS`).
    """
    v = np.asarray([float(x) for x in values], dtype=np.float64)
    n = int(v.size)
    warning = None
    if n < MIN_SEEDS:
        warning = (f"n={n} seed{'s' if n != 1 else ''}: " + ("no interval over seeds" if n < 2 else
                   "the interval over 2 seeds is very wide (t with 1 degree of freedom)") + f"; run >= {MIN_SEEDS}")
    if n == 0:
        return SeedStats(0, None, None, None, warning)
    mean = float(v.mean())
    if n < 2:
        return SeedStats(n, mean, None, None, warning)
    from scipy import stats

    std = float(v.std(ddof=1))
    half = float(stats.t.ppf((1 + level) / 2, df=n - 1)) * std / math.sqrt(n)
    return SeedStats(n, mean, std, Interval(mean - half, mean + half, level, "t"), warning)


# ------------------------------------------------------------------------------------------ accuracies

def binomial_interval(correct: int, total: int, level: float = 0.95, method: str = "wilson") -> Interval:
    """Confidence interval of an accuracy (x 100) from its count of correct predictions.

    For the transfer tasks' test accuracies: ``scipy.stats.binomtest(correct, total).proportion_ci``.  It treats
    the test examples as independent draws (test-set sampling only, like the STS pair bootstrap).

    Args:
        correct: number of correctly classified test examples (int, 0 <= correct <= total).
        total: number of test examples (int > 0).
        level: confidence level.
        method: ``wilson`` (default), ``wilsoncc`` or ``exact`` (Clopper-Pearson).

    Returns:
        :class:`Interval` in accuracy x 100, ``method`` = ``"binomial <method>"``.

    Raises:
        ValueError: counts that are not integers or out of range, or an unknown method.
    """
    for name, v in (("correct", correct), ("total", total)):
        if isinstance(v, bool) or not isinstance(v, int | np.integer):
            raise ValueError(f"binomial_interval: {name} must be an int count, got {v!r}")
    if total <= 0 or not 0 <= correct <= total:
        raise ValueError(f"binomial_interval: need 0 <= correct <= total and total > 0, got {correct}/{total}")
    from scipy import stats

    ci = stats.binomtest(int(correct), int(total)).proportion_ci(confidence_level=level, method=method)
    return Interval(100.0 * float(ci.low), 100.0 * float(ci.high), level, f"binomial {method}")
