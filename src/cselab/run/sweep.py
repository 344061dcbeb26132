"""The end of a ``-m`` sweep: a summary of its jobs (done / failed, with their run directories) and the exit status.

A failing job of a sweep writes ``failed.json`` and the sweep goes on (``run.py``).  When every job has
returned, Hydra calls :class:`SweepSummary` (``hydra.callbacks.sweep_summary`` in ``conf/config.yaml``), which
reads the job directories under ``hydra.sweep.dir`` -- so it works for any launcher, local or SLURM, and
counts jobs that died without a word -- prints::

    sweep multirun/2026-11-23/17-02-11: 2 jobs, 1 done, 1 failed
      done    multirun/2026-11-23/17-02-11/0_simcse_minilm_l6_unsup   avg 78.87
      failed  multirun/2026-11-23/17-02-11/1_promptbert_minilm_l6_unsup   ConfigError: loss.temperature must be > 0

and records the outcome; ``run.py`` then exits with :func:`exit_status` (1 when a job failed or did not finish).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback

from cselab.io.files import read_json_object

__all__ = ["JobStatus", "SweepSummary", "exit_status", "format_summary", "sweep_jobs"]

RESULTS_FILE = "results.json"
FAILED_FILE = "failed.json"

#: the jobs of the last sweep that ended in this process (None: no sweep ended here)
_last_jobs: list[JobStatus] | None = None


@dataclass(frozen=True)
class JobStatus:
    """One job of a sweep.

    Attributes:
        path: the job's run directory.
        status: ``done`` (``results.json``), ``failed`` (``failed.json`` newer than any ``results.json``) or
            ``unfinished`` (neither: killed, or still running under another launcher).
        detail: the test average for a done job, ``Error: message`` for a failed one.
    """

    path: Path
    status: str
    detail: str = ""


def _job_number(path: Path) -> tuple[int, str]:
    match = re.match(r"(\d+)", path.name)
    return (int(match.group(1)) if match else 1 << 30, path.name)


def job_status(job_dir: str | Path) -> JobStatus:
    """The :class:`JobStatus` of one job directory (from its ``results.json`` / ``failed.json``)."""
    job_dir = Path(job_dir)
    results, failed = job_dir / RESULTS_FILE, job_dir / FAILED_FILE
    if failed.is_file() and (not results.is_file() or failed.stat().st_mtime > results.stat().st_mtime):
        info = read_json_object(failed)
        message = " ".join(str(info.get("message", "")).split())
        if len(message) > 160:
            message = message[:157] + "..."
        return JobStatus(job_dir, "failed", f"{info.get('error', 'error')}: {message}")
    if results.is_file():
        test = read_json_object(results).get("test") or {}
        shown = {"avg": test["avg"]} if isinstance(test.get("avg"), int | float) else test
        return JobStatus(job_dir, "done", "  ".join(f"{k} {v:.2f}" for k, v in shown.items()
                                                      if isinstance(v, int | float)))
    return JobStatus(job_dir, "unfinished", "no results.json nor failed.json")


def sweep_jobs(sweep_dir: str | Path) -> list[JobStatus]:
    """Every job directory (one holding Hydra's ``.hydra/``) directly under ``sweep_dir``, in job order."""
    sweep_dir = Path(sweep_dir)
    if not sweep_dir.is_dir():
        return []
    dirs = [d for d in sweep_dir.iterdir() if d.is_dir() and (d / ".hydra").is_dir()]
    return [job_status(d) for d in sorted(dirs, key=_job_number)]


def format_summary(sweep_dir: str | Path, jobs: list[JobStatus]) -> str:
    """The summary block: one header line with the counts, then one line per job (status, directory, detail)."""
    counts = {s: sum(j.status == s for j in jobs) for s in ("done", "failed", "unfinished")}
    head = f"sweep {sweep_dir}: {len(jobs)} job{'s' if len(jobs) != 1 else ''}, " + ", ".join(
        f"{n} {s}" for s, n in counts.items() if n or s != "unfinished")
    width = max((len(str(j.path)) for j in jobs), default=0)
    lines = [f"  {j.status:<10} {str(j.path).ljust(width)}   {j.detail}".rstrip() for j in jobs]
    return "\n".join([head, *lines])


def exit_status() -> int:
    """1 when the last sweep of this process had a failed or unfinished job (or no job at all), else 0."""
    if _last_jobs is None:
        return 0
    return 0 if _last_jobs and all(j.status == "done" for j in _last_jobs) else 1


class SweepSummary(Callback):
    """Hydra callback: at the end of a ``-m`` sweep, print its jobs' summary and record it for :func:`exit_status`."""

    def on_multirun_end(self, config, **kwargs: Any) -> None:
        global _last_jobs
        sweep_dir = Path(str(config.hydra.sweep.dir))
        _last_jobs = sweep_jobs(sweep_dir)
        print("\n" + format_summary(sweep_dir, _last_jobs), flush=True)
