"""Record (or compare) every table cselab prints or writes, on fixed inputs: a refactor of the table code
(``cselab.io.tables`` and its users) must leave every string byte-identical.

The inputs are the tests' own fixtures (``tests/test_report.py``, ``tests/test_report_intervals.py``,
``tests/test_hub_card.py``): the report in Markdown / LaTeX / CSV (paper notes, failed and unfinished runs, ``|``
and LaTeX specials in a label, the STS-B dev column), its intervals and paired comparisons, ``cselab report`` and
``cselab compare`` (stdout, stderr, exit status, ``--comparisons-csv``), the transfer tables, the console tables
(``format_table`` with intervals, ``format_transfer_table``, a run's ``print_results``) and the model card.

    python scripts/table_snapshot.py --out before.json
    python scripts/table_snapshot.py --out after.json --compare before.json   # names every table that changed
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
import types
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests")]

import test_hub_card as hc  # noqa: E402
import test_report as tr  # noqa: E402
import test_report_intervals as ti  # noqa: E402

from cselab.cli.compare import main as compare_main  # noqa: E402
from cselab.cli.report import main as report_main  # noqa: E402
from cselab.data.transfer import TRANSFER_TASKS  # noqa: E402
from cselab.evaluation.sts import TEST_TASKS, format_table  # noqa: E402
from cselab.evaluation.transfer import format_transfer_table  # noqa: E402
from cselab.export.model_card import sts_table  # noqa: E402
from cselab.report import render as R  # noqa: E402
from cselab.report.collect import collect  # noqa: E402
from cselab.report.compare import (  # noqa: E402
    compare_groups,
    compare_runs,
    render_comparison,
)
from cselab.report.published import load_published, lookup  # noqa: E402
from cselab.report.transfer import render_transfer_tables, transfer_rows_of_runs  # noqa: E402
from cselab.run import results as RR  # noqa: E402


def _scrub(value, tmp: str):
    """The temporary folder's path replaced by ``TMP`` (in strings, and in the CLI records)."""
    if isinstance(value, dict):
        return {k: _scrub(v, tmp) for k, v in value.items()}
    return value.replace(tmp, "TMP") if isinstance(value, str) else value


def snapshot(tmp: Path) -> dict:
    """Every table, by name."""
    snap = {}

    def cli(fn, argv, key):
        o, e = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(o), contextlib.redirect_stderr(e):
            rc = fn(argv)
        snap[key] = {"rc": rc, "out": o.getvalue(), "err": e.getvalue()}

    # 1. the sweep fixture (+ a derived-note row, a '|' and LaTeX specials in overrides, an unfinished run)
    rng = np.random.default_rng(0)
    root = tmp / "sweep" / "multirun"
    root.mkdir(parents=True)
    (root / "multirun.yaml").write_text("hydra: {}\n")
    for i, seed in enumerate([1, 2, 3]):
        tr.make_run(root, f"{i}_simcse", scores=tr._scores(76, rng), config=tr._config(seed=seed),
                    overrides=["method=simcse", "backbone=bert_base", f"seed={seed}", "hydra.verbose=true"])
    for i, seed in enumerate([1, 2]):
        tr.make_run(root, f"{3+i}_simcse", scores=tr._scores(70, rng), config=tr._config(seed=seed),
                    overrides=["method=simcse", "backbone=bert_base", f"seed={seed}", "trainer.max_steps=100"])
    tr.make_run(root, "5_pb", scores=tr._scores(78, rng), config=tr._config("promptbert", seed=1, method__denoise="position"),
                overrides=["method=promptbert", "backbone=bert_base", "seed=1"])
    tr.make_run(root, "6_failed", scores=None, config=tr._config(seed=4), overrides=["method=simcse", "backbone=bert_base", "seed=4"],
                log=[f"line {k}" for k in range(30)] + ["RuntimeError: CUDA out of memory"])
    tr.make_run(root, "7_dcp", scores=tr._scores(75, rng), config=tr._config("dcpcse", seed=1),
                overrides=["method=dcpcse", "backbone=bert_base", "seed=1"])
    partial = {"stsb": 77.123, "sts12": 65.5}
    tr.make_run(root, "8_odd", scores=partial, config=tr._config("simcse", seed=1),
                overrides=["method=simcse", "seed=1", "+note=a|b_c%&$#{x}~^"])
    (root / "9_unfinished" / ".hydra").mkdir(parents=True)
    (root / "9_unfinished" / ".hydra" / "overrides.yaml").write_text("- method=simcse\n- seed=9\n")
    (root / "9_unfinished" / "run.log").write_text("starting\n")
    rep = collect([root])
    for dev in (False, True):
        snap[f"md dev={dev}"] = R.render_markdown(rep, dev=dev)
        snap[f"latex dev={dev}"] = R.render_latex(rep, dev=dev)
    snap["csv"] = R.render_csv(rep)
    for fmt in ("markdown", "latex", "csv"):
        cli(report_main, [str(root), "--format", fmt], f"cli report {fmt}")
    cli(report_main, [str(root), "--dev", "--group-by", "method.name,backbone.name"], "cli report groupby")
    (tmp / "nothing").mkdir()
    empty = collect([tmp / "nothing"])
    snap["md empty"] = R.render_markdown(empty)

    # 2. intervals, comparisons
    gold = ti._gold()
    two = tmp / "two"
    two.mkdir()
    for i, seed in enumerate((0, 1, 2)):
        ti.make_run(two, f"{i}_a", "simcse", seed, 0.4, gold)
        ti.make_run(two, f"{3+i}_b", "promptbert", seed, 1.5, gold)
    rep2 = collect([two], published=[])
    cmps = compare_groups(rep2.groups, n_resamples=200)
    snap["md intervals"] = R.render_markdown(rep2, comparisons=cmps)
    snap["csv intervals"] = R.render_csv(rep2)
    cli(report_main, [str(two), "--n-resamples", "200", "--comparisons-csv", str(tmp / "cmp.csv")], "cli report cmp")
    snap["cmp.csv"] = (tmp / "cmp.csv").read_bytes().decode()
    cli(report_main, [str(two), "--n-resamples", "200", "--format", "csv", "--comparisons-csv", str(tmp / "cmp2.csv")],
        "cli report cmp csv")
    snap["cmp2.csv"] = (tmp / "cmp2.csv").read_bytes().decode()
    three = tmp / "three"
    three.mkdir()
    ti.make_run(three, "a0", "simcse", 0, 0.4, gold)
    ti.make_run(three, "a1", "simcse", 1, 0.4, gold)
    ti.make_run(three, "b0", "promptbert", 0, 0.4, gold)
    ti.make_run(three, "c0", "promcse", 5, 0.4, gold)
    rep3 = collect([three], published=[])
    snap["md 2-1 seeds"] = R.render_markdown(rep3, comparisons=compare_groups(rep3.groups, "all", n_resamples=200))
    paper = tmp / "paper"
    paper.mkdir()
    for seed in (0, 1, 2):
        ti.make_run(paper, f"s{seed}", "simcse", seed, 0.4 + 0.05 * seed, gold)
    ti.make_run(paper, "p0", "promptbert", 0, 0.3, gold)
    snap["md paper"] = R.render_markdown(collect([paper]))
    snap["csv paper"] = R.render_csv(collect([paper]))
    snap["latex paper"] = R.render_latex(collect([paper]), dev=True)
    sub = tmp / "sub"
    sub.mkdir()
    for seed in (0, 1):
        run = ti.make_run(sub, f"a{seed}", "simcse", seed, 0.4, gold)
        res = json.loads((run / "results.json").read_text())
        res["test"], res["test_ci"] = {"stsb": res["test"]["stsb"]}, {"stsb": res["test_ci"]["stsb"]}
        (run / "results.json").write_text(json.dumps(res))
    snap["md subset"] = R.render_markdown(collect([sub], published=[]))
    a = ti.make_run(tmp / "c", "a", "simcse", 0, 0.4, gold)
    s = ti.make_run(tmp / "c", "s", "simcse", 0, 0.4, gold, shuffle=True)
    for fmt in ("markdown", "csv"):
        cli(compare_main, [str(a), str(s), "--n-resamples", "200", "--format", fmt], f"cli compare {fmt}")
        cli(compare_main, [str(a), str(a), "--format", fmt], f"cli compare same {fmt}")
    cmp = compare_runs(a, s, n_resamples=300)
    snap["render_comparison"] = render_comparison(cmp, "A|x", "B")
    snap["render_comparison csv"] = render_comparison(cmp, "A", "B", "csv")
    try:
        render_comparison(cmp, "A", "B", "latex")
    except ValueError as e:
        snap["render_comparison bad"] = str(e)
    try:
        R.render(rep, "html")
    except ValueError as e:
        snap["render bad"] = str(e)

    # 3. transfer
    cfg = {"method": {"name": "simcse"}, "backbone": {"name": "bert_base"}, "setting": {"name": "unsup"},
           "loss": {"name": "infonce"}}
    acc = {t: {"acc": 80.0 + i, "devacc": 80.0} for i, t in enumerate(TRANSFER_TASKS)}
    results = [(f"run{k}", {"config": cfg, "transfer": acc, "transfer_protocol": {"mode": "test"}}) for k in range(2)]
    other = {"config": {**cfg, "backbone": {"name": "minilm_l6"}},
             "transfer": {"mr": {"acc": 70.0}, "cr": {"acc": float("nan")}}}
    pc = {"config": {**cfg, "method": {"name": "promcse"}}, "transfer": acc, "transfer_protocol": {"mode": "fasttest"}}
    snap["transfer"] = render_transfer_tables(transfer_rows_of_runs([*results, ("x", other), ("y", pc)]))
    snap["transfer none"] = render_transfer_tables([])
    tdir = tmp / "tr" / "run"
    tdir.mkdir(parents=True)
    test = {t: 70.0 for t in TEST_TASKS}
    (tdir / "results.json").write_text(json.dumps({
        "test": {**test, "avg": 70.0}, "dev": {"stsb": 80.0}, "config": {**cfg, "method": {"name": "promcse"}, "seed": 1},
        "transfer": {"mr": {"acc": 79.5, "devacc": 80.0}}, "transfer_protocol": {"mode": "fasttest"}}))
    cli(report_main, [str(tmp / "tr")], "cli report transfer")

    # 4. console tables
    sc = {t: 70.0 + i for i, t in enumerate(TEST_TASKS)}
    snap["ft full"] = format_table(sc)
    snap["ft avg"] = format_table({**sc, "avg": 73.456})
    snap["ft partial"] = format_table({"STS-B": 80.0, "avg": 80.0})
    snap["ft one"] = format_table({"sts12": 5.0})
    snap["ft neg"] = format_table({"sts12": -5.0, "SICK-R": -100.0, "unknown": 3})
    ci = {t: [v - 11.5, v + 1.25] for t, v in {**sc, "avg": 73.0}.items()}
    snap["ft ci"] = format_table({**sc, "avg": 73.0}, ci)
    snap["ft ci neg"] = format_table({"sts12": -5.0, "stsb": 1.0},
                                     {"sts12": [-12.3, 1.0], "STS-B": [0.5, 2.0], "avg": [1, 2]})
    snap["tt full"] = format_transfer_table({**acc, "avg": 83.0})
    snap["tt partial"] = format_transfer_table({"mr": {"acc": 70.0}, "trec": {"acc": 100.0}}, ["mr", "trec"])
    snap["tt bad"] = format_transfer_table({"mr": 5, "cr": {"acc": None}})

    # 5. run printing
    names = types.SimpleNamespace(method="simcse", name_or_path="/models/x", setting="unsup")
    info = {"level": 0.95, "method": "bootstrap percentile", "n_resamples": 200, "resampled": "test pairs", "seed": 0}
    res = {"test": {**sc, "avg": 73.0}, "test_ci": ci, "test_ci_info": info, "trainable_parameters": 12345,
           "dev_encoder": "test", "dev": {"stsb": 81.2}}
    o = io.StringIO()
    with contextlib.redirect_stdout(o):
        RR.print_results(names, True, res, Path("out/results.json"))
        RR.print_results(names, False, {k: v for k, v in res.items() if k not in ("test_ci", "test_ci_info")},
                         Path("r.json"))
    snap["print_results"] = o.getvalue()

    # 6. the model card
    pub = load_published()
    row = lookup(pub, "simcse", "bert_base", "unsup", None)
    snap["card"] = sts_table({**sc, "avg": 73.0}, row)
    snap["card noavg"] = sts_table(sc, row)
    snap["card partial"] = sts_table({"stsb": 1.0})
    snap["model_card"] = hc._card()
    hparams = {"model": {"pooler": "mask"}, "optim": {"lr": 1e-5}, "loss": {"name": "infonce", "temperature": 0.05}}
    snap["model_card hparams"] = hc._card(results=None, trust_remote_code=False, repo_id=None, hparams=hparams)
    odd = {**hc.CONFIG, "prompt": {"template": "a|b `x`"}}
    snap["model_card odd"] = hc._card(results={"config": odd, "test": {"stsb": 3.0}})
    return snap


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="write the tables here (JSON)")
    parser.add_argument("--compare", type=Path, default=None, help="a snapshot to compare with")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        snap = _scrub(snapshot(Path(tmp)), tmp)
    args.out.write_text(json.dumps(snap, indent=1, ensure_ascii=False), encoding="utf-8")
    print(f"{len(snap)} tables -> {args.out}")
    if args.compare is None:
        return 0
    old = json.loads(args.compare.read_text(encoding="utf-8"))
    changed = sorted(k for k in old.keys() | snap.keys() if old.get(k) != snap.get(k))
    for key in changed:
        print(f"changed: {key}")
    print(f"{len(snap) - len(changed)} of {len(snap)} tables byte-identical")
    return 1 if changed else 0


if __name__ == "__main__":
    raise SystemExit(main())
