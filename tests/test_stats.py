"""Intervals, paired comparisons and seed statistics (cselab.evaluation.stats, pair_scores)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats

from cselab.evaluation.pair_scores import PAIRS_FILE, compact, read_pair_scores, task_pairs, write_pair_scores
from cselab.evaluation.stats import (
    TaskPairs,
    binomial_interval,
    bootstrap_scores,
    dense_codes,
    holm,
    paired_comparison,
    seed_statistics,
    spearman_rows,
)


def _bivariate(rng, n, r):
    """n pairs from a bivariate normal with Pearson correlation r; its population Spearman is
    (6 / pi) * arcsin(r / 2) (Pearson 1907)."""
    x, y = rng.multivariate_normal([0, 0], [[1, r], [r, 1]], size=n).T
    return x, y


def _tasks(rng, sizes=(300, 200, 250), noise=0.5):
    out = {}
    for i, n in enumerate(sizes):
        gold = np.round(rng.uniform(0, 5, n), 1)   # ties, like STS gold scores
        out[f"t{i}"] = TaskPairs(gold / 5 + rng.normal(0, noise, n), gold)
    return out


def test_vectorised_spearman_equals_scipy_with_ties():
    rng = np.random.default_rng(0)
    x = np.round(rng.normal(size=(5, 120)), 1)
    y = np.round(x + rng.normal(size=(5, 120)), 1)
    cx, kx = dense_codes(x.ravel())
    cy, ky = dense_codes(y.ravel())
    got = spearman_rows(cx.reshape(5, 120), kx, cy.reshape(5, 120), ky)
    want = [stats.spearmanr(a, b)[0] for a, b in zip(x, y, strict=True)]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


def test_interval_covers_the_population_spearman_at_the_nominal_rate():
    """100 seeded samples of 200 pairs from a bivariate normal (r = 0.7): the 95 % interval holds the population
    Spearman (6/pi) asin(r/2) in >= 90 of them."""
    r = 0.7
    rho = 100 * 6 / math.pi * math.asin(r / 2)
    covered = 0
    for trial in range(100):
        x, y = _bivariate(np.random.default_rng(trial), 200, r)
        ci = bootstrap_scores({"t": TaskPairs(x, y)}, n_resamples=1000, seed=trial)["t"]
        covered += ci.contains(rho)
        assert ci.low < 100 * stats.spearmanr(x, y)[0] < ci.high
    assert covered >= 90, covered


def test_bootstrap_is_seeded_and_gives_an_average():
    tasks = _tasks(np.random.default_rng(1))
    a = bootstrap_scores(tasks, n_resamples=500, seed=3)
    b = bootstrap_scores(tasks, n_resamples=500, seed=3)
    assert a == b and set(a) == {"t0", "t1", "t2", "avg"}
    assert a["avg"].method == "bootstrap percentile"
    point = np.mean([100 * stats.spearmanr(p.system, p.gold)[0] for p in tasks.values()])
    assert a["avg"].low < point < a["avg"].high
    # the average of 3 independent tasks is tighter than each task
    assert a["avg"].high - a["avg"].low < min(a[t].high - a[t].low for t in ("t0", "t1", "t2"))
    assert bootstrap_scores(tasks, n_resamples=500, seed=4) != a


def test_identical_runs_differ_by_zero_with_p_one():
    tasks = _tasks(np.random.default_rng(2))
    cmp = paired_comparison(tasks, tasks, n_resamples=500)
    for c in cmp.tasks.values():
        assert c.diff == 0 and c.interval.low == 0 and c.interval.high == 0
        assert c.p == 1.0
        assert c.p_holm in (1.0, None)
    assert not any(cmp.significant(t) for t in cmp.tasks)


def test_a_run_against_a_shuffled_copy_of_itself_is_significant():
    rng = np.random.default_rng(3)
    tasks = _tasks(rng)
    shuffled = {t: TaskPairs(rng.permutation(p.system), p.gold) for t, p in tasks.items()}
    cmp = paired_comparison(tasks, shuffled, n_resamples=500)
    for name, c in cmp.tasks.items():
        assert c.diff > 0 and c.interval.low > 0, name
        assert cmp.significant(name), (name, c.p, c.p_holm)
    assert cmp.tasks["t0"].p_holm == pytest.approx(min(1.0, 3 * cmp.tasks["t0"].p), abs=1e-12) or \
        cmp.tasks["t0"].p_holm >= cmp.tasks["t0"].p


def test_a_small_difference_is_not_significant_and_is_scale_free():
    """Run B = run A's cosines squashed by a monotone map plus a little noise: its Spearman barely differs;
    the ranks, not the cosine scales, are swapped, so the scale change alone does not look significant."""
    rng = np.random.default_rng(4)
    tasks = _tasks(rng, sizes=(400,))
    b = {"t0": TaskPairs(np.tanh(0.1 * tasks["t0"].system) + rng.normal(0, 1e-4, 400), tasks["t0"].gold)}
    c = paired_comparison(tasks, b, n_resamples=500).tasks["t0"]
    assert abs(c.diff) < 1 and c.p > 0.05 and c.interval.low < 0 < c.interval.high


def test_comparison_refuses_different_pairs():
    rng = np.random.default_rng(5)
    a = _tasks(rng, sizes=(50,))
    b = {"t0": TaskPairs(a["t0"].system, a["t0"].gold[::-1])}
    with pytest.raises(ValueError, match="same pairs"):
        paired_comparison(a, b, n_resamples=100)
    with pytest.raises(ValueError, match="no task in common"):
        paired_comparison(a, {"x": a["t0"]}, n_resamples=100)


def test_holm_matches_the_step_down_definition():
    assert holm([0.01, 0.04, 0.03, 0.5]) == pytest.approx([0.04, 0.09, 0.09, 0.5])
    assert holm([0.2, 0.6]) == pytest.approx([0.4, 0.6])
    assert holm([]) == []
    with pytest.raises(ValueError):
        holm([1.5])


def test_seed_statistics_t_interval_and_small_n_warning():
    s = seed_statistics([75.1, 76.0, 75.5, 74.9])
    lo, hi = stats.t.interval(0.95, df=3, loc=np.mean([75.1, 76.0, 75.5, 74.9]),
                              scale=stats.sem([75.1, 76.0, 75.5, 74.9]))
    assert s.n == 4 and s.warning is None
    assert s.interval.low == pytest.approx(lo) and s.interval.high == pytest.approx(hi)
    assert s.std == pytest.approx(np.std([75.1, 76.0, 75.5, 74.9], ddof=1))
    two = seed_statistics([75.0, 76.0])
    assert two.interval is not None and "n=2" in two.warning
    one = seed_statistics([75.0])
    assert one.interval is None and one.std is None and "no interval" in one.warning


def test_binomial_interval_of_an_accuracy():
    ci = binomial_interval(80, 100)
    ref = stats.binomtest(80, 100).proportion_ci(method="wilson")
    assert (ci.low, ci.high) == pytest.approx((100 * ref.low, 100 * ref.high))
    assert ci.contains(80.0) and ci.method == "binomial wilson"
    for bad in ((5, 0), (11, 10), (0.5, 10), (-1, 10)):
        with pytest.raises(ValueError, match="binomial_interval"):
            binomial_interval(*bad)


def test_compact_keeps_ties_as_they_are():
    assert compact([0.1, 0.2, 0.3]).dtype == np.float32
    close = [0.5, 0.5 + 1e-12]             # distinct in float64, one value in float32
    assert compact(close).dtype == np.float64


def test_pair_scores_file_round_trip_and_subsets(tmp_path):
    rng = np.random.default_rng(6)
    sys_, gold = rng.normal(size=30), np.round(rng.uniform(0, 5, 30), 1)
    path = write_pair_scores(tmp_path / PAIRS_FILE, {"sts12": (sys_.tolist(), gold.tolist())},
                             {"sts12": {"MSRpar": 10, "MSRvid": 20}}, "mean")
    raw, aggregation = read_pair_scores(path)
    assert aggregation == "mean" and list(raw["sts12"]["subset_names"]) == ["MSRpar", "MSRvid"]
    pairs = task_pairs(raw, aggregation)["sts12"]
    assert pairs.segments == (10, 20) and pairs.weights == (0.5, 0.5)
    with pytest.raises(ValueError, match="sts12"):
        write_pair_scores(tmp_path / "x.npz", {"sts12": ([1.0, 2.0], [1.0, 2.0])}, {"sts12": {"a": 3}})
    with pytest.raises(FileNotFoundError, match="per-pair"):
        read_pair_scores(tmp_path / "missing.npz")


def test_stored_pair_scores_reproduce_results_json_exactly(tmp_path, tiny_bert_dir, sts_data_dir):
    """A real (tiny) run: test_pairs.npz's cosines and gold scores give results.json's Spearman bit for bit,
    STS12's from its concatenated subsets; results.json carries the intervals, which contain the scores."""
    from cselab.evaluation.sts import spearman
    from tests.conftest import compose_tiny_run, run

    cfg = compose_tiny_run(tmp_path, tiny_bert_dir, sts_data_dir, "method.train=false",
                           "eval.test_tasks=[sts12,stsb,sickr]", "eval.bootstrap.n_resamples=200")
    out = tmp_path / "run"
    run(cfg, out)
    res = json.loads((out / "results.json").read_text())
    raw, aggregation = read_pair_scores(out / PAIRS_FILE)
    assert aggregation == "all" and list(raw) == ["sts12", "stsb", "sickr"]
    assert len(raw["sts12"]["subsets"]) == 5 and raw["sts12"]["system"].dtype in (np.float32, np.float64)
    for task, d in raw.items():
        assert 100.0 * spearman(d["system"], d["gold"]) == res["test"][task], task
        low, high = res["test_ci"][task]
        assert low <= res["test"][task] <= high
    assert "avg" not in res["test_ci"]      # no avg for a partial table, as test.avg
    assert res["test_ci_info"]["method"] == "bootstrap percentile" and res["test_ci_info"]["n_resamples"] == 200


def test_console_table_keeps_its_two_lines_and_adds_the_bounds():
    from cselab.evaluation.sts import TEST_TASKS, format_table

    scores = {t: 70.0 + i for i, t in enumerate(TEST_TASKS)}
    scores["avg"] = 73.0
    ci = {t: [v - 1.5, v + 1.25] for t, v in scores.items()}
    lines = format_table(scores, ci).splitlines()
    assert lines[:2] == format_table(scores).splitlines()
    assert lines[2].split()[:8] == [f"{v - 1.5:.2f}" for v in scores.values()] and lines[2].endswith("low")
    assert lines[3].split()[:8] == [f"{v + 1.25:.2f}" for v in scores.values()] and lines[3].endswith("high")
