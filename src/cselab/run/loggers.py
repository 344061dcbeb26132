"""Experiment loggers: CSV always, W&B when configured (offline without a key; never blocks a run)."""

from __future__ import annotations

import csv
import importlib.util
import logging
import os
import secrets
import string
from pathlib import Path
from typing import Any

from cselab.io.config import clipped

log = logging.getLogger(__name__)


def wandb_mode(requested: str) -> str:
    """``auto`` -> ``online`` when ``WANDB_API_KEY`` is set, else ``offline`` (sync later with ``wandb sync``)."""
    if requested != "auto":
        return requested
    return "online" if os.environ.get("WANDB_API_KEY") else "offline"


def run_display_name(method: str, backbone: str, setting: str, variant: str | None, seed: Any) -> str:
    """The W&B run name: ``<method> <backbone> <setting> <variant> seed<seed>`` (``promptbert minilm_l6 unsup
    default seed42``); a variant that would make it longer than 128 characters keeps its start and a hash."""
    head, tail = f"{method} {backbone} {setting} ", f" seed{seed}"
    return f"{head}{clipped(variant or 'default', 128 - len(head) - len(tail))}{tail}"


def logged_config(config: dict[str, Any]) -> dict[str, Any]:
    """The resolved config as the loggers get it, each value once: without ``hp`` (the selected row, already
    resolved into ``optim.lr``, ``data.batch_size``, ``trainer.max_epochs``), ``module`` (the LightningModule's
    arguments, each read from another group) and ``method.hparams`` (the paper rows of every setting and
    backbone)."""
    clean = {k: v for k, v in config.items() if k not in ("hp", "module")}
    if isinstance(clean.get("method"), dict):
        clean["method"] = {k: v for k, v in clean["method"].items() if k != "hparams"}
    return clean


WANDB_ID_FILE = "wandb_id"


def keep_csv_rows(path: str | os.PathLike, resume_step: int | None) -> list[str]:
    """Prepare ``metrics.csv`` for a run that starts (``resume_step=None``: the file is removed) or resumes from
    the checkpoint of ``resume_step`` (rows logged after that step, by the process that was killed, are dropped:
    the resumed run logs those steps again).  Returns the header kept (``[]`` when no file is kept)."""
    path = Path(path)
    if not path.is_file():
        return []
    if resume_step is None:
        path.unlink()
        return []
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        header, rows = list(reader.fieldnames or []), list(reader)
    rows = [row for row in rows if row.get("step") in (None, "") or int(float(row["step"])) <= resume_step]
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=header)
        writer.writeheader()
        writer.writerows(rows)
    return header


def resumable_csv_logger(output_dir: str, resume_step: int | None):
    """Lightning's ``CSVLogger`` at ``<output_dir>/csv/metrics.csv`` that keeps a resumed run's earlier rows.

    Lightning's writer deletes an existing ``metrics.csv`` when it starts; here the file is first trimmed by
    :func:`keep_csv_rows` and the writer continues it (appending, with the kept header as its first keys)."""
    from lightning.pytorch.loggers import CSVLogger
    from lightning.pytorch.loggers.csv_logs import ExperimentWriter

    class _Writer(ExperimentWriter):
        def _check_log_dir_exists(self) -> None:  # the file was prepared by keep_csv_rows
            self.metrics_keys = keep_csv_rows(self.metrics_file_path, resume_step)

    class _CSVLogger(CSVLogger):
        @property
        def experiment(self):
            if self._experiment is None:
                self._fs.makedirs(self.root_dir, exist_ok=True)
                self._experiment = _Writer(log_dir=self.log_dir)
            return self._experiment

    return _CSVLogger(save_dir=output_dir, name="csv", version="")


def wandb_run_id(output_dir: str | os.PathLike, resuming: bool) -> str:
    """The W&B run id of the run in ``output_dir``: the one recorded in ``<output_dir>/wandb_id`` when the run
    resumes (so a resumed run continues its W&B run, ``resume="allow"``), otherwise a new id, recorded there."""
    path = Path(output_dir) / WANDB_ID_FILE
    if resuming and path.is_file():
        run_id = path.read_text(encoding="utf-8").strip()
        if run_id:
            return run_id
    run_id = "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(8))  # W&B's id form
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(run_id + "\n", encoding="utf-8")
    return run_id


def build_loggers(csv: bool = True, wandb: dict[str, Any] | None = None, *, output_dir: str, tags: list[str],
                  group: str | None = None, name: str | None = None, resume_step: int | None = None) -> list:
    """Lightning loggers of the ``logger`` node (``conf/logger/*.yaml``, whose ``_target_`` this is): a CSV logger
    when ``csv``, a W&B logger when ``wandb`` (``{project, entity, group, mode}``); ``group`` and ``name`` are the
    W&B run's group (the sweep or experiment) and display name.  ``resume_step`` (the global step of the
    checkpoint the run resumes from, ``None`` for a fresh run): the CSV keeps its rows up to that step and the
    W&B run continues under its recorded id."""
    loggers: list = []
    if csv:
        loggers.append(resumable_csv_logger(output_dir, resume_step))
    wb = dict(wandb) if wandb else None
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
                    id=wandb_run_id(output_dir, resume_step is not None),
                    resume="allow",
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


def log_transfer_table(loggers: list, transfer: dict, names: dict[str, str]) -> None:
    """The transfer accuracies: ``test/transfer_<task>`` metrics on every logger, and on W&B the table
    ``test/transfer_table`` (columns MR ... MRPC, Avg; accuracy x 100).  A logger failure is only a warning.

    Args:
        transfer: task -> ``{"acc", "devacc", ...}`` and ``avg`` -> float (``results.json``'s ``transfer``).
        names: task -> the papers' column name.
    """
    accs = {t: float(v["acc"]) for t, v in transfer.items() if isinstance(v, dict)}
    if "avg" in transfer:
        accs["avg"] = float(transfer["avg"])
    for logger in loggers:
        try:
            logger.log_metrics({f"test/transfer_{t}": v for t, v in accs.items()}, step=0)
            if type(logger).__name__ == "WandbLogger":
                import wandb

                cols = [names.get(t, "Avg" if t == "avg" else t) for t in accs]
                logger.experiment.log({"test/transfer_table": wandb.Table(
                    columns=cols, data=[[round(v, 2) for v in accs.values()]])})
        except Exception as err:  # never lose a finished run to a logger
            log.warning("could not log the transfer table to %s: %s", type(logger).__name__, err)


def log_test_charts(loggers: list, test: dict[str, float], by_bin: dict | None, names: dict[str, str],
                    intervals: dict | None = None) -> None:
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
        intervals: task -> ``[low, high]`` (``results.json``'s ``test_ci``): ``test/sts_scores`` gets the columns
            ``ci_low`` / ``ci_high`` and ``test/sts_table`` a second row, ``"[low, high]"`` per task.
    """
    for logger in loggers:
        if type(logger).__name__ != "WandbLogger":
            continue
        try:
            import wandb

            run = logger.experiment
            cols = [names.get(k, k) for k in test]
            scores = wandb.Table(columns=["task", "spearman", *(["ci_low", "ci_high"] if intervals else [])],
                                 data=[[c, round(v, 2), *((intervals.get(k) or [None, None])[:2] if intervals else [])]
                                       for k, c, v in zip(test, cols, test.values(), strict=True)])
            table_rows = [[round(v, 2) for v in test.values()]]
            if intervals:
                table_rows.append(["[{:.2f}, {:.2f}]".format(*intervals[k]) if intervals.get(k) else "" for k in test])
            logs = {"test/sts_table": wandb.Table(columns=cols, data=table_rows, allow_mixed_types=True),
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
