"""The papers' figures from the runs (``cselab report DIR... --figures OUT``), each with its data beside it.

Four kinds of figure, drawn with matplotlib's Agg canvas (no display, no pyplot state) as PNG and SVG:

1. ``dev_curve_<n>_<row>``: a row's STS-B dev curve (``results.json``'s ``val_curve``): every seed's curve, its
   selected checkpoint marked (the step of ``best_checkpoint``, ``best-step<N>.ckpt``; else the curve's best), and
   the seeds pooled at the steps they share (mean and a band of ± one sample std, ddof=1 as the report's ±).
2. ``sweep_<key>_<score>``: a sweep (DCPCSE / PromCSE Fig. 2): the swept key on x (``--figures-x``, else the
   first override that varies across rows with numeric values, e.g. ``tuning.pre_seq_len``), the row's score on
   y (Avg when every row has the 7 tasks, else STS-B test) with the t-interval over seeds (n >= 2), and one line
   per value of the other keys that vary (e.g. the method).  The papers' numbers (``published.yaml``): a row
   matched at one x is a marker there (DCPCSE / PromCSE Fig. 2's "prompt length 1"); a row matched at several x
   is the paper's recipe, whose number does not depend on x (its own prompt length), drawn as a dashed line.
3. ``test_scores``: per test task (and Avg), each row's mean over seeds as a bar, rows side by side, and every
   run's score with its 95 % bootstrap interval over the test pairs (``results.json``'s ``test_ci``).
4. ``align_uniform``: SimCSE Fig. 2, the ℓ_align - ℓ_uniform trajectory (x: ℓ_uniform, y: ℓ_align, an arrow per
   step) of every run that logged it (:class:`cselab.callbacks.align_uniform.AlignUniform`, the run's
   ``csv/metrics.csv``).

Each figure is written as ``<stem>.png``, ``<stem>.svg`` and ``<stem>.json``: the plotted series exactly (the
numbers each artist draws), so that a test or a user reads back what the figure shows.  :func:`write_figures`
returns them; :mod:`cselab.report.page` puts them on the report's HTML page.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from cselab.report.collect import BASE_KEYS, Group, Report, Run, finite, json_key
from cselab.report.published import COLUMN_NAMES, SCORE_KEYS
from cselab.report.render import group_title

#: the image formats written for every figure
IMAGE_FORMATS: tuple[str, ...] = ("png", "svg")
#: where a run's CSV logger writes (:func:`cselab.run.loggers.resumable_csv_logger`)
METRICS_CSV = Path("csv") / "metrics.csv"
_BEST_STEP = re.compile(r"best-step(\d+)")


@dataclass
class FigureSpec:
    """One figure to write: the matplotlib figure, its data (the plotted series, written as JSON) and its text.

    Attributes:
        stem: the file name without extension (letters, digits, ``._-``).
        title: the figure's title (the page's heading).
        caption: what is drawn (the page's caption).
        figure: a ``matplotlib.figure.Figure`` on an Agg canvas.
        data: ``{"kind", "title", "x_label", "y_label", "series": [...]}`` (every list the artists draw).
    """

    stem: str
    title: str
    caption: str
    figure: Any
    data: dict[str, Any]


@dataclass(frozen=True)
class WrittenFigure:
    """A figure on disk: ``files`` are paths relative to the output directory (``<stem>.png|svg|json``)."""

    stem: str
    title: str
    caption: str
    files: tuple[str, ...] = field(default_factory=tuple)

    @property
    def image(self) -> str:
        """The PNG's relative path (the page's ``<img>``)."""
        return f"{self.stem}.png"


# ------------------------------------------------------------------------------------------- helpers

def _figure(width: float = 6.4, height: float = 4.2):
    """``(figure, axes)``: a matplotlib Figure on an Agg canvas (no pyplot, no display) and its one subplot."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot()


def slug(text: str, limit: int = 100) -> str:
    """``text`` as a file-name piece: runs of characters other than letters, digits, ``.``, ``_`` and ``-`` become
    ``_`` (a name ``python -m http.server`` serves as it is), at most ``limit`` characters."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_.")[:limit] or "row"


def selected_step(run: Run) -> int | None:
    """The step of the checkpoint a run tested: ``best-step<N>`` in ``results.json``'s ``best_checkpoint``, else
    the step of the best ``val_curve`` point (``None`` without a curve)."""
    match = _BEST_STEP.search(str((run.results or {}).get("best_checkpoint") or ""))
    if match:
        return int(match.group(1))
    curve = dev_curve(run)
    return max(curve, key=lambda p: p[1])[0] if curve else None


def dev_curve(run: Run) -> list[tuple[int, float]]:
    """A run's ``val_curve`` as ``[(step, STS-B dev Spearman x 100)]`` (points without a finite score left out)."""
    curve = (run.results or {}).get("val_curve") or []
    return [(p["step"], score) for p in curve
            if isinstance(p.get("step"), int) and (score := finite(p.get("stsb_dev"))) is not None]


def align_uniform_trajectory(run_dir: Path) -> list[dict[str, float]]:
    """The ℓ_align / ℓ_uniform points a run logged (:class:`cselab.callbacks.align_uniform.AlignUniform`) from its
    ``csv/metrics.csv``: ``[{"step", "alignment", "uniformity"}]`` by step (a step logged twice, by a resumed
    run, keeps its last row); ``[]`` when the run logged none."""
    from cselab.callbacks.align_uniform import ALIGNMENT_METRIC, UNIFORMITY_METRIC

    path = Path(run_dir) / METRICS_CSV
    if not path.is_file():
        return []
    by_step: dict[int, dict[str, float]] = {}
    with open(path, newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            a, u, step = row.get(ALIGNMENT_METRIC), row.get(UNIFORMITY_METRIC), row.get("step")
            if a in (None, "") or u in (None, "") or step in (None, ""):
                continue
            s = int(float(step))
            by_step[s] = {"step": s, "alignment": float(a), "uniformity": float(u)}
    return [by_step[s] for s in sorted(by_step)]


def row_names(groups: Sequence[Group]) -> dict[int, str]:
    """A short name per row (by ``id``): ``method/backbone/setting``, the published variant, and only the keys
    whose value differs between the rows (a sweep's ``tuning.pre_seq_len=4``), not the overrides they share
    (:func:`cselab.report.render.group_title` keeps them all; the figures' data records it as ``row``)."""
    varying = swept_keys(groups)
    names = {}
    for g in groups:
        kv = _key_values(g)
        parts = [f"{k}={kv[k]}" for k in varying if k in kv and k not in BASE_KEYS]
        if g.variant:
            parts.insert(0, g.variant)
        names[id(g)] = f"{g.method}/{g.backbone}/{g.setting}" + (f" ({'; '.join(parts)})" if parts else "")
    return names


def _wrap(text: str, width: int = 70) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(text, width)) or text


def _seed_label(run: Run) -> str:
    return f"seed {run.seed}" if run.seed is not None else run.path.name


# ------------------------------------------------------------------------------------------- 1. dev curves

def dev_curve_figure(group: Group, index: int = 0, name: str | None = None) -> FigureSpec | None:
    """Figure 1 for one row: every seed's STS-B dev curve, its selected checkpoint, the seeds' mean and band
    (module docstring); ``None`` when no run of the row has a curve (a run that trained nothing).  ``name``: the
    row's short name (:func:`row_names`; default its whole title)."""
    runs = [(r, c) for r in group.runs if (c := dev_curve(r))]
    if not runs:
        return None
    fig, ax = _figure()
    series: list[dict[str, Any]] = []
    for run, curve in runs:
        steps, scores = [p[0] for p in curve], [p[1] for p in curve]
        label = _seed_label(run)
        ax.plot(steps, scores, lw=0.9, alpha=0.6, marker=".", label=label, gid=f"seed:{run.seed}")
        series.append({"label": label, "kind": "seed", "run": str(run.path), "x": steps, "y": scores})
        step = selected_step(run)
        score = dict(curve).get(step) if step is not None else None
        if score is not None:
            ax.plot([step], [score], marker="*", ms=12, ls="none", color="black",
                    label="selected checkpoint" if not any(s["kind"] == "selected" for s in series) else None,
                    gid=f"selected:{run.seed}")
            series.append({"label": f"{label} selected", "kind": "selected", "run": str(run.path),
                           "x": [step], "y": [score]})
    if len(runs) > 1:
        shared = sorted(set.intersection(*(set(dict(c)) for _, c in runs)))
        if shared:
            import numpy as np

            values = np.array([[dict(c)[s] for s in shared] for _, c in runs])
            mean, std = values.mean(axis=0), values.std(axis=0, ddof=1)
            ax.plot(shared, mean, lw=2.2, color="C3", label=f"mean over {len(runs)} seeds", gid="mean")
            ax.fill_between(shared, mean - std, mean + std, color="C3", alpha=0.2, label="± 1 std", gid="band")
            series.append({"label": "mean", "kind": "mean", "x": shared, "y": mean.tolist()})
            series.append({"label": "band", "kind": "band", "x": shared, "low": (mean - std).tolist(),
                           "high": (mean + std).tolist()})
    title = name or group_title(group)
    ax.set(xlabel="training step", ylabel="STS-B dev Spearman × 100", title=_wrap(f"STS-B dev: {title}"))
    ax.title.set_fontsize(9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    data = {"kind": "dev_curve", "title": title, "row": group_title(group), "x_label": "training step",
            "y_label": "STS-B dev Spearman x 100", "series": series}
    return FigureSpec(f"dev_curve_{index:02d}_{slug(title)}", f"STS-B dev curve: {title}",
                      "Every seed's STS-B dev Spearman at each validation; ★ the checkpoint tested "
                      "(best_checkpoint); with several seeds, their mean and ± 1 sample std at the shared steps.",
                      fig, data)


# ------------------------------------------------------------------------------------------- 2. sweeps

def _key_values(group: Group) -> dict[str, Any]:
    """A row's grouping key as ``{name: value}`` (``override:`` / ``config:`` prefixes dropped; values parsed as
    YAML, so ``"4"`` is 4)."""
    out = {}
    for name, value in group.key:
        name = name.split(":", 1)[1] if name.startswith(("override:", "config:")) else name
        if isinstance(value, str):
            try:
                value = yaml.safe_load(value)
            except yaml.YAMLError:
                pass
        out[name] = value
    return out


def swept_keys(groups: Sequence[Group]) -> list[str]:
    """The keys whose value differs between the rows (in the grouping key's order)."""
    values = [_key_values(g) for g in groups]
    names = list(dict.fromkeys(n for v in values for n in v))
    return [n for n in names if len({json_key(v.get(n)) for v in values}) > 1]


def sweep_x_key(groups: Sequence[Group]) -> str | None:
    """The default x of a sweep figure: the first swept key whose values are all numbers (``None`` if none)."""
    return next((name for name in swept_keys(groups)
                 if all(finite(_key_values(g).get(name)) is not None for g in groups)), None)


def score_column(groups: Sequence[Group]) -> str | None:
    """``avg`` when every row has an Avg (the 7 tasks), else ``stsb`` when every row has STS-B test, else ``None``."""
    return next((col for col in ("avg", "stsb") if groups and all(g.stat(col).mean is not None for g in groups)),
                None)


def sweep_figure(groups: Sequence[Group], x_key: str | None = None, col: str | None = None) -> FigureSpec | None:
    """Figure 2 (module docstring); ``None`` when the rows vary in no numeric key (or ``x_key`` is absent), or
    have no common score column.

    Args:
        groups: the report's rows; those without ``x_key`` are left out.
        x_key: the key on x (a dotted config key as in the row's label, e.g. ``tuning.pre_seq_len``).
        col: the score column (default :func:`score_column`).
    """
    x_key = x_key or sweep_x_key(groups)
    if x_key is None:
        return None
    rows = [g for g in groups if finite(_key_values(g).get(x_key)) is not None]
    col = col or score_column(rows)
    if len(rows) < 2 or col is None:
        return None
    others = [k for k in swept_keys(rows) if k != x_key]
    lines: dict[str, list[Group]] = {}
    for g in rows:
        kv = _key_values(g)
        name = ", ".join(f"{k}={kv.get(k)}" for k in others) or str(g.method)
        lines.setdefault(name, []).append(g)
    fig, ax = _figure()
    series: list[dict[str, Any]] = []
    paper_x, paper_y, paper_src = [], [], []
    paper_lines: dict[tuple[str, float], str] = {}
    for i, (name, members) in enumerate(lines.items()):
        members.sort(key=lambda g: finite(_key_values(g)[x_key]))
        xs = [_key_values(g)[x_key] for g in members]   # the swept values as written (int stays int)
        stats = [g.stat(col) for g in members]
        ys = [st.mean for st in stats]
        low = [st.interval.low if st.interval else None for st in stats]
        high = [st.interval.high if st.interval else None for st in stats]
        err = [[y - lo if lo is not None else 0.0 for y, lo in zip(ys, low, strict=True)],
               [hi - y if hi is not None else 0.0 for y, hi in zip(ys, high, strict=True)]]
        ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, color=f"C{i}", label=name, gid=f"line:{name}")
        series.append({"label": name, "kind": "line", "x": xs, "y": ys, "low": low, "high": high,
                       "n": [st.n for st in stats], "runs": [[str(r.path) for r in g.runs] for g in members]})
        # a published row matched at ONE x is the paper's point there (DCPCSE's "prompt length 1"); one matched at
        # several x is a recipe whose number does not depend on x (the paper's default length): a reference line
        matched: dict[int, list[Group]] = {}
        for g in members:
            if g.published is not None and g.paper(col) is not None:
                matched.setdefault(g.published.index, []).append(g)
        for same in matched.values():
            g = same[0]
            if len(same) == 1:
                paper_x.append(xs[members.index(g)])
                paper_y.append(g.paper(col))
                paper_src.append(g.published.source)
            else:
                paper_lines.setdefault((g.published.source, g.paper(col)), f"C{i}")
    if paper_x:
        ax.plot(paper_x, paper_y, ls="none", marker="D", ms=8, mfc="none", mec="black", mew=1.5, label="paper",
                gid="paper")
        series.append({"label": "paper", "kind": "paper", "x": paper_x, "y": paper_y, "source": paper_src})
    for (source, value), colour in paper_lines.items():
        label = f"paper, its recipe: {source}"
        ax.axhline(value, ls="--", lw=1, color=colour, label=label, gid=f"paper_line:{source}")
        series.append({"label": label, "kind": "paper_line", "y": value, "source": source})
    ticks = sorted({x for s in series if s["kind"] == "line" for x in s["x"]})
    if len(ticks) <= 12:
        ax.set_xticks(ticks)
    score = COLUMN_NAMES[col] + (" (7 STS tasks)" if col == "avg" else " test")
    ax.set(xlabel=x_key, ylabel=f"{score}, Spearman × 100", title=f"{score} against {x_key}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    data = {"kind": "sweep", "title": f"{score} against {x_key}", "x_key": x_key, "score": col,
            "x_label": x_key, "y_label": f"{score} Spearman x 100", "series": series}
    return FigureSpec(f"sweep_{slug(x_key)}_{col}", f"Sweep: {score} against {x_key}",
                      f"Each row's mean over seeds, with the 95 % t-interval over seeds (n ≥ 2); ◇ the paper's "
                      f"number at the x it states; dashed: a paper's number for its own recipe; one line per "
                      f"{', '.join(others) or 'method'}.", fig, data)


# ------------------------------------------------------------------------------------------- 3. test scores

def task_scores_figure(groups: Sequence[Group]) -> FigureSpec | None:
    """Figure 3 (module docstring); ``None`` without a finished row."""
    rows = [g for g in groups if g.runs]
    cols = [c for c in SCORE_KEYS if any(g.stat(c).mean is not None for g in rows)]
    if not rows or not cols:
        return None
    import numpy as np

    fig, ax = _figure(min(14.0, max(6.4, 2 + 0.45 * len(cols) * len(rows))), 4.8)
    width = 0.8 / len(rows)
    series: list[dict[str, Any]] = []
    names = row_names(rows)
    for i, g in enumerate(rows):
        title = names[id(g)]
        centre = np.arange(len(cols)) - 0.4 + width * (i + 0.5)
        means = [g.stat(c).mean for c in cols]
        ax.bar(centre, [m if m is not None else 0.0 for m in means], width=width * 0.95, color=f"C{i}", alpha=0.55,
               label=_wrap(title, 60), gid=f"bar:{title}")
        runs = []
        for j, run in enumerate(g.runs):
            offset = (j - (len(g.runs) - 1) / 2) * width / max(2, len(g.runs) + 1)
            xs, ys, lo, hi = [], [], [], []
            for k, c in enumerate(cols):
                score, ci = run.score(c), run.interval(c)
                if score is None:
                    continue
                xs.append(float(centre[k] + offset))
                ys.append(score)
                lo.append(ci[0] if ci else None)
                hi.append(ci[1] if ci else None)
            err = [[y - a if a is not None else 0.0 for y, a in zip(ys, lo, strict=True)],
                   [b - y if b is not None else 0.0 for y, b in zip(ys, hi, strict=True)]]
            ax.errorbar(xs, ys, yerr=err, ls="none", marker="o", ms=3, capsize=2, color="black", lw=0.8,
                        gid=f"runs:{title}:{run.seed}")
            runs.append({"seed": run.seed, "run": str(run.path),
                         "tasks": [c for c in cols if run.score(c) is not None], "score": ys, "low": lo, "high": hi})
        series.append({"label": title, "kind": "row", "row": group_title(g), "tasks": cols, "mean": means, "n": g.n,
                       "runs": runs})
    ax.set_xticks(range(len(cols)), [COLUMN_NAMES[c] for c in cols])
    values = [v for s in series for v in s["mean"] if v is not None]
    values += [v for s in series for r in s["runs"] for v in (*r["score"], *r["low"], *r["high"]) if v is not None]
    ax.set_ylim(max(0.0, min(values) - 5), min(100.0, max(values) + 3))
    ax.set(ylabel="Spearman × 100", title="Test scores: mean over seeds (bars), each run with its 95 % interval")
    ax.title.set_fontsize(9)
    ax.grid(axis="y", alpha=0.3)
    longest = max(len(s["label"]) for s in series)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.08),
              ncols=max(1, min(3, len(rows), int(fig.get_figwidth() * 14 // max(longest, 1)))))
    data = {"kind": "test_scores", "title": "Test scores", "x_label": "task", "y_label": "Spearman x 100",
            "series": series}
    return FigureSpec("test_scores", "Test scores per task",
                      "Bars: each row's mean over its seeds; dots: every run's score with its bootstrap interval "
                      "over the test pairs (results.json test_ci); rows side by side.", fig, data)


# ------------------------------------------------------------------------------------------- 4. align-uniform

def align_uniform_figure(groups: Sequence[Group]) -> FigureSpec | None:
    """Figure 4 (module docstring); ``None`` when no run logged the trajectory."""
    runs = [(g, r, t) for g in groups for r in g.runs if (t := align_uniform_trajectory(r.path))]
    if not runs:
        return None
    fig, ax = _figure(5.6, 4.8)
    series = []
    colours = {key: f"C{i}" for i, key in enumerate(dict.fromkeys(id(g) for g, _, _ in runs))}
    names = row_names(groups)
    seen: dict[int, int] = {}
    for g, run, points in runs:
        label = f"{names[id(g)]}, {_seed_label(run)}"
        xs, ys = [p["uniformity"] for p in points], [p["alignment"] for p in points]
        colour, k_seed = colours[id(g)], seen.setdefault(id(g), 0)
        seen[id(g)] += 1   # a row's colour, one line style and marker per seed
        ax.plot(xs, ys, marker="osD^v"[k_seed % 5], ms=3, lw=0.8, ls=("-", "--", ":", "-.")[k_seed % 4],
                color=colour, label=label, gid=f"trajectory:{label}")
        for k in range(len(points) - 1):  # an arrow per step, in the training direction (as SimCSE Fig. 2)
            ax.annotate("", xy=(xs[k + 1], ys[k + 1]), xytext=(xs[k], ys[k]),
                        arrowprops={"arrowstyle": "->", "color": colour, "lw": 0.8})
        for at in {0, len(points) - 1}:
            ax.annotate(f"step {points[at]['step']}", (xs[at], ys[at]), textcoords="offset points", xytext=(4, 4),
                        fontsize=7)
        series.append({"label": label, "kind": "trajectory", "row": group_title(g), "run": str(run.path),
                       "step": [p["step"] for p in points], "x": xs, "y": ys})
    ax.set(xlabel="ℓ_uniform (lower: more uniform)", ylabel="ℓ_align (lower: positives closer)",
           title="Alignment and uniformity during training")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    data = {"kind": "align_uniform", "title": "ℓ_align - ℓ_uniform", "x_label": "uniformity", "y_label": "alignment",
            "series": series}
    return FigureSpec("align_uniform", "Alignment and uniformity (SimCSE Fig. 2)",
                      "ℓ_align (STS-B dev pairs with gold > 4, α = 2) against ℓ_uniform (t = 2) at every "
                      "measurement of callbacks.align_uniform, arrows in the training direction.", fig, data)


# ------------------------------------------------------------------------------------------- writing

def build_figures(report: Report, sweep_x: str | None = None, score: str | None = None) -> list[FigureSpec]:
    """Every figure the report's runs can draw, in the page's order: the sweep, the test scores, the
    alignment-uniformity trajectory, then each row's dev curve.

    Args:
        sweep_x: the sweep's x key (default :func:`sweep_x_key`).
        score: the sweep's score column (default :func:`score_column`).
    """
    groups = report.groups  # each with a finished run (collect.group_runs)
    figures = [sweep_figure(groups, sweep_x, score), task_scores_figure(groups), align_uniform_figure(groups)]
    names = row_names(groups)
    figures += [dev_curve_figure(g, i, names[id(g)]) for i, g in enumerate(groups)]
    return [f for f in figures if f is not None]


def save_figure(spec: FigureSpec, out_dir: Path) -> WrittenFigure:
    """Write ``spec`` as ``<stem>.png`` (150 dpi), ``<stem>.svg`` (no date, a fixed id salt: the same runs give
    the same file) and ``<stem>.json`` (its data), then close it."""
    import matplotlib

    out_dir.mkdir(parents=True, exist_ok=True)
    files = []
    with matplotlib.rc_context({"svg.hashsalt": "cselab", "svg.fonttype": "path"}):
        for fmt in IMAGE_FORMATS:
            name = f"{spec.stem}.{fmt}"
            metadata = {"Date": None} if fmt == "svg" else {"Software": None}
            spec.figure.savefig(out_dir / name, format=fmt, dpi=150, metadata=metadata)
            files.append(name)
    (out_dir / f"{spec.stem}.json").write_text(json.dumps(spec.data, indent=1, default=str) + "\n", encoding="utf-8")
    files.append(f"{spec.stem}.json")
    spec.figure.clear()
    return WrittenFigure(spec.stem, spec.title, spec.caption, tuple(files))


def write_figures(report: Report, out_dir: str | Path, sweep_x: str | None = None,
                  score: str | None = None) -> list[WrittenFigure]:
    """Build (:func:`build_figures`) and write (:func:`save_figure`) every figure into ``out_dir``."""
    out_dir = Path(out_dir)
    return [save_figure(spec, out_dir) for spec in build_figures(report, sweep_x, score)]


__all__ = ["FigureSpec", "IMAGE_FORMATS", "WrittenFigure", "align_uniform_figure", "align_uniform_trajectory",
           "build_figures", "dev_curve", "dev_curve_figure", "row_names", "save_figure", "score_column", "selected_step",
           "sweep_figure", "sweep_x_key", "swept_keys", "task_scores_figure", "write_figures"]
