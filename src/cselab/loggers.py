"""Experiment loggers: CSV always, W&B when configured (offline without a key; never blocks a run)."""

from __future__ import annotations

import importlib.util
import logging
import os
from typing import Any

log = logging.getLogger(__name__)


def wandb_mode(requested: str) -> str:
    """``auto`` -> ``online`` when ``WANDB_API_KEY`` is set, else ``offline`` (sync later with ``wandb sync``)."""
    if requested != "auto":
        return requested
    return "online" if os.environ.get("WANDB_API_KEY") else "offline"


def run_display_name(method: str, backbone: str, setting: str, variant: str | None, seed: Any,
                     limit: int = 128) -> str:
    """The W&B run name: ``<method> <backbone> <setting> <variant> seed<seed>`` (``promptbert minilm_l6 unsup
    default seed42``); a variant that would make it longer than ``limit`` keeps its start and a hash."""
    import hashlib

    variant = variant or "default"
    head, tail = f"{method} {backbone} {setting} ", f" seed{seed}"
    room = limit - len(head) - len(tail)
    if len(variant) > room:
        variant = f"{variant[: max(room - 9, 0)]}~{hashlib.sha1(variant.encode()).hexdigest()[:8]}"
    return f"{head}{variant}{tail}"


def logged_config(config: dict[str, Any]) -> dict[str, Any]:
    """The resolved config as the loggers get it, each value once: without ``hp`` (the selected row, already
    resolved into ``optim.lr``, ``data.batch_size``, ``trainer.max_epochs``) and ``method.hparams`` (the paper
    rows of every setting and backbone)."""
    clean = {k: v for k, v in config.items() if k != "hp"}
    if isinstance(clean.get("method"), dict):
        clean["method"] = {k: v for k, v in clean["method"].items() if k != "hparams"}
    return clean


def build_loggers(cfg: dict[str, Any], output_dir: str, tags: list[str], group: str | None,
                  name: str | None = None) -> list:
    """Lightning loggers from the ``logger`` config: ``{"csv": bool, "wandb": {project, mode, ...} | None}``;
    ``group`` and ``name`` are the W&B run's group (the sweep or experiment) and display name."""
    from lightning.pytorch.loggers import CSVLogger

    loggers: list = []
    if cfg.get("csv", True):
        loggers.append(CSVLogger(save_dir=output_dir, name="csv", version=""))
    wb = cfg.get("wandb")
    if wb and importlib.util.find_spec("wandb") is None:  # an optional extra
        log.warning("logger=wandb but wandb is not installed (pip install 'cselab[wandb]'): logging to CSV only")
        wb = None
    if wb:
        try:
            from lightning.pytorch.loggers import WandbLogger

            mode = wandb_mode(wb.get("mode", "auto"))
            loggers.append(
                WandbLogger(
                    project=wb.get("project", "cselab"),
                    entity=wb.get("entity"),
                    group=wb.get("group") or group,
                    name=name,
                    tags=tags,
                    save_dir=output_dir,
                    offline=mode == "offline",
                    mode=mode if mode == "disabled" else None,
                    log_model=False,
                )
            )
        except Exception as err:  # a logger must never kill a run
            log.warning("W&B logger disabled: %s", err)
    return loggers


def close_loggers(loggers: list) -> None:
    """Finish W&B runs so that the next job of a ``-m`` sweep starts a run of its own."""
    for logger in loggers:
        if type(logger).__name__ == "WandbLogger":
            try:
                logger.experiment.finish()
            except Exception as err:  # never lose a finished run to a logger
                log.warning("could not finish the W&B run: %s", err)


def log_test_charts(loggers: list, test: dict[str, float], by_bin: dict | None, names: dict[str, str]) -> None:
    """W&B tables and charts of the test results (other loggers are skipped; a failure is only a warning):

    * ``test/sts_table``: the papers' table, one row (columns STS12 ... Avg);
    * ``test/sts_scores`` and the bar chart ``test/sts_chart``: one row per task (Spearman x 100);
    * ``test/stsb_cosine_by_gold_bin``: every STS-B test pair's cosine with its gold-score bin (PromCSE Fig. 3),
      ``test/stsb_mean_cosine_by_gold_bin`` (bar chart of the mean per bin) and one histogram of the cosines per
      bin, ``test/stsb_cosine_hist/gold_<bin>``.

    Args:
        test: task -> score (``avg`` included when present).
        by_bin: gold bin label -> cosines (array-like), or None.
        names: task -> the papers' column name.
    """
    for logger in loggers:
        if type(logger).__name__ != "WandbLogger":
            continue
        try:
            import wandb

            run = logger.experiment
            cols = [names.get(k, k) for k in test]
            scores = wandb.Table(columns=["task", "spearman"], data=[[c, round(v, 2)] for c, v in zip(cols, test.values(),
                                                                                                     strict=True)])
            logs = {"test/sts_table": wandb.Table(columns=cols, data=[[round(v, 2) for v in test.values()]]),
                    "test/sts_scores": scores,
                    "test/sts_chart": wandb.plot.bar(scores, "task", "spearman", title="STS test (Spearman x 100)")}
            if by_bin:
                rows = [[label, float(c)] for label, cosines in by_bin.items() for c in cosines]
                logs["test/stsb_cosine_by_gold_bin"] = wandb.Table(columns=["gold_bin", "cosine"], data=rows)
                means = wandb.Table(columns=["gold_bin", "mean_cosine"],
                                    data=[[label, float(sum(c) / len(c))] for label, c in by_bin.items() if len(c)])
                logs["test/stsb_mean_cosine_by_gold_bin"] = wandb.plot.bar(
                    means, "gold_bin", "mean_cosine", title="STS-B test: mean cosine per gold-score bin")
                for label, cosines in by_bin.items():
                    if len(cosines):
                        table = wandb.Table(columns=["cosine"], data=[[float(c)] for c in cosines])
                        logs[f"test/stsb_cosine_hist/gold_{label}"] = wandb.plot.histogram(
                            table, "cosine", title=f"STS-B test cosine, gold score {label}")
            run.log(logs)
        except Exception as err:  # never lose a finished run to a logger
            log.warning("could not log the test charts to W&B: %s", err)
