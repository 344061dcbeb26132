"""The report's and `cselab compare`'s intervals: per-run pair intervals, seed statistics, the paper check,
paired comparisons, and the refusal to pool runs that share a seed."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from cselab.cli.compare import main as compare_main
from cselab.cli.report import main as report_main
from cselab.evaluation.pair_scores import write_pair_scores
from cselab.evaluation.results import build_results, score_intervals
from cselab.evaluation.stats import seed_statistics
from cselab.evaluation.sts import TEST_TASKS, spearman
from cselab.report.collect import SameSeedError, collect
from cselab.report.compare import compare_groups
from cselab.report.render import render_csv, render_markdown

SIZES = {"sts12": 120, "sts13": 80, "sts14": 100, "sts15": 90, "sts16": 60, "stsb": 70, "sickr": 110}


def _gold(rng_seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(rng_seed)
    return {t: np.round(rng.uniform(0, 5, n), 1) for t, n in SIZES.items()}


def make_run(root: Path, name: str, method: str, seed: int, noise: float, gold: dict, shuffle: bool = False,
             backbone: str = "bert_base") -> Path:
    """A finished run with results.json (scores from its pairs, intervals) and test_pairs.npz."""
    rng = np.random.default_rng(1000 * seed + int(noise * 100) + len(method))
    pairs = {}
    for t, g in gold.items():
        system = g / 5 + rng.normal(0, noise, g.size)
        if shuffle:
            system = rng.permutation(system)
        pairs[t] = (system.tolist(), g.tolist())
    subsets = {t: {t: len(s)} for t, (s, _) in pairs.items()}
    run = root / name
    (run / ".hydra").mkdir(parents=True)
    config = {"method": {"name": method}, "backbone": {"name": backbone}, "setting": {"name": "unsup"},
              "seed": seed}
    (run / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump([f"method={method}", f"seed={seed}"]))
    write_pair_scores(run / "test_pairs.npz", pairs, subsets)
    test = {t: 100 * spearman(s, g) for t, (s, g) in pairs.items()}
    results = build_results(test, {"stsb": 80.0}, config,
                            **score_intervals(pairs, subsets, n_resamples=200, seed=0))
    (run / "results.json").write_text(json.dumps(results))
    return run


@pytest.fixture
def two_methods(tmp_path):
    gold = _gold()
    for i, seed in enumerate((0, 1, 2)):
        make_run(tmp_path, f"{i}_a", "simcse", seed, 0.4, gold)
        make_run(tmp_path, f"{3 + i}_b", "promptbert", seed, 1.5, gold)
    return tmp_path


def test_same_seed_runs_are_refused_naming_the_seed(tmp_path, capsys):
    gold = _gold()
    make_run(tmp_path, "first", "simcse", 42, 0.5, gold)
    make_run(tmp_path, "copy", "simcse", 42, 0.6, gold)
    with pytest.raises(SameSeedError, match="same seed 42") as err:
        collect([tmp_path], published=[])
    assert "first" in str(err.value) and "copy" in str(err.value)
    assert report_main([str(tmp_path)]) == 1
    assert "same seed 42" in capsys.readouterr().err


def test_report_prints_seed_statistics_pair_intervals_and_comparisons(two_methods, tmp_path):
    report = collect([two_methods], published=[])
    comparisons = compare_groups(report.groups, n_resamples=200)
    assert len(comparisons) == 1 and sorted(comparisons[0].by_seed) == [0, 1, 2]
    md = render_markdown(report, comparisons=comparisons)
    a = next(g for g in report.groups if g.method == "simcse")
    st = seed_statistics([r.score("avg") for r in a.runs])
    assert a.stat("avg").interval == st.interval
    assert f"{st.mean:.2f} ± {st.std:.2f} [{st.interval.low:.2f}, {st.interval.high:.2f}]" in md
    run = a.runs[0]
    low, high = run.interval("sts12")
    assert f"{run.score('sts12'):.2f} [{low:.2f}, {high:.2f}]" in md
    assert "### Paired comparison: A = promptbert/bert_base/unsup" in md or "A = simcse" in md
    assert "mean over 3 seeds" in md
    # A is much worse (noise 1.5 vs 0.4) or much better: every seed's Avg difference is significant
    gc = comparisons[0]
    assert all(cmp.significant("avg") for cmp in gc.by_seed.values())
    assert gc.over_seeds["avg"].n == 3 and gc.over_seeds["avg"].interval is not None
    rows = list(csv.DictReader(render_csv(report).splitlines()))
    ok = next(r for r in rows if r["method"] == "simcse")
    assert float(ok["avg_seed_ci_low"]) == pytest.approx(st.interval.low)
    assert ok["avg_pairs_ci_low"] == ""          # n = 3: the per-run intervals are in the Markdown section
    out = tmp_path / "cmp.csv"
    assert report_main([str(two_methods), "--n-resamples", "200", "--comparisons-csv", str(out)]) == 0
    long = list(csv.DictReader(out.open()))
    assert {r["seed"] for r in long} == {"0", "1", "2", "mean"} and len(long) == 3 * 8 + 8


def test_two_seeds_warn_and_one_seed_has_no_interval(tmp_path):
    gold = _gold()
    make_run(tmp_path, "a0", "simcse", 0, 0.4, gold)
    make_run(tmp_path, "a1", "simcse", 1, 0.4, gold)
    make_run(tmp_path, "b0", "promptbert", 0, 0.4, gold)
    report = collect([tmp_path], published=[])
    md = render_markdown(report)
    assert "n=2 seeds: the interval over 2 seeds is very wide" in md
    assert "n=1 seed: no interval over seeds" in md
    single = next(g for g in report.groups if g.n == 1)
    assert single.stat("avg").interval is None
    row = next(r for r in csv.DictReader(render_csv(report).splitlines()) if r["method"] == "promptbert")
    assert row["avg_pairs_ci_low"] != "" and row["avg_seed_ci_low"] == ""


def test_paper_number_inside_or_outside_our_seed_interval(tmp_path):
    """simcse / bert_base / unsup matches SimCSE's published row; our seeds are far below it: outside."""
    gold = _gold()
    for seed in (0, 1, 2):
        make_run(tmp_path, f"s{seed}", "simcse", seed, 0.4 + 0.05 * seed, gold)
    report = collect([tmp_path])
    g = report.groups[0]
    assert g.published is not None and g.paper("avg") is not None
    interval = g.stat("avg").interval
    assert g.paper_inside("avg") is interval.contains(g.paper("avg"))
    md = render_markdown(report)
    assert "### Against the paper" in md
    assert f"{g.paper('avg'):.2f} {'inside' if g.paper_inside('avg') else 'outside'}" in md


def test_compare_cli_identical_and_shuffled(tmp_path, capsys):
    gold = _gold()
    a = make_run(tmp_path, "a", "simcse", 0, 0.4, gold)
    shuffled = make_run(tmp_path, "s", "simcse", 0, 0.4, gold, shuffle=True)
    assert compare_main([str(a), str(a), "--n-resamples", "200", "--format", "csv"]) == 0
    out = capsys.readouterr()
    assert "RUN_A and RUN_B are the same run" in out.err
    rows = list(csv.DictReader(out.out.splitlines()))
    assert [r["task"] for r in rows] == [*TEST_TASKS, "avg"]
    assert all(float(r["diff"]) == 0 and float(r["p"]) == 1 for r in rows)
    assert compare_main([str(a), str(shuffled), "--n-resamples", "200"]) == 0
    assert "no task can reach 0.05; use at least 280 resamples" in capsys.readouterr().out
    assert compare_main([str(a), str(shuffled)]) == 0     # 1000 permutations: min Holm p = 7 x 2 / 1001
    md = capsys.readouterr().out
    assert "| Avg |" in md and md.count(" * |") == 8      # every task and the average significant
    (tmp_path / "old").mkdir()  # a run written before test_pairs.npz existed
    (tmp_path / "old" / "results.json").write_text((a / "results.json").read_text())
    assert compare_main([str(a), str(tmp_path / "old")]) == 1
    assert "no per-pair test scores" in capsys.readouterr().err


def test_compare_refuses_a_folder_that_is_not_a_run(tmp_path, capsys):
    a = make_run(tmp_path, "a", "simcse", 0, 0.4, _gold())
    (tmp_path / "notes").mkdir()
    with pytest.raises(SystemExit) as bad:
        compare_main([str(a), str(tmp_path / "notes")])
    assert bad.value.code == 2 and "not a run directory (no results.json)" in capsys.readouterr().err


def test_the_seed_warning_counts_the_row_s_runs(tmp_path):
    """Runs that tested a subset of the tasks (no avg): the warning says n=2, as the row does (446911a: n=0)."""
    gold = _gold()
    for seed in (0, 1):
        run = make_run(tmp_path, f"a{seed}", "simcse", seed, 0.4, gold)
        results = json.loads((run / "results.json").read_text())
        results["test"] = {"stsb": results["test"]["stsb"]}
        (run / "results.json").write_text(json.dumps(results))
    md = render_markdown(collect([tmp_path], published=[]))
    assert "n=2 seeds: the interval over 2 seeds is very wide" in md and "n=0" not in md


def test_compare_auto_stops_beyond_six_pairs_of_rows_and_says_so(tmp_path, capsys):
    gold = _gold()
    for method in ("simcse", "promptbert", "cot_bert", "dcpcse", "promcse"):   # 5 rows: 10 pairs
        make_run(tmp_path, method, method, 0, 0.4, gold)
    report = collect([tmp_path], published=[])
    assert compare_groups(report.groups) == []
    assert len(compare_groups(report.groups[:4], n_resamples=200)) == 6
    assert report_main([str(tmp_path)]) == 0
    assert "10 pairs of rows could be compared" in capsys.readouterr().err
