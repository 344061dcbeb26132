"""Input checks that run before the backbone loads: the training file (corpus or NLI csv) and the STS files of
every task the run will score, so that a bad file fails in seconds, naming it, instead of after training.

* corpus / NLI csv: not empty, a usable line, at most ``max_undecodable_share`` of its non-empty lines with bytes
  that are not UTF-8 (a few such lines are skipped and counted while training; a file made mostly of them is the
  wrong file), at most ``max_control_share`` of its non-empty UTF-8 lines made mostly of control characters
  (NULs and the like: valid UTF-8, but not text; a binary file, a corrupted download), and for the NLI csv the
  header ``sent0,sent1,hard_neg``;
* STS: every task name is known and every file of every test task (and the dev task's dev split) parses; the
  parsed files stay in the readers' cache, so the evaluation does not read them again.
"""

from __future__ import annotations

import csv
import os
import re
from dataclasses import dataclass
from pathlib import Path

from cselab.data.nli import check_header
from cselab.data.sts import TASKS, STSFormatError, canonical_task, load_task, task_splits

#: bytes of a training file scanned for the checks (a larger file is judged on its start)
SCAN_BYTES = 64 * 2**20
#: control characters (Unicode category Cc) that are not whitespace: C0 except tab / newlines / separators, DEL, C1
CONTROL = re.compile(r"[\x00-\x08\x0e-\x1b\x7f-\x84\x86-\x9f]")
#: a line is a control-character line when more than this share of its non-whitespace characters are
CONTROL_LINE_SHARE = 0.5


@dataclass(frozen=True)
class LineStats:
    """Line counts of (the scanned start of) a text file.

    Attributes:
        lines: lines read.
        empty: empty or whitespace-only lines.
        undecodable: lines holding bytes that are not UTF-8.
        truncated: the file is larger than the scan (counts cover its first ``SCAN_BYTES``).
        control: UTF-8 lines whose non-whitespace characters are more than :data:`CONTROL_LINE_SHARE` control
            characters (:data:`CONTROL`).
    """

    lines: int
    empty: int
    undecodable: int
    truncated: bool
    control: int = 0

    @property
    def usable(self) -> int:
        """Non-empty lines that decode as UTF-8."""
        return self.lines - self.empty - self.undecodable


def scan_lines(path: str | os.PathLike, limit: int = SCAN_BYTES, skip_header: bool = False) -> LineStats:
    """Count the lines, the empty ones and the ones that are not UTF-8 in the first ``limit`` bytes of ``path``.

    Lines are split on ``\\n`` (a trailing ``\\r`` is dropped); with ``skip_header`` the first line is not counted.
    Also counts the lines made mostly of control characters (:attr:`LineStats.control`).
    """
    lines = empty = undecodable = control = read = 0
    truncated = False
    with open(path, "rb") as f:
        for i, raw in enumerate(f):
            read += len(raw)
            if read > limit:
                truncated = True
                break
            if skip_header and i == 0:
                continue
            lines += 1
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                if raw.strip():
                    undecodable += 1
                else:
                    empty += 1
                continue
            if not text.strip():
                empty += 1
            elif CONTROL.search(text):
                visible = len("".join(text.split()))
                if len(CONTROL.findall(text)) > CONTROL_LINE_SHARE * visible:
                    control += 1
    return LineStats(lines, empty, undecodable, truncated, control)


def _scan_and_check(path: str | os.PathLike, what: str, max_undecodable_share: float,
                    max_control_share: float, skip_header: bool = False) -> LineStats:
    path = Path(path)
    stats = scan_lines(path, skip_header=skip_header)
    where = f"{path} (config key data.path, {what})"
    scope = f" in its first {SCAN_BYTES // 2**20} MiB" if stats.truncated else ""
    if stats.usable == 0:
        raise ValueError(
            f"{where}: no usable line{scope}: {stats.lines:,} lines, {stats.empty:,} empty, "
            f"{stats.undecodable:,} not UTF-8; expected UTF-8 text"
            + (", one sentence a line" if what == "unsup corpus" else " rows sent0,sent1,hard_neg")
        )
    nonempty = stats.lines - stats.empty
    share = stats.undecodable / nonempty
    if share > max_undecodable_share:
        raise ValueError(
            f"{where}: {stats.undecodable:,} of {nonempty:,} non-empty lines{scope} are not "
            f"UTF-8 ({share:.1%}, above data.max_undecodable_share={max_undecodable_share:g}); only "
            f"{stats.usable:,} lines would be trained on. Is this the right file? (a few such lines are skipped "
            "and counted; raise data.max_undecodable_share to accept more)"
        )
    decoded = nonempty - stats.undecodable
    share = stats.control / decoded if decoded else 0.0
    if share > max_control_share:
        raise ValueError(
            f"{where}: {stats.control:,} of {decoded:,} non-empty UTF-8 lines{scope} are "
            f"mostly control characters such as NUL ({share:.1%}, above data.max_control_share="
            f"{max_control_share:g}); expected text. Is this the right file? (raise data.max_control_share to "
            "accept it)"
        )
    return stats


def check_corpus(path: str | os.PathLike, max_undecodable_share: float = 0.01,
                 max_control_share: float = 0.01) -> LineStats:
    """Refuse an unsup corpus that is empty, mostly not UTF-8 or mostly control characters (one sentence a line).

    Raises:
        ValueError: no usable line, more than ``max_undecodable_share`` of the non-empty lines are not UTF-8, or
            more than ``max_control_share`` of the UTF-8 ones are mostly control characters (names the file, the
            config key and the counts).
    """
    return _scan_and_check(path, "unsup corpus", max_undecodable_share, max_control_share)


def check_nli(path: str | os.PathLike, max_undecodable_share: float = 0.01,
              max_control_share: float = 0.01) -> LineStats:
    """Refuse an NLI triplets csv without the header ``sent0,sent1,hard_neg``, without rows, mostly not UTF-8 or
    mostly control characters.

    Raises:
        ValueError: names the file, the config key, and the header found or the counts.
    """
    path = Path(path)
    with open(path, "rb") as f:
        first = f.readline()
    header = next(csv.reader([first.decode("utf-8-sig", errors="replace").strip()]), [])
    check_header(header, f"{path} (config key data.path, NLI triplets csv)",
                 None if first.strip() else "an empty first line")
    return _scan_and_check(path, "NLI triplets csv", max_undecodable_share, max_control_share, True)


def check_sts_tasks(data_dir: str | os.PathLike, test_tasks, dev_task: str | None) -> None:
    """Every task name is known and every STS file the run will read parses (test split of each test task,
    dev split of ``dev_task``).

    Raises:
        ValueError: no test task, a task listed twice, an unknown task (names ``eval.test_tasks`` /
            ``eval.dev_task`` and the valid tasks), or a dev task without a dev split.
        FileNotFoundError: a missing file (its path and how to get the data).
        cselab.data.sts.STSFormatError: a malformed file (its path, line and what was expected).
    """
    if not list(test_tasks):  # (the test would refuse it, after the whole training)
        raise ValueError(f"eval.test_tasks=[]: expected at least one task, e.g. eval.test_tasks=[stsb] (valid: "
                         f"{', '.join(TASKS)})")
    jobs: list[tuple[str, str]] = []
    for key, tasks, split in (("eval.test_tasks", list(test_tasks), "test"),
                              ("eval.dev_task", [dev_task] if dev_task else [], "dev")):
        for task in tasks:
            try:
                name = canonical_task(str(task))
            except ValueError as err:
                raise ValueError(f"{key}: {err}") from None
            if split not in task_splits(name):
                raise ValueError(f"{key}={task}: the task has no {split} split (valid: {task_splits(name)}); "
                                 "the dev task must be stsb or sickr")
            if (name, split) in jobs:
                raise ValueError(f"{key}: {name} is listed twice ({list(tasks)})")
            jobs.append((name, split))
    for name, split in jobs:
        try:
            load_task(data_dir, name, split)
        except STSFormatError as err:
            raise STSFormatError(f"{err} (STS task {name}, {split} split)") from None
