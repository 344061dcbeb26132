"""Results and the papers' table.

* :mod:`cselab.report.published` -- the papers' published numbers (``published.yaml``) and config -> row matching;
* :mod:`cselab.report.collect` -- find runs, pool seeds, aggregate (mean ± sample std, Spearman x 100);
* :mod:`cselab.report.render` -- Markdown / LaTeX / CSV tables;
* :mod:`cselab.report.figures` -- the papers' figures from the runs (dev curves, sweeps, test scores, the
  alignment-uniformity trajectory), PNG + SVG + their data; :mod:`cselab.report.page` -- the offline HTML page;
* ``cselab report`` / ``python -m cselab report DIR... [--format markdown|latex|csv] [--out FILE] [--group-by KEYS]
  [--wandb] [--figures OUT]`` (:mod:`cselab.cli.report`).

Submodules are imported lazily.  A run's ``results.json`` is written by :mod:`cselab.evaluation.results`.
"""

from __future__ import annotations

from typing import Any

__all__ = ["load_published", "lookup", "variant_of"]


def __getattr__(name: str) -> Any:
    """Lazy exports ``load_published``, ``lookup``, ``variant_of`` (``from cselab.report.collect import collect``
    and ``from cselab.report.render import render`` for the rest: those names are also submodules)."""
    if name in __all__:
        from cselab.report import published

        return getattr(published, name)
    raise AttributeError(f"module 'cselab.report' has no attribute {name!r}")
