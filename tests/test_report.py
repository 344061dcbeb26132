"""The report: run discovery, seed pooling, mean / std, paper matching, renderers, CLI, published data."""

from __future__ import annotations

import csv
import io
import itertools
import json
import re
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import yaml

from cselab.cli.report import main
from cselab.report.collect import collect, find_runs, group_key
from cselab.report.published import (
    BACKBONES,
    SCORE_KEYS,
    SETTINGS,
    TASKS,
    PublishedDataError,
    avg_mismatch,
    load_published,
    lookup,
    variant_of,
)
from cselab.report.render import render, render_csv, render_latex, render_markdown

PAPERS_DIR = Path("/work/shared/papers")


# ------------------------------------------------------------------------------------------- fixtures

def _config(method="simcse", backbone="bert_base", setting="unsup", seed=42, **extra) -> dict:
    cfg = {
        "method": {"name": method, "pooler": "cls", "denoise": "none"},
        "backbone": {"name": backbone, "name_or_path": f"/models/{backbone}"},
        "setting": {"name": setting},
        "loss": {"name": "infonce", "temperature": 0.05},
        "prompt": {},
        "seed": seed,
        "data_dir": "data",
    }
    for dotted, value in extra.items():
        node = cfg
        *parents, last = dotted.split("__")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value
    return cfg


def _scores(base: float, rng: np.random.Generator) -> dict[str, float]:
    test = {t: float(base + rng.normal(0, 1)) for t in TASKS}
    test["avg"] = sum(test.values()) / len(TASKS)
    return test


def make_run(root: Path, name: str, *, scores: dict | None, overrides: list[str] | None = None,
             config: dict | None = None, dev: float = 80.0, log: list[str] | None = None) -> Path:
    """A fake run dir: results.json (unless ``scores`` is None) + .hydra/overrides.yaml (+ config.yaml)."""
    run = root / name
    run.mkdir(parents=True)
    config = config if config is not None else _config()
    if overrides is not None:
        (run / ".hydra").mkdir()
        (run / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
        (run / ".hydra" / "config.yaml").write_text(yaml.safe_dump(config))
    if scores is not None:
        results = {"test": scores, "dev": {"stsb": dev}, "config": config, "val_curve": [], "wall_time_s": 1.0}
        (run / "results.json").write_text(json.dumps(results))
    if log is not None:
        (run / "run.log").write_text("\n".join(log) + "\n")
    return run


@pytest.fixture
def sweep(tmp_path: Path) -> dict:
    """A multirun: simcse bert_base unsup x 3 seeds, the same with max_steps=100 x 2 seeds, promptbert x 1,
    and one failed simcse job (no results.json, a run.log)."""
    rng = np.random.default_rng(0)
    root = tmp_path / "multirun" / "2026-01-01" / "10-00-00"
    (root / "multirun.yaml").parent.mkdir(parents=True)
    (root / "multirun.yaml").write_text("hydra: {}\n")
    runs: dict[str, list[dict]] = {"simcse": [], "simcse100": [], "promptbert": []}
    for i, seed in enumerate([1, 2, 3]):
        s = _scores(76, rng)
        runs["simcse"].append(s)
        make_run(root, f"{i}_simcse_bert_base_unsup", scores=s, config=_config(seed=seed),
                 overrides=["method=simcse", "backbone=bert_base", f"seed={seed}", "hydra.verbose=true"])
    for i, seed in enumerate([1, 2]):
        s = _scores(70, rng)
        runs["simcse100"].append(s)
        make_run(root, f"{3 + i}_simcse_bert_base_unsup", scores=s, config=_config(seed=seed),
                 overrides=["method=simcse", "backbone=bert_base", f"seed={seed}", "trainer.max_steps=100"])
    s = _scores(78, rng)
    runs["promptbert"].append(s)
    make_run(root, "5_promptbert_bert_base_unsup", scores=s, config=_config("promptbert", seed=1, method__denoise="position"),
             overrides=["method=promptbert", "backbone=bert_base", "seed=1"])
    make_run(root, "6_simcse_bert_base_unsup", scores=None, config=_config(seed=4),
             overrides=["method=simcse", "backbone=bert_base", "seed=4"],
             log=[f"line {k}" for k in range(30)] + ["RuntimeError: CUDA out of memory"])
    return {"root": tmp_path / "multirun", "runs": runs}


def _group(report, method: str, label: str = ""):
    matches = [g for g in report.groups if g.method == method and g.label == label]
    assert len(matches) == 1, [(g.method, g.label) for g in report.groups]
    return matches[0]


# ------------------------------------------------------------------------------------------- grouping

def test_find_runs_lists_finished_and_failed(sweep):
    runs = find_runs([sweep["root"]])
    assert len(runs) == 7
    assert sum(r.ok for r in runs) == 6
    # a run dir given twice (directly and through its parent) is found once
    assert len(find_runs([sweep["root"], next(sweep["root"].rglob("0_simcse*"))])) == 7


def test_groups_pool_seeds_only(sweep):
    report = collect([sweep["root"]])
    assert len(report.groups) == 3
    base = _group(report, "simcse")
    assert base.n == 3 and base.seeds == [1, 2, 3]
    longer = _group(report, "simcse", "trainer.max_steps=100")
    assert longer.n == 2 and longer.seeds == [1, 2]
    assert _group(report, "promptbert").n == 1
    # seed, hydra.* and the method/backbone group choices never enter the key
    key = dict(group_key(base.runs[0]))
    assert key == {"method.name": "simcse", "backbone.name": "bert_base", "setting.name": "unsup"}


def test_mean_and_sample_std_match_numpy(sweep):
    report = collect([sweep["root"]])
    base = _group(report, "simcse")
    for col in SCORE_KEYS:
        values = [s[col] for s in sweep["runs"]["simcse"]]
        assert base.stat(col).n == 3
        assert base.stat(col).mean == pytest.approx(np.mean(values), abs=1e-12)
        assert base.stat(col).std == pytest.approx(np.std(values, ddof=1), abs=1e-12)
    assert base.stat("dev").mean == pytest.approx(80.0)
    single = _group(report, "promptbert")
    assert single.stat("avg").std is None       # no std for one seed


def test_paper_number_and_difference(sweep):
    report = collect([sweep["root"]])
    base = _group(report, "simcse")
    assert base.published is not None and base.variant is None
    assert base.paper("avg") == 76.25 and base.paper("sts12") == 68.40
    mean_avg = np.mean([s["avg"] for s in sweep["runs"]["simcse"]])
    assert base.diff("avg") == pytest.approx(mean_avg - 76.25)
    pb = _group(report, "promptbert")
    assert pb.published.source == "PromptBERT Table 6"      # the method's own paper wins over the quotes
    assert pb.paper_std("avg") == 0.15
    assert pb.diff("sts13") == pytest.approx(sweep["runs"]["promptbert"][0]["sts13"] - 84.58)


def test_failed_run_is_listed_with_log_tail(sweep):
    report = collect([sweep["root"]], log_lines=3)
    assert len(report.failed) == 1
    failed = report.failed[0]
    assert "no results.json" in failed.error
    assert failed.log_tail == {"run.log": ["line 28", "line 29", "RuntimeError: CUDA out of memory"]}
    assert _group(report, "simcse").failed == [failed]       # same configuration: counted beside the group
    md = render_markdown(report)
    # no failed.json (run.py writes one for every error it sees): still running, or killed -- not "failed"
    assert failed.status == "unfinished" and failed.error.startswith("unfinished: no results.json and no failed.json")
    assert "Unfinished runs (running or interrupted) (1)" in md and "Failed runs" not in md
    assert "CUDA out of memory" in md and "6_simcse_bert_base_unsup" in md
    assert "3 (+1 failed)" in md
    (failed.path / "failed.json").write_text(json.dumps({"error": "RuntimeError", "message": "CUDA out of memory"}))
    again = collect([sweep["root"]], log_lines=3)
    assert again.failed[0].status == "failed" and "Failed runs (1)" in render_markdown(again)


def test_unreadable_results_is_a_failed_run(tmp_path):
    run = make_run(tmp_path, "r", scores=None, overrides=["seed=1"], log=["boom"])
    (run / "results.json").write_text("{not json")
    report = collect([tmp_path])
    assert not report.groups and len(report.failed) == 1
    assert "unreadable" in report.failed[0].error


def test_avg_only_over_all_seven_tasks(tmp_path):
    make_run(tmp_path, "subset", scores={"stsb": 40.0, "avg": 40.0}, overrides=["eval.test_tasks=[stsb]"])
    full = {t: 70.0 + i for i, t in enumerate(TASKS)}       # no "avg" in the file: computed
    make_run(tmp_path, "full", scores=full, overrides=["seed=1"])
    groups = {g.label: g for g in collect([tmp_path]).groups}
    assert groups["eval.test_tasks=[stsb]"].stat("avg").mean is None
    assert groups["eval.test_tasks=[stsb]"].stat("stsb").mean == 40.0
    assert groups[""].stat("avg").mean == pytest.approx(73.0)


def test_group_by_without_overrides_uses_config_minus_seed_and_paths(tmp_path):
    rng = np.random.default_rng(1)
    for seed in (1, 2):
        cfg = _config(seed=seed, backbone__name_or_path=f"/copy{seed}/bert", data__path=f"/d{seed}")
        make_run(tmp_path, f"a{seed}", scores=_scores(75, rng), config=cfg)
    make_run(tmp_path, "b", scores=_scores(75, rng), config=_config(seed=1, loss__temperature=0.1))
    report = collect([tmp_path])
    assert sorted(g.n for g in report.groups) == [1, 2]
    assert {g.label for g in report.groups} == {"loss.temperature=0.05", "loss.temperature=0.1"}
    # --group-by: exactly the given keys
    report = collect([tmp_path], group_by=["method.name"])
    assert [g.n for g in report.groups] == [3]


def test_variant_matching_eh_and_margin(tmp_path):
    rng = np.random.default_rng(2)
    for name, margin in (("eh", 0.2), ("eh01", 0.1)):
        cfg = _config(setting="sup", loss={"name": "infonce_eh", "margin": margin})
        make_run(tmp_path, name, scores=_scores(81, rng), config=cfg, overrides=[f"loss.margin={margin}"])
    report = collect([tmp_path])
    by_variant = {g.variant: g for g in report.groups}
    assert by_variant["+EH"].paper("avg") == 81.94 and by_variant["+EH"].paper("sts14") == 81.37
    assert by_variant["+EH (m=0.1)"].paper("avg") == 81.75
    assert by_variant["+EH (m=0.1)"].paper("sts12") is None        # Table 4 reports the avg only
    md = render_markdown(report)
    assert "81.75" in md


def test_variant_of_rules():
    assert variant_of(_config()) is None
    assert variant_of(_config("cot_bert", loss={"name": "cot_infonce", "positive_negative_term": False})) == \
        "without a(i+,j-)"
    assert variant_of(_config("cot_bert", method__denoise="position")) == "position denoise"
    assert variant_of(_config("cot_bert", method__denoise="pad")) is None
    assert variant_of(_config("promptbert", method__denoise="position",
                              prompt={"name": "promptbert", "train_views": ["view1", "view1"]})) == \
        "same template (dropout)"
    assert variant_of(_config("promptbert", method__denoise="none")) == "different templates"
    assert variant_of(_config("baseline", method__pooler="avg")) == "last avg."
    old = {**_config("cot_bert"), "denoise": "position"}  # a run dir from before the keys moved under method
    del old["method"]["denoise"]
    assert variant_of(old) == "position denoise"
    assert variant_of(_config("baseline", method__pooler="mask", prompt={"name": "promptbert_manual"})) == \
        "prompt (manual)"
    assert variant_of(_config("dcpcse", backbone="roberta_base", method__mlm=False)) == \
        "w/o MLM"
    assert variant_of(_config(method__mlm={"weight": 0.1, "decay": 1.0})) == "w/ MLM"  # SimCSE's --do_mlm
    assert variant_of(_config(method__mlm=None)) is None
    assert variant_of({}) is None


# ------------------------------------------------------------------------------------------- renderers

def _main_table(md: str) -> list[str]:
    """The lines of the report's first Markdown table (header, rule, rows); the interval tables follow it."""
    lines = md.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("|"))
    return list(itertools.takewhile(lambda line: line.startswith("|"), lines[first:]))


def test_markdown_table_is_well_formed(sweep):
    md = render_markdown(collect([sweep["root"]]))
    rows = _main_table(md)
    assert rows[0].startswith("| Method | Backbone | Setting")
    for name in ("STS12", "STS13", "STS14", "STS15", "STS16", "STS-B", "SICK-R", "Avg"):
        assert f"| {name} |" in rows[0]
    widths = {len(re.findall(r"(?<!\\)\|", r)) for r in rows}
    assert len(widths) == 1 and len(rows) == 2 + 3
    assert "(76.25; " in md and "±" in md and "PromptBERT Table 6" in md
    assert "STS-B dev" not in md and "STS-B dev" in render_markdown(collect([sweep["root"]]), dev=True)


def test_latex_table_is_well_formed(sweep):
    tex = render_latex(collect([sweep["root"]]))
    lines = tex.splitlines()
    assert lines.count("\\begin{tabular}{lllll" + "c" * 8 + "l}") == 1 and "\\end{tabular}" in lines
    body = lines[lines.index("\\midrule") + 1: lines.index("\\bottomrule")]
    header = lines[lines.index("\\toprule") + 1]
    n_cols = 5 + 8 + 1
    assert len(body) == 3
    for row in [header, *body]:
        assert row.endswith("\\\\") and row.count(" & ") == n_cols - 1
    assert "bert\\_base" in tex and "$\\pm$" in tex and "% UNFINISHED:" in tex
    assert tex.count("{") == tex.count("}")


def test_csv_parses_and_carries_the_numbers(sweep):
    report = collect([sweep["root"]])
    rows = list(csv.DictReader(io.StringIO(render_csv(report))))
    assert [r["status"] for r in rows].count("ok") == 3 and [r["status"] for r in rows].count("unfinished") == 1
    base = next(r for r in rows if r["status"] == "ok" and r["method"] == "simcse" and not r["label"])
    values = [s["avg"] for s in sweep["runs"]["simcse"]]
    assert float(base["avg_mean"]) == pytest.approx(np.mean(values))
    assert float(base["avg_std"]) == pytest.approx(np.std(values, ddof=1))
    assert int(base["avg_n"]) == 3 and base["seeds"] == "1 2 3" and base["n_failed"] == "1"
    assert float(base["avg_paper"]) == 76.25
    assert float(base["avg_diff"]) == pytest.approx(np.mean(values) - 76.25)
    failed = next(r for r in rows if r["status"] == "unfinished")
    assert "CUDA out of memory" in failed["log_tail"]
    assert render(report, "csv") == render_csv(report)
    with pytest.raises(ValueError, match="unknown format"):
        render(report, "html")


# ------------------------------------------------------------------------------------------- CLI

def test_cli_formats_and_out(sweep, tmp_path, capsys):
    out = tmp_path / "report" / "table.csv"
    assert main([str(sweep["root"]), "--format", "csv", "--out", str(out)]) == 0
    assert len(list(csv.DictReader(out.open()))) == 4
    assert main([str(sweep["root"]), "--format", "latex"]) == 0
    assert "\\begin{tabular}" in capsys.readouterr().out
    assert main([str(sweep["root"]), "--group-by", "method.name"]) == 0
    md = capsys.readouterr().out
    assert len(_main_table(md)) == 2 + 2
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main([str(empty)]) == 1
    with pytest.raises(SystemExit) as exc:
        main([str(tmp_path / "missing")])
    assert exc.value.code == 2


def test_cli_wandb_offline_table_and_never_fails(sweep, monkeypatch, capsys):
    logged: dict = {}

    class FakeRun:
        def log(self, data):
            logged.update(data)

        def finish(self):
            logged["finished"] = True

    fake = types.SimpleNamespace(
        init=lambda **kw: logged.update(init=kw) or FakeRun(),
        Table=lambda columns, data, **kw: {"columns": columns, "data": data},
    )
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setitem(sys.modules, "wandb", fake)
    assert main([str(sweep["root"]), "--wandb", "proj"]) == 0
    assert logged["init"]["mode"] == "offline" and logged["init"]["project"] == "proj" and logged["finished"]
    table = logged["report/sts_table"]
    assert "avg_mean" in table["columns"] and len(table["data"]) == 4

    def broken(**kw):
        raise RuntimeError("no network")

    monkeypatch.setitem(sys.modules, "wandb", types.SimpleNamespace(init=broken, Table=None))
    capsys.readouterr()
    assert main([str(sweep["root"]), "--wandb"]) == 0
    captured = capsys.readouterr()
    assert "| Method |" in captured.out and "could not log the table to W&B" in captured.err


# ------------------------------------------------------------------------------------------- published data

@pytest.fixture(scope="module")
def published():
    return load_published()


def test_published_loads_with_sources_and_plausible_scores(published):
    assert len(published) > 100
    for row in published:
        assert row.source_paper in {"promptbert", "cot-bert", "dcpcse", "promcse", "prompteol", "pretcot", "sncse"}
        assert row.source_table
        assert row.backbone in BACKBONES and row.setting in SETTINGS
        numbers = [v for v in row.scores.values() if v is not None] + list(row.dev.values())
        assert numbers and all(0 <= v <= 100 for v in numbers)
        assert all(30 <= v for v in numbers), row      # nothing below BERT-last-avg territory


def test_published_avg_equals_task_mean_unless_erratum(published):
    for row in published:
        mismatch = avg_mismatch(row)
        if mismatch is not None and abs(mismatch) > 0.011:
            assert row.erratum, f"{row.key} {row.source}: avg off by {mismatch:.3f} without an erratum"
    promcse_sup = lookup(published, "promcse", "bert_base", "sup")
    assert promcse_sup.scores["avg"] == 81.81 and "81.66" in promcse_sup.erratum


@pytest.mark.parametrize(("method", "backbone", "setting", "variant", "avg"), [
    ("promptbert", "bert_base", "unsup", None, 78.54),
    ("promptbert", "roberta_base", "unsup", None, 79.15),
    ("cot_bert", "roberta_base", "unsup", None, 80.62),
    ("cot_bert", "bert_base", "unsup", None, 79.40),
    ("simcse", "bert_base", "unsup", None, 76.25),
    ("simcse", "bert_base", "sup", None, 81.57),
    ("simcse", "roberta_base", "sup", None, 82.52),
    ("dcpcse", "roberta_base", "sup", None, 82.94),
    ("dcpcse", "bert_base", "unsup", None, 78.49),
    ("promcse", "bert_base", "sup", "+EH", 82.13),
    ("promcse", "roberta_base", "sup", "+EH", 83.26),
    ("promptbert", "bert_base", "sup", None, 81.97),
])
def test_published_headline_numbers(published, method, backbone, setting, variant, avg):
    """The papers' headline table (avg of the 7 tasks)."""
    assert lookup(published, method, backbone, setting, variant).scores["avg"] == avg


def test_published_lookup_preference_and_miss(published):
    assert lookup(published, "cot_bert", "bert_base", "unsup").source == "CoT-BERT Table 2"
    assert lookup(published, "promcse", "bert_base", "unsup").source_paper == "promcse"
    assert lookup(published, "promcse", "bert_base", "unsup", paper="cot-bert").source_paper == "cot-bert"
    # the fullest row wins within a paper (Table 1 "+EH" over Table 4's avg-only m = 0.2)
    assert lookup(published, "simcse", "bert_base", "sup", "+EH").source == "PromCSE Table 1"
    assert lookup(published, "simcse", "minilm_l6", "unsup") is None


@pytest.mark.skipif(not PAPERS_DIR.is_dir(), reason="paper texts not available")
def test_published_numbers_appear_in_the_paper_texts(published):
    """Every printed number is in its paper's text (PromptBERT's in both extractions); full rows in order."""
    def numbers(text: str) -> list[str]:
        text = re.sub(r"±\s*\d+\.\d+|<[^>]+>", " ", text)
        return re.findall(r"(?<![\d.])\d+\.\d+(?![\d.])", text)

    texts = {p: [(PAPERS_DIR / f"{p}.txt").read_text()] for p in ("promptbert", "cot-bert", "dcpcse", "promcse")}
    texts["promptbert"].append((PAPERS_DIR / "promptbert.alt-extraction.txt").read_text())
    tokens = {p: [numbers(t) for t in ts] for p, ts in texts.items()}
    for row in published:
        if row.derived or row.source_paper not in texts:  # decoder-LLM rows: the next two tests
            continue
        for toks in tokens[row.source_paper]:
            if None not in row.scores.values():
                values = [f"{row.scores[k]:.2f}" for k in SCORE_KEYS]
                assert any(toks[i:i + 8] == values for i in range(len(toks) - 7)), (row.key, row.source)
            else:
                wanted = [f"{v:.2f}" for v in [*row.scores.values(), *row.dev.values()] if v is not None]
                assert all(w in toks for w in wanted), (row.key, row.source)
        for col, std in row.std.items():
            pattern = rf"{row.scores[col]:.2f}\s*±\s*{std:.2f}"
            assert any(re.search(pattern, t) for t in texts[row.source_paper]), (row.key, col)


PROMPTEOL_MIRROR = Path("/work/.mirror/kongds+scaling_sentemb/repo")


@pytest.mark.skipif(not PROMPTEOL_MIRROR.is_dir(), reason="no local mirror of kongds/scaling_sentemb")
def test_prompteol_rows_are_the_official_readme_rows(published):
    """Each PromptEOL row is, in order, the 8 numbers of its README table row at the lines its source names."""
    import subprocess

    readme = subprocess.run(["git", "-C", str(PROMPTEOL_MIRROR), "show", "8567aa0:README.md"], capture_output=True,
                            text=True, check=True).stdout.splitlines()
    rows = [r for r in published if r.source_paper == "prompteol"]
    assert len(rows) == 15
    for row in rows:
        start, end = map(int, re.search(r"README\.md:(\d+)-(\d+)", row.source_table).groups())
        cells = re.findall(r"<td[^>]*>([\d.]+)</td>", "\n".join(readme[start - 1:end]))
        assert cells == [f"{row.scores[k]:.2f}" for k in SCORE_KEYS], (row.key, row.source)


def test_decoder_rows_cover_opt_and_llama_with_and_without_fine_tuning(published):
    direct_icl = {r.backbone for r in published if r.variant == "no fine-tuning: prompteol_icl"}
    tuned = {r.backbone for r in published if r.method == "prompteol" and r.variant is None}
    assert direct_icl == {"opt_125m", "opt_350m", "opt_1_3b", "opt_2_7b", "opt_6_7b", "opt_13b", "opt_30b", "opt_66b"}
    assert tuned == {"opt_1_3b", "opt_2_7b", "opt_6_7b", "opt_13b", "llama_7b", "llama_13b", "llama_30b"}
    pretcot = lookup(published, "prompteol", "llama2_7b", "sup", "no fine-tuning: pretcot")
    assert pretcot.scores["avg"] == 76.86 and "second-hand" in pretcot.note
    assert lookup(published, "prompteol", "opt_2_7b", "sup").scores["avg"] == 85.62


@pytest.mark.parametrize(("config", "variant"), [
    ({"method": {"name": "prompteol", "train": False}, "prompt": {"name": "prompteol_icl"}},
     "no fine-tuning: prompteol_icl"),
    ({"method": {"name": "prompteol", "train": False}, "prompt": {"name": "knowledge"}}, "no fine-tuning: knowledge"),
    ({"method": {"name": "prompteol", "train": True}, "prompt": {"name": "prompteol"}}, None),
    ({"method": {"name": "prompteol", "train": True}, "prompt": {"name": "promptsth"}}, "template: promptsth"),
])
def test_variant_of_decoder_runs(config, variant):
    assert variant_of(config) == variant


def _write_entries(tmp_path: Path, entries: list[dict]) -> Path:
    path = tmp_path / "published.yaml"
    path.write_text(yaml.safe_dump({"version": 1, "entries": entries}))
    return path


def _entry(**changes) -> dict:
    entry = {"method": "simcse", "backbone": "bert_base", "setting": "unsup", "variant": None,
             "scores": {k: 70.0 for k in SCORE_KEYS}, "source": {"paper": "promcse", "table": "Table 1"}}
    entry.update(changes)
    return entry


@pytest.mark.parametrize(("changes", "message"), [
    ({"scores": {**{k: 70.0 for k in SCORE_KEYS}, "sts12": 123.0}}, r"scores\.sts12.*outside"),
    ({"scores": {"avg": 70.0}}, "needs exactly the keys"),
    ({"backbone": "bert_huge"}, "backbone='bert_huge'"),
    ({"setting": "semi"}, "setting='semi'"),
    ({"source": {"paper": "simcse", "table": "Table 1"}}, "source.paper"),
    ({"source": {"paper": "promcse"}}, "source"),
    ({"scores": {k: None for k in SCORE_KEYS}}, "no number"),
    ({"std": {"avg": -1.0}}, r"std\.avg"),
    ({"colour": "red"}, "unknown key"),
])
def test_published_validation_errors_name_the_key(tmp_path, changes, message):
    with pytest.raises(PublishedDataError, match=message) as exc:
        load_published(_write_entries(tmp_path, [_entry(), _entry(variant="x", **changes)]))
    assert "entry #1" in str(exc.value)


def test_published_validation_duplicates_and_missing(tmp_path):
    with pytest.raises(PublishedDataError, match="twice"):
        load_published(_write_entries(tmp_path, [_entry(), _entry()]))
    entry = _entry()
    del entry["source"]
    with pytest.raises(PublishedDataError, match="missing key"):
        load_published(_write_entries(tmp_path, [entry]))
    (tmp_path / "bad.yaml").write_text("entries: {")
    with pytest.raises(PublishedDataError, match="not valid YAML"):
        load_published(tmp_path / "bad.yaml")


def test_tasks_match_the_evaluator():
    from cselab.evaluation.sts import TEST_TASKS

    assert TASKS == TEST_TASKS


def test_paper_backbone_compares_stand_in_runs(tmp_path):
    rng = np.random.default_rng(0)
    for seed in (1, 2):
        make_run(tmp_path, f"{seed}_simcse", scores=_scores(75.0, rng), overrides=[f"seed={seed}"],
                 config=_config(backbone="minilm_l6", seed=seed))
    assert collect([tmp_path]).groups[0].published is None  # no paper row for the stand-in
    group = collect([tmp_path], paper_backbone="bert_base").groups[0]
    assert group.paper("avg") == 76.25 and "[paper row: bert_base]" in group.label


def test_failed_json_message_is_reported(tmp_path):
    run = make_run(tmp_path, "0_cot_bert", scores=None, overrides=["method=cot_bert"], config=_config("cot_bert"))
    (run / "failed.json").write_text(json.dumps({"error": "ValueError", "message": "unsupervised only"}))
    failed = collect([tmp_path]).failed
    assert len(failed) == 1 and failed[0].error == "failed: ValueError: unsupervised only"


def test_output_only_overrides_do_not_split_groups():
    from cselab.report.collect import IGNORED_OVERRIDE_KEYS, IGNORED_PREFIXES

    assert "trainer.enable_progress_bar" in IGNORED_OVERRIDE_KEYS and "ckpt_path" in IGNORED_OVERRIDE_KEYS
    assert "trainer.max_steps" not in IGNORED_OVERRIDE_KEYS
    assert not any("trainer.max_steps".startswith(p) for p in IGNORED_PREFIXES)
    assert any("compile.enabled".startswith(p) for p in IGNORED_PREFIXES)
