"""The papers' transfer tables (PromptBERT Table 15, PromCSE Table 7) beside the transfer results of our runs.

``published_transfer.yaml`` holds every printed row (accuracy x 100); a run contributes when its ``results.json``
has a ``transfer`` section (``eval.transfer_tasks``, or ``cselab transfer --out``).  Our rows are matched to a
published row by (method, backbone, setting, variant) exactly as the STS report matches them
(:func:`cselab.report.published.variant_of`), and pooled over seeds (mean, with n).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from cselab.data.transfer import PAPER_NAMES, TRANSFER_TASKS
from cselab.io.tables import Column, Table, markdown
from cselab.report.published import PublishedDataError, variant_of
from cselab.report.saved_config import SavedRunConfig

__all__ = ["TransferRow", "load_published_transfer", "transfer_rows_of_runs", "render_transfer_tables"]

PUBLISHED_TRANSFER = Path(__file__).with_name("published_transfer.yaml")
COLUMNS = (*TRANSFER_TASKS, "avg")
#: paper -> the table's title
TABLES = {"promptbert": "PromptBERT Table 15 (transfer, SentEval test mode)",
          "promcse": "PromCSE Table 7 (transfer, SentEval)"}


@dataclass(frozen=True)
class TransferRow:
    """One printed row of a transfer table (or one of our configurations pooled over seeds).

    Attributes:
        name: the row's label; method / backbone / setting / variant: as in published.yaml (method None: a system
            cselab does not train); scores: task -> accuracy x 100 (``avg`` included); paper / table: the source;
            n: runs pooled (our rows), 0 for a published row; mode: SentEval mode of our runs.
    """

    name: str
    method: str | None
    backbone: str | None
    setting: str
    variant: str | None
    scores: dict[str, float]
    paper: str = ""
    table: str = ""
    quoted: str | None = None
    n: int = 0
    mode: str | None = None
    runs: tuple[str, ...] = field(default=())


def load_published_transfer(path: str | Path | None = None) -> list[TransferRow]:
    """Read and check ``published_transfer.yaml``.

    Raises:
        PublishedDataError: a missing score, a number outside [0, 100], or an ``avg`` that is not the mean of the
            seven printed accuracies (within rounding, 0.01) and no ``erratum`` says so, named by entry.
    """
    path = Path(path or PUBLISHED_TRANSFER)
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    rows = []
    for i, entry in enumerate(raw.get("entries") or []):
        where = f"{path.name} entry {i} ({entry.get('name')!r})"
        scores = entry.get("scores") or {}
        if set(scores) != set(COLUMNS):
            raise PublishedDataError(f"{where}: scores must have exactly {list(COLUMNS)}, got {sorted(scores)}")
        values = {k: float(v) for k, v in scores.items()}
        if any(not 0 <= v <= 100 for v in values.values()):
            raise PublishedDataError(f"{where}: an accuracy outside [0, 100]")
        mean = sum(values[t] for t in TRANSFER_TASKS) / len(TRANSFER_TASKS)
        if abs(mean - values["avg"]) > 0.01 + 1e-9 and not entry.get("erratum"):
            raise PublishedDataError(f"{where}: avg {values['avg']} but the 7 accuracies average {mean:.3f}")
        src = entry.get("source") or {}
        rows.append(TransferRow(str(entry["name"]), entry.get("method"), entry.get("backbone"), str(entry["setting"]),
                                entry.get("variant"), values, str(src.get("paper", "")), str(src.get("table", "")),
                                entry.get("quoted")))
    return rows


def transfer_rows_of_runs(results: Iterable[tuple[str, Mapping[str, Any]]]) -> list[TransferRow]:
    """Our rows: runs with a ``transfer`` section, pooled by (method, backbone, setting, variant, mode).

    Args:
        results: (run directory, parsed results.json) pairs.

    Returns:
        One row per configuration, each task the mean over the runs that scored it; ``avg`` the mean of the seven
        when all are present.
    """
    groups: dict[tuple, list[tuple[str, Mapping]]] = {}
    for run_dir, res in results:
        transfer = res.get("transfer") if isinstance(res, Mapping) else None
        if not transfer:
            continue
        saved = SavedRunConfig.from_config(res.get("config") or {})
        setting = "unsup" if saved.setting is None else saved.setting  # a run saved without setting.name: unsup
        key = (saved.method, saved.backbone, setting, variant_of(saved),
               (res.get("transfer_protocol") or {}).get("mode"))
        groups.setdefault(key, []).append((run_dir, transfer))
    rows = []
    for (method, backbone, setting, variant, mode), members in groups.items():
        scores = {}
        for task in TRANSFER_TASKS:
            values = [m[1][task]["acc"] for m in members if isinstance(m[1].get(task), Mapping)]
            if values:
                scores[task] = sum(values) / len(values)
        if all(t in scores for t in TRANSFER_TASKS):
            scores["avg"] = sum(scores[t] for t in TRANSFER_TASKS) / len(TRANSFER_TASKS)
        name = f"ours: {method} {backbone} {setting}" + (f" [{variant}]" if variant else "")
        rows.append(TransferRow(name, method, backbone, setting, variant, scores, n=len(members), mode=mode,
                                runs=tuple(m[0] for m in members)))
    return rows


def _cell(value: float | None) -> str:
    return f"{value:.2f}" if value is not None and math.isfinite(value) else "-"


def render_transfer_tables(ours: Sequence[TransferRow], published: Sequence[TransferRow] | None = None) -> str:
    """Markdown: each paper's transfer table with our matching rows under the published row they reproduce, then
    our rows that match no published row.  Empty string when there is nothing to show."""
    published = list(published if published is not None else load_published_transfer())
    if not ours:
        return ""
    columns = [Column("row"), Column("n", format=lambda n: str(n) if n else "paper"),
               Column("mode", format=lambda mode: mode or "-"),
               *(Column(PAPER_NAMES[t], format=_cell) for t in TRANSFER_TASKS), Column("Avg", format=_cell)]

    def table(rows: list[tuple[TransferRow, str]]) -> str:
        """A Markdown table of ``(row, label)``, each line ending in a newline."""
        lines = markdown(Table(columns, [[label, r.n, r.mode, *(r.scores.get(c) for c in COLUMNS)]
                                         for r, label in rows]))
        return "".join(f"{line}\n" for line in lines)

    def key(row: TransferRow) -> tuple:
        return (row.method, row.backbone, row.setting, row.variant)

    used: set[int] = set()
    out = []
    for paper, title in TABLES.items():
        printed = [r for r in published if r.paper == paper]
        matched = [(r, [i for i, o in enumerate(ours) if r.method and key(o) == key(r)]) for r in printed]
        if not any(m for _, m in matched):
            continue
        rows = []
        for row, idx in matched:
            rows.append((row, f"{row.name} ({row.setting}{', quoted' if row.quoted else ''})"))
            rows += [(ours[i], f"&nbsp;&nbsp;{ours[i].name}") for i in idx]
            used.update(idx)
        out.append(f"### {title}\n\n{table(rows)}")
    rest = [o for i, o in enumerate(ours) if i not in used]
    if rest:
        out.append("### Our transfer results (no published row)\n\n" + table([(o, o.name) for o in rest]))
    return "\n".join(out)
