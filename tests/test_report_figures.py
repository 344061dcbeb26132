"""The report's figures and page (`cselab report --figures`): what each figure plots equals the runs' files
(results.json, csv/metrics.csv), read back from the data file beside it and from the matplotlib artists; the HTML
page links only files that exist under its folder and is served by `python -m http.server`."""

from __future__ import annotations

import csv
import functools
import http.server
import json
import threading
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import yaml
from scipy import stats

from cselab.cli.report import main as report_main
from cselab.evaluation.pair_scores import write_pair_scores
from cselab.evaluation.results import build_results, score_intervals
from cselab.evaluation.sts import spearman
from cselab.report.collect import collect
from cselab.report.figures import dev_curve_figure, sweep_figure, task_scores_figure
from cselab.report.page import PAGE, page_links
from cselab.report.published import load_published, lookup

SIZES = {"sts12": 60, "sts13": 50, "sts14": 60, "sts15": 50, "sts16": 40, "stsb": 50, "sickr": 60}


def make_run(root: Path, name: str, method: str, seed: int, noise: float, *, overrides: list[str] | None = None,
             tuning: dict | None = None, curve: list[tuple[int, float]] | None = None, best: int | None = None,
             backbone: str = "bert_base", align_uniform: list[tuple[int, float, float]] | None = None) -> Path:
    """A finished run: results.json (scores from its pairs, bootstrap intervals, a val_curve), test_pairs.npz,
    .hydra/overrides.yaml, and (``align_uniform``) the rows the callback logs to csv/metrics.csv."""
    rng = np.random.default_rng(1000 * seed + int(noise * 100) + len(method) + len(name))
    gold_rng = np.random.default_rng(0)
    pairs = {}
    for t, n in SIZES.items():
        g = np.round(gold_rng.uniform(0, 5, n), 1)
        pairs[t] = ((g / 5 + rng.normal(0, noise, n)).tolist(), g.tolist())
    subsets = {t: {t: len(s)} for t, (s, _) in pairs.items()}
    run = root / name
    (run / ".hydra").mkdir(parents=True)
    config = {"method": {"name": method}, "backbone": {"name": backbone}, "setting": {"name": "unsup"},
              "seed": seed, **({"tuning": tuning} if tuning else {})}
    (run / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides or [f"method={method}", f"seed={seed}"]))
    write_pair_scores(run / "test_pairs.npz", pairs, subsets)
    test = {t: 100 * spearman(s, g) for t, (s, g) in pairs.items()}
    curve = curve or []
    extra = {"val_curve": [{"step": s, "stsb_dev": v, "seconds": 1.0} for s, v in curve],
             "best_checkpoint": None if best is None else str(run / "checkpoints" / f"best-step{best}.ckpt")}
    results = build_results(test, {"stsb": 80.0}, config, **extra,
                            **score_intervals(pairs, subsets, n_resamples=200, seed=0))
    (run / "results.json").write_text(json.dumps(results))
    if align_uniform:
        (run / "csv").mkdir()
        with open(run / "csv" / "metrics.csv", "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["epoch", "step", "train/loss", "align_uniform/alignment", "align_uniform/uniformity",
                        "align_uniform/seconds"])
            for step, a, u in align_uniform:
                w.writerow(["", step, "", a, u, 0.5])
                w.writerow([0, step, 1.23, "", "", ""])   # another metric's row at the same step
    return run


def _results(run: Path) -> dict:
    return json.loads((run / "results.json").read_text())


def _data(out: Path, stem: str) -> dict:
    return json.loads((out / f"{stem}.json").read_text())


@pytest.fixture
def two_methods(tmp_path):
    """simcse and promptbert, seeds 0-2, each with a dev curve (the selected step differs per seed)."""
    root = tmp_path / "runs"
    for i, seed in enumerate((0, 1, 2)):
        for method, noise in (("simcse", 0.4), ("promptbert", 0.3)):
            curve = [(2, 70.0 + seed), (4, 74.0 - seed), (6, 72.5 + 0.5 * seed)]
            best = max(curve, key=lambda p: p[1])[0]
            make_run(root, f"{i}_{method}", method, seed, noise, curve=curve, best=best,
                     align_uniform=[(0, 0.9, -1.0 - seed), (2, 0.5, -2.0), (4, 0.3, -2.5)] if method == "simcse"
                     else None)
    return root


# ------------------------------------------------------------------------------------------- the figures' data

def test_dev_curves_plot_every_seed_its_selected_checkpoint_and_the_pooled_band(two_methods, tmp_path):
    out = tmp_path / "fig"
    assert report_main([str(two_methods), "--figures", str(out), "--compare", "none", "--out", str(tmp_path / "r.md")]) == 0
    stems = sorted(p.stem for p in out.glob("dev_curve_*.json"))
    assert len(stems) == 2
    for stem in stems:
        data = _data(out, stem)
        method = "promptbert" if "promptbert" in stem else "simcse"
        runs = sorted(two_methods.glob(f"*_{method}"))
        seeds = {s["run"]: s for s in data["series"] if s["kind"] == "seed"}
        selected = {s["run"]: s for s in data["series"] if s["kind"] == "selected"}
        curves = []
        for run in runs:
            res = _results(run)
            curve = res["val_curve"]
            assert seeds[str(run)]["x"] == [p["step"] for p in curve]
            assert seeds[str(run)]["y"] == [p["stsb_dev"] for p in curve]
            step = int(Path(res["best_checkpoint"]).stem.split("step")[1])
            assert selected[str(run)]["x"] == [step]
            assert selected[str(run)]["y"] == [next(p["stsb_dev"] for p in curve if p["step"] == step)]
            curves.append([p["stsb_dev"] for p in curve])
        mean = next(s for s in data["series"] if s["kind"] == "mean")
        band = next(s for s in data["series"] if s["kind"] == "band")
        values = np.array(curves)
        assert mean["x"] == [2, 4, 6]
        np.testing.assert_allclose(mean["y"], values.mean(0))
        np.testing.assert_allclose(band["low"], values.mean(0) - values.std(0, ddof=1))
        np.testing.assert_allclose(band["high"], values.mean(0) + values.std(0, ddof=1))
        for fmt in ("png", "svg"):
            assert (out / f"{stem}.{fmt}").stat().st_size > 1000


def test_the_artists_draw_the_data_file(two_methods):
    """What matplotlib holds (line data, the band's polygon) is the series the JSON records."""
    group = collect([two_methods]).groups[0]
    spec = dev_curve_figure(group)
    ax = spec.figure.axes[0]
    lines = {line.get_gid(): line for line in ax.get_lines()}
    for series in spec.data["series"]:
        if series["kind"] == "seed":
            seed = json.loads((Path(series["run"]) / "results.json").read_text())["config"]["seed"]
            np.testing.assert_allclose(lines[f"seed:{seed}"].get_xydata(), np.c_[series["x"], series["y"]])
        if series["kind"] == "mean":
            np.testing.assert_allclose(lines["mean"].get_ydata(), series["y"])
        if series["kind"] == "band":
            band = next(c for c in ax.collections if c.get_gid() == "band")
            ys = band.get_paths()[0].vertices[:, 1]
            assert min(ys) == pytest.approx(min(series["low"])) and max(ys) == pytest.approx(max(series["high"]))


def test_task_scores_are_the_means_and_every_runs_bootstrap_interval(two_methods, tmp_path):
    out = tmp_path / "fig"
    assert report_main([str(two_methods), "--figures", str(out), "--compare", "none", "--out", str(tmp_path / "r.md")]) == 0
    data = _data(out, "test_scores")
    assert [s["label"].split("/")[0] for s in data["series"]] == ["promptbert", "simcse"]
    for series in data["series"]:
        runs = sorted(two_methods.glob(f"*_{series['label'].split('/')[0]}"))
        assert series["tasks"] == [*SIZES, "avg"]
        for k, task in enumerate(series["tasks"]):
            assert series["mean"][k] == pytest.approx(np.mean([_results(r)["test"][task] for r in runs]))
        for entry in series["runs"]:
            res = _results(Path(entry["run"]))
            assert entry["score"] == pytest.approx([res["test"][t] for t in entry["tasks"]])
            assert entry["low"] == pytest.approx([res["test_ci"][t][0] for t in entry["tasks"]])
            assert entry["high"] == pytest.approx([res["test_ci"][t][1] for t in entry["tasks"]])
    spec = task_scores_figure(collect([two_methods]).groups)
    bars = [p.get_height() for c in spec.figure.axes[0].containers if hasattr(c, "patches") for p in c.patches]
    assert bars == pytest.approx([m for s in spec.data["series"] for m in s["mean"]])


def test_align_uniform_trajectory_is_the_logged_csv(two_methods, tmp_path):
    out = tmp_path / "fig"
    assert report_main([str(two_methods), "--figures", str(out), "--compare", "none", "--out", str(tmp_path / "r.md")]) == 0
    data = _data(out, "align_uniform")
    assert len(data["series"]) == 3  # the simcse runs logged it, the promptbert runs did not
    for series in data["series"]:
        rows = [r for r in csv.DictReader(open(Path(series["run"]) / "csv" / "metrics.csv"))
                if r["align_uniform/alignment"]]
        assert series["step"] == [int(r["step"]) for r in rows]
        assert series["x"] == [float(r["align_uniform/uniformity"]) for r in rows]
        assert series["y"] == [float(r["align_uniform/alignment"]) for r in rows]


@pytest.fixture
def prompt_length_sweep(tmp_path):
    """DCPCSE / PromCSE Fig. 2: tuning.pre_seq_len 1, 2, 4 x method, seeds 0 and 1."""
    root = tmp_path / "sweep"
    for method in ("dcpcse", "promcse"):
        for length in (1, 2, 4):
            for seed in (0, 1):
                make_run(root, f"{method}_{length}_{seed}", method, seed, 0.2 + 0.1 * length,
                         overrides=[f"method={method}", f"tuning.pre_seq_len={length}", f"seed={seed}"],
                         tuning={"pre_seq_len": length})
    return root


def test_sweep_plots_the_swept_key_with_seed_intervals_and_the_papers_marker(prompt_length_sweep, tmp_path):
    out = tmp_path / "fig"
    assert report_main([str(prompt_length_sweep), "--figures", str(out), "--compare", "none", "--out", str(tmp_path / "r.md")]) == 0
    data = _data(out, "sweep_tuning.pre_seq_len_avg")
    assert data["x_key"] == "tuning.pre_seq_len" and data["score"] == "avg"
    lines = {s["label"]: s for s in data["series"] if s["kind"] == "line"}
    assert set(lines) == {"method.name=dcpcse", "method.name=promcse"}
    for label, line in lines.items():
        method = label.split("=")[1]
        assert line["x"] == [1, 2, 4]
        for k, length in enumerate(line["x"]):
            avgs = [_results(prompt_length_sweep / f"{method}_{length}_{s}")["test"]["avg"] for s in (0, 1)]
            half = stats.t.ppf(0.975, 1) * np.std(avgs, ddof=1) / np.sqrt(2)
            assert line["y"][k] == pytest.approx(np.mean(avgs))
            assert [line["low"][k], line["high"][k]] == pytest.approx([np.mean(avgs) - half, np.mean(avgs) + half])
    paper = next(s for s in data["series"] if s["kind"] == "paper")
    # published.yaml: DCPCSE and PromCSE Fig. 2's "prompt length 1" = 76.50 (the texts' only stated point)
    assert paper["x"] == [1, 1] and paper["y"] == [76.5, 76.5]
    assert sorted(paper["source"]) == ["DCPCSE Figure 2 (section 3.3 text)", "PromCSE Figure 2 (section 5 text)"]
    # lengths 2 and 4 match the papers' default-recipe rows (their own length, 16 for DCPCSE): a reference line each,
    # not a point at x = 2 or 4
    rows = load_published()
    main = [lookup(rows, m, "bert_base", "unsup", None) for m in ("dcpcse", "promcse")]
    drawn_lines = sorted((s["source"], s["y"]) for s in data["series"] if s["kind"] == "paper_line")
    assert drawn_lines == sorted((r.source, r.scores["avg"]) for r in main)
    spec = sweep_figure(collect([prompt_length_sweep]).groups)
    ax = spec.figure.axes[0]
    paper_artist = next(a for a in ax.get_lines() if a.get_gid() == "paper")
    np.testing.assert_allclose(paper_artist.get_xydata(), [[1, 76.5], [1, 76.5]])
    bars = {c.get_label(): c for c in ax.containers}
    for label, line in lines.items():
        data_line, (cap_low, cap_high), _ = bars[label].lines
        np.testing.assert_allclose(data_line.get_xydata(), np.c_[line["x"], line["y"]])
        np.testing.assert_allclose(np.asarray(cap_low.get_ydata(), float), line["low"])    # the error bars are the seed intervals
        np.testing.assert_allclose(np.asarray(cap_high.get_ydata(), float), line["high"])


def test_a_figures_x_that_does_not_vary_is_refused(prompt_length_sweep, tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        report_main([str(prompt_length_sweep), "--figures", str(tmp_path / "fig"), "--figures-x", "optim.lr"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--figures-x optim.lr" in err and "tuning.pre_seq_len" in err
    assert not (tmp_path / "fig").exists()


# ------------------------------------------------------------------------------------------- the page

def test_the_page_links_only_files_under_its_folder_and_is_served_by_http_server(two_methods, tmp_path):
    out = tmp_path / "fig"
    assert report_main([str(two_methods), "--figures", str(out), "--out", str(tmp_path / "r.md")]) == 0
    page = (out / PAGE).read_text()
    links = page_links(page)
    images = [link for link in links if link.endswith(".png")]
    assert "test_scores.png" in images and "align_uniform.png" in images
    assert {"report.md", "report.tex", "report.csv"} <= set(links)
    for link in links:
        assert "://" not in link and not link.startswith("/") and (out / link).is_file()
    assert "<table>" in page and "Paired comparison" in (out / "report.md").read_text()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(out))
    handler.log_message = lambda *a, **k: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}/"
        with urllib.request.urlopen(base) as resp:  # the directory's index.html
            assert resp.status == 200 and resp.read().decode() == page
        for link in links:
            with urllib.request.urlopen(base + link) as resp:
                assert resp.status == 200 and resp.read() == (out / link).read_bytes()
    finally:
        server.shutdown()
        server.server_close()
