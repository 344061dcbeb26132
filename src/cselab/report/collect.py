"""Find runs under result directories, group them by configuration (seeds pooled), aggregate, match papers.

A *run* is a directory holding ``results.json`` (see :mod:`cselab.evaluation.results`) or, when the job failed
(or is still running), a Hydra job directory -- one with ``.hydra/`` -- without it.  Runs are grouped by
their configuration **differing only in seed**; the grouping key (:func:`group_key`) is

* ``method.name``, ``backbone.name``, ``setting.name`` plus every override of ``.hydra/overrides.yaml``
  except ``seed``, ``hydra.*``, the ``method`` / ``backbone`` / ``setting`` group choices (already in the
  names) and the output-only keys ``logger``, ``logger.*``, ``group`` and the ``data_dir`` path;
* without an overrides file: the flattened resolved config minus ``seed``, paths / directories (keys whose
  last part contains ``path`` or ``dir``), ``group``, ``logger.*`` and ``hydra.*``;
* with ``group_by`` (``--group-by``): exactly those dotted config keys.

Each group gets, per score column (Spearman x 100), the mean over its runs and the sample standard deviation
(``ddof=1``, the papers' "+-"; only when n > 1), the published row it reproduces
(:func:`cselab.report.published.lookup` with :func:`cselab.report.published.variant_of`) and ours - paper.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from cselab.evaluation.stats import SeedStats, seed_statistics
from cselab.io.config import OUTPUT_ONLY_KEYS, flatten
from cselab.report.published import (
    BACKBONES,
    SETTINGS,
    TASKS,
    PublishedRow,
    load_published,
    lookup,
    variant_of,
)
from cselab.report.saved_config import SavedRunConfig, config_value

RESULTS_FILE = "results.json"
HYDRA_DIR = ".hydra"
#: the three names every grouping key starts with (dotted keys: they name the key's parts and are the
#: ``--group-by`` spelling, so they are read with :func:`config_value`, like a user's ``--group-by`` keys)
BASE_KEYS: tuple[str, ...] = ("method.name", "backbone.name", "setting.name")
#: override keys that never split a group, besides ``hydra.*`` (module docstring; with
#: :data:`cselab.io.config.OUTPUT_ONLY_KEYS`: logging, paths, resume, compile, progress bar ...)
IGNORED_OVERRIDE_KEYS: frozenset[str] = frozenset({"seed", "group", "data_dir", "logger", "method", "backbone",
                                                    "setting", *OUTPUT_ONLY_KEYS})
IGNORED_PREFIXES: tuple[str, ...] = tuple(f"{k}{sep}" for k in OUTPUT_ONLY_KEYS for sep in "./")


@dataclass
class Run:
    """One run directory.  ``results`` is the parsed ``results.json`` (``None`` for a failed run)."""

    path: Path
    results: dict | None
    config: dict
    overrides: list[str] | None
    error: str | None = None              # why there are no results (failed runs)
    log_tail: dict[str, list[str]] = field(default_factory=dict)   # log file name -> its last lines

    @property
    def ok(self) -> bool:
        """True when ``results.json`` was read."""
        return self.results is not None

    @property
    def status(self) -> str:
        """``ok`` (results read), ``failed`` (``failed.json``, or an unreadable ``results.json``) or
        ``unfinished`` (neither file: the job is still running, or was killed; re-running it resumes)."""
        if self.ok:
            return "ok"
        return "unfinished" if (self.error or "").startswith("unfinished") else "failed"

    @property
    def saved(self) -> SavedRunConfig:
        """The fields the report reads from :attr:`config` (:class:`SavedRunConfig`: old layouts and defaults)."""
        return SavedRunConfig.from_config(self.config)

    @property
    def seed(self) -> Any:
        """The run's seed: ``config.seed``, else a ``seed=`` override, else ``None``."""
        if "seed" in self.config:
            return self.config["seed"]
        for item in self.overrides or []:
            key, _, value = _split_override(item)
            if key == "seed":
                return yaml.safe_load(value) if value else value
        return None

    def score(self, key: str) -> float | None:
        """Test score ``key`` (a task or ``avg``) or ``"dev"`` (STS-B dev, ``results["dev"]["stsb"]``), Spearman
        x 100, ``None`` when absent or not finite.

        ``avg`` is the papers' Avg, the plain mean of the 7 tasks: ``None`` unless all 7 are present (a run
        that tested a subset, e.g. ``eval.test_tasks=[stsb]``, has no comparable Avg even if its file stores
        one); computed from the tasks when the file has none.
        """
        if not self.ok:
            return None
        if key == "dev":
            return finite((self.results.get("dev") or {}).get("stsb"))
        test = self.results.get("test") or {}
        if key != "avg":
            return finite(test.get(key))
        tasks = [finite(test.get(t)) for t in TASKS]
        if any(v is None for v in tasks):
            return None
        stored = finite(test.get("avg"))
        return stored if stored is not None else sum(tasks) / len(tasks)

    def interval(self, key: str) -> list[float] | None:
        """The run's bootstrap interval ``[low, high]`` of test column ``key`` over its test pairs
        (``results.json``'s ``test_ci``), ``None`` when absent (intervals off, or a run from before them)."""
        if not self.ok:
            return None
        ci = (self.results.get("test_ci") or {}).get(key)
        if isinstance(ci, list | tuple) and len(ci) == 2 and all(finite(v) is not None for v in ci):
            return [float(ci[0]), float(ci[1])]
        return None


@dataclass
class Group:
    """Runs whose configurations differ only in seed, with their aggregate and the matching published row."""

    key: tuple[tuple[str, Any], ...]
    runs: list[Run]
    failed: list[Run] = field(default_factory=list)
    label: str = ""                        # the distinguishing settings beyond method/backbone/setting
    published: PublishedRow | None = None

    def _uniform(self, name: str) -> Any:
        """Field ``name`` of :class:`SavedRunConfig` when every run has the same value, else ``None``."""
        values = {json_key(getattr(r.saved, name)) for r in self.runs}
        return getattr(self.runs[0].saved, name) if len(values) == 1 and self.runs else None

    method = property(lambda self: self._uniform("method"), doc="``method.name`` shared by every run (``None`` if "
                      "they differ, possible only with ``group_by``).")
    backbone = property(lambda self: self._uniform("backbone"), doc="``backbone.name`` shared by every run (else "
                        "``None``).")
    setting = property(lambda self: self._uniform("setting"), doc="``setting.name`` shared by every run (else "
                       "``None``).")

    @property
    def variant(self) -> str | None:
        """The published variant (:func:`variant_of`) shared by every run, else ``None``."""
        variants = {variant_of(r.saved) for r in self.runs}
        return variants.pop() if len(variants) == 1 else None

    @property
    def n(self) -> int:
        """Number of finished runs (seeds) in the group."""
        return len(self.runs)

    @property
    def seeds(self) -> list[Any]:
        """The runs' seeds, sorted (``None`` for a run without one)."""
        return sorted((r.seed for r in self.runs), key=lambda s: (s is None, str(type(s)), s if s is not None else 0))

    def stat(self, key: str, level: float = 0.95) -> SeedStats:
        """Test column ``key`` (a task or ``avg``) or ``"dev"`` (STS-B dev) over the group's runs that have it,
        Spearman x 100: n, mean, sample std (``ddof=1``; n > 1) and the t-interval of the mean
        (:func:`cselab.evaluation.stats.seed_statistics`; a warning when n < 3)."""
        return seed_statistics([v for r in self.runs if (v := r.score(key)) is not None], level)

    def paper_inside(self, key: str, level: float = 0.95) -> bool | None:
        """Whether the published number of column ``key`` lies inside our t-interval over seeds; ``None``
        without a published number or with fewer than 2 seeds (no interval)."""
        paper, interval = self.paper(key), self.stat(key, level).interval
        return None if paper is None or interval is None else interval.contains(paper)

    def paper(self, key: str) -> float | None:
        """The published number for column ``key`` (or ``"dev"``), ``None`` when there is none."""
        if self.published is None:
            return None
        if key == "dev":
            return self.published.dev.get("stsb")
        return self.published.scores.get(key)

    def paper_std(self, key: str) -> float | None:
        """The published "+-" for column ``key``, when the paper gives one."""
        return None if self.published is None else self.published.std.get(key)

    def diff(self, key: str) -> float | None:
        """Ours (mean) - paper for column ``key`` (Spearman x 100 points); ``None`` if either is missing."""
        ours, paper = self.stat(key).mean, self.paper(key)
        return None if ours is None or paper is None else ours - paper


class SameSeedError(ValueError):
    """Runs that differ in nothing the report groups by also share a seed: pooling them would count one seed
    twice (two copies of a run read as "n=2, std 0.0").  The message names the seed and the runs."""


def check_distinct_seeds(group: Group) -> None:
    """Refuse a group in which two runs have the same seed and the same configuration (the default
    :func:`group_key`; under ``--group-by``, runs of different configurations pooled on purpose may share one).

    Raises:
        SameSeedError: names the seed, the run directories and what to do instead.
    """
    by_seed: dict[tuple, list[Run]] = {}
    for run in group.runs:
        if run.seed is not None:  # the default key: with --group-by, runs of different configs may share a seed
            by_seed.setdefault((json_key(run.seed), group_key(run)), []).append(run)
    for (seed, _), runs in by_seed.items():
        if len(runs) > 1:
            where = ", ".join(str(r.path) for r in runs)
            raise SameSeedError(
                f"refusing to pool {len(runs)} runs with the same seed {json.loads(seed)!r} "
                f"({group.method}/{group.backbone}/{group.setting}{'; ' + group.label if group.label else ''}): "
                f"{where}. Seed statistics need one run per seed; pass one of these directories, give the runs "
                "distinct seeds, or separate them with --group-by KEYS (a config key in which they differ)")


@dataclass
class Report:
    """Everything found under the given directories: the groups (sorted) and every failed run."""

    groups: list[Group]
    failed: list[Run]
    roots: list[Path]


# ------------------------------------------------------------------------------------------- helpers

def finite(value: Any) -> float | None:
    """``value`` as a float when it is a finite int or float (not a bool), else ``None`` (a score read from JSON)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def json_key(value: Any) -> str:
    """A hashable, type-exact key of a config value or seed (``1`` and ``"1"`` differ; dicts by sorted keys)."""
    return json.dumps(value, sort_keys=True, default=str)

def _split_override(item: str) -> tuple[str, str, str]:
    """``"+trainer.max_steps=20"`` -> ``("trainer.max_steps", "=", "20")`` (``+``, ``++``, ``~`` stripped)."""
    item = str(item).strip()
    key, sep, value = item.partition("=")
    return key.lstrip("+~").strip(), sep, value.strip()


def _ignored(key: str) -> bool:
    return key in IGNORED_OVERRIDE_KEYS or key == "hydra" or key.startswith(IGNORED_PREFIXES)


def _hashable(value: Any) -> Any:
    return json_key(value) if isinstance(value, list | tuple | dict) else value


def _tail(path: Path, n: int) -> list[str]:
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            lines = f.read().decode("utf-8", errors="replace").splitlines()
    except OSError as err:
        return [f"<could not read {path.name}: {err}>"]
    return lines[-n:] if n > 0 else []


def _load_yaml(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return None


def _hydra_config(run_dir: Path) -> dict:
    """``.hydra/config.yaml``, resolved when OmegaConf can (else as written); ``{}`` if absent."""
    path = run_dir / HYDRA_DIR / "config.yaml"
    raw = _load_yaml(path)
    if not isinstance(raw, dict):
        return {}
    try:
        from omegaconf import OmegaConf

        import cselab.io.config  # noqa: F401  (registers the ${eq:...} resolver)

        resolved = OmegaConf.to_container(OmegaConf.create(raw), resolve=True)
        return resolved if isinstance(resolved, dict) else raw
    except Exception:  # interpolation that cannot resolve here: keep the raw values
        return raw


def _overrides(run_dir: Path) -> list[str] | None:
    path = run_dir / HYDRA_DIR / "overrides.yaml"
    if not path.is_file():
        return None
    data = _load_yaml(path)
    return [str(x) for x in data] if isinstance(data, list) else []


# ---------------------------------------------------------------------------------------------- API

def read_run(run_dir: str | os.PathLike, log_lines: int = 10) -> Run:
    """Read one run directory.

    Args:
        run_dir: a directory with ``results.json`` and/or ``.hydra/``.
        log_lines: for a run without (readable) results, keep the last ``log_lines`` lines of each ``*.log``.

    Returns:
        a :class:`Run`; ``run.ok`` is False (with ``run.error``) when ``results.json`` is missing or
        unreadable.  The config comes from ``results.json`` (else ``.hydra/config.yaml``).  Never raises for
        a broken run: a failed job must be listed, not crash the report.
    """
    run_dir = Path(run_dir)
    overrides = _overrides(run_dir)
    results_path = run_dir / RESULTS_FILE
    results, error = None, None
    if results_path.is_file():
        try:
            results = json.loads(results_path.read_text(encoding="utf-8"))
            if not isinstance(results, dict) or not isinstance(results.get("test"), dict):
                results, error = None, f"{RESULTS_FILE} has no 'test' scores"
        except (OSError, json.JSONDecodeError) as err:
            error = f"unreadable {RESULTS_FILE}: {err}"
    else:
        last = run_dir / "checkpoints" / "last.ckpt"
        error = (f"unfinished: no {RESULTS_FILE} and no failed.json (still running, or interrupted"
                 + (": re-running its command resumes from checkpoints/last.ckpt)" if last.is_file() else ")"))
        failed = run_dir / "failed.json"  # written by run.py when a job raises (cselab.run.failure.record_failure)
        if failed.is_file():
            try:
                info = json.loads(failed.read_text(encoding="utf-8"))
                error = f"failed: {info.get('error')}: {info.get('message')}"
            except (OSError, json.JSONDecodeError) as err:
                error = f"failed (unreadable failed.json: {err})"
    config = results.get("config") if results is not None else None
    if not isinstance(config, dict):
        config = _hydra_config(run_dir)
    run = Run(path=run_dir, results=results, config=config, overrides=overrides, error=error)
    if not run.ok:
        run.log_tail = {p.name: _tail(p, log_lines) for p in sorted(run_dir.glob("*.log")) if p.is_file()}
    return run


def find_runs(paths: Iterable[str | os.PathLike], log_lines: int = 10) -> list[Run]:
    """Every run under ``paths`` (searched recursively; a path may also be a run dir or a ``results.json``).

    A directory is a run when it holds ``results.json`` or a ``.hydra/`` folder (a Hydra job: without
    ``results.json`` it is a failed / unfinished run).  Hidden directories are not searched.  Each run is
    returned once (by resolved path), sorted by path.

    Raises:
        FileNotFoundError: a path does not exist.
    """
    found: dict[Path, Run] = {}
    for p in paths:
        p = Path(p)
        if not p.exists():
            raise FileNotFoundError(f"{p}: no such file or directory")
        if p.is_file():
            if p.name != RESULTS_FILE:
                raise FileNotFoundError(f"{p}: expected a directory or a {RESULTS_FILE}")
            p = p.parent
        for dirpath, dirnames, filenames in os.walk(p):
            here = Path(dirpath)
            if RESULTS_FILE in filenames or HYDRA_DIR in dirnames:
                found.setdefault(here.resolve(), read_run(here, log_lines))
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
    return sorted(found.values(), key=lambda r: str(r.path))


def group_key(run: Run, group_by: Sequence[str] | None = None) -> tuple[tuple[str, Any], ...]:
    """The key that pools seeds: equal for two runs iff their configurations differ only in seed.

    Args:
        run: a run (finished or failed).
        group_by: dotted config keys to group by instead of the default (see the module docstring).

    Returns:
        a tuple of ``(name, value)`` pairs: the three :data:`BASE_KEYS` first, then either the non-ignored
        overrides (``("override:<key>", value)``, sorted) or, without an overrides file, every non-ignored
        flattened config item (``("config:<key>", value)``).
    """
    if group_by:
        return tuple((k, _hashable(config_value(run.config, k))) for k in group_by)
    base = tuple((k, config_value(run.config, k)) for k in BASE_KEYS)
    if run.overrides is not None:
        overrides = map(_split_override, run.overrides)
        return base + tuple(sorted((f"override:{key}", value) for key, _, value in overrides
                                   if key and not _ignored(key)))
    items = [(f"config:{key}", _hashable(value)) for key, value in flatten(run.config).items()
             if key not in BASE_KEYS and not _ignored(key)
             and not any(word in key.rsplit(".", 1)[-1].lower() for word in ("path", "dir"))]  # paths, directories
    return base + tuple(sorted(items, key=lambda kv: kv[0]))


def _label(key: tuple[tuple[str, Any], ...], varying: set[str]) -> str:
    """The row's label: ``name=value`` for each override, each config item that varies between rows (``varying``:
    ``config:`` names) and each --group-by key other than :data:`BASE_KEYS`; ``override:`` / ``config:`` prefixes
    dropped."""
    parts = []
    for name, value in key:
        override, config = name.startswith("override:"), name.startswith("config:")
        if override or name in varying or not (config or name in BASE_KEYS):
            parts.append(f"{name.partition(':')[2] if override or config else name}={value}")
    return ", ".join(parts)


def _sort_key(group: Group) -> tuple:
    def order(value: Any, known: Sequence[str]) -> tuple:
        return (known.index(value), "") if value in known else (len(known), str(value))

    return (str(group.method), order(group.backbone, BACKBONES), order(group.setting, SETTINGS),
            group.variant or "", group.label)


def group_runs(
    runs: Iterable[Run], group_by: Sequence[str] | None = None, published: Sequence[PublishedRow] | None = None,
    paper_backbone: str | None = None,
) -> tuple[list[Group], list[Run]]:
    """Group finished runs by :func:`group_key`, attach failed runs to their group, match the papers.

    Args:
        runs: from :func:`find_runs`.
        group_by: see :func:`group_key`.
        published: rows from :func:`cselab.report.published.load_published` (default: the packaged file);
            pass ``[]`` to match nothing.
        paper_backbone: compare every group with the paper's row for THIS backbone (e.g. ``bert_base`` for
            runs on a small stand-in such as ``minilm_l6``); the label says so.

    Returns:
        ``(groups, failed)``: groups sorted by method, backbone, setting, variant, label; every failed run
        (also attached to ``group.failed`` when a finished group has the same key).

    Raises:
        SameSeedError: two finished runs of one group have the same seed (:func:`check_distinct_seeds`).
    """
    rows = load_published() if published is None else list(published)
    runs = list(runs)
    groups: dict[tuple, Group] = {}
    failed = [r for r in runs if not r.ok]
    for run in runs:
        if run.ok:
            key = group_key(run, group_by)
            groups.setdefault(key, Group(key=key, runs=[])).runs.append(run)
    for run in failed:
        key = group_key(run, group_by)
        if key in groups:
            groups[key].failed.append(run)
    # config-derived keys are long: label only the items that differ between groups of the same base triple
    varying: set[str] = set()
    by_base: dict[tuple, list[Group]] = {}
    for g in groups.values():
        by_base.setdefault(g.key[:3], []).append(g)
    for siblings in by_base.values():
        items = [dict(g.key) for g in siblings]
        names = {n for it in items for n in it if n.startswith("config:")}
        varying |= {n for n in names if len({json_key(it.get(n)) for it in items}) > 1}
    for g in groups.values():
        g.label = _label(g.key, varying)
        check_distinct_seeds(g)
        if g.method and g.backbone and g.setting:
            g.published = lookup(rows, g.method, paper_backbone or g.backbone, g.setting, g.variant)
            if paper_backbone and paper_backbone != g.backbone:
                g.label = f"{g.label} [paper row: {paper_backbone}]".strip()
    return sorted(groups.values(), key=_sort_key), failed


def collect(
    paths: Iterable[str | os.PathLike], group_by: Sequence[str] | None = None,
    published: Sequence[PublishedRow] | None = None, log_lines: int = 10, paper_backbone: str | None = None,
) -> Report:
    """Find, group and aggregate every run under ``paths`` (see :func:`find_runs` and :func:`group_runs`).

    Raises:
        FileNotFoundError: a path does not exist.
        cselab.report.published.PublishedDataError: the published data file is invalid.
        SameSeedError: two runs of one group share a seed (names the seed and the runs).
    """
    paths = [Path(p) for p in paths]
    groups, failed = group_runs(find_runs(paths, log_lines=log_lines), group_by=group_by, published=published,
                                paper_backbone=paper_backbone)
    return Report(groups=groups, failed=failed, roots=paths)


__all__ = [
    "BASE_KEYS", "Group", "Report", "Run", "SameSeedError", "check_distinct_seeds", "collect",
    "finite", "find_runs", "group_key", "group_runs", "json_key", "read_run",
]
