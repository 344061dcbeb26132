"""Results and the papers' table.

* :mod:`cselab.report.published` -- the papers' published numbers (``published.yaml``) and config -> row matching;
* :mod:`cselab.report.collect` -- find runs, pool seeds, aggregate (mean ± sample std, Spearman x 100);
* :mod:`cselab.report.render` -- Markdown / LaTeX / CSV tables;
* :mod:`cselab.report.figures` -- the papers' figures from the runs (dev curves, sweeps, test scores, the
  alignment-uniformity trajectory), PNG + SVG + their data; :mod:`cselab.report.page` -- the offline HTML page;
* ``cselab report`` / ``python -m cselab report DIR...`` (:mod:`cselab.cli.report`: its options).

A run's ``results.json`` is written by :mod:`cselab.evaluation.results`.
"""
