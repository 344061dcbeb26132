"""Every input file of a run checked before the backbone loads (:mod:`cselab.data.checks`), from the run's
:class:`cselab.run.spec.InputFiles`."""

from __future__ import annotations

from pathlib import Path

from cselab.data.paths import data_root, require
from cselab.model.spec import ConfigError
from cselab.run.pieces import InputFiles


def check_inputs(files: InputFiles) -> None:
    """The training file (``data.path``: exists, readable, not empty, not mostly undecodable or control
    characters, the NLI header), the STS files of every test task and of the dev task (names known, files parse),
    the whitening corpus (``eval.whitening``), SNCSE's soft negatives, RankCSE's teachers
    (:func:`cselab.run.teachers.check_teacher`) and the SentEval transfer files (counts), long before they are
    read: before a run directory is written or a model loads (``run.py`` refuses the command in one line).

    Raises:
        FileNotFoundError: a file is missing (names the path, the config key and how to get the data or write it).
        PermissionError: the training file is not readable.
        ValueError: an unknown task name (names ``eval.test_tasks`` / ``eval.dev_task``) or a bad training file
            (names it and the counts); ``cselab.data.sts.STSFormatError`` for a malformed STS file.
        ConfigError: an unknown or truncated transfer task (names ``eval.transfer_tasks``); a teacher that is not a
            run directory with a checkpoint, a ``.ckpt`` or an exported folder (names ``method.teachers[i].path``).
    """
    from cselab.data.checks import check_corpus, check_nli, check_sts_tasks
    from cselab.data.transfer import check_transfer_files
    from cselab.run.teachers import check_teacher

    root = data_root(files.data_dir)
    if files.train_path is not None:
        sup = files.setting == "sup"  # (an absolute data.path replaces root: pathlib's join)
        found = require(root / files.train_path, "NLI triplets csv" if sup else "unsup corpus", "data.path")
        (check_nli if sup else check_corpus)(found, max_undecodable_share=float(files.max_undecodable_share),
                                             max_control_share=float(files.max_control_share))
    check_sts_tasks(root, list(files.test_tasks), files.dev_task)
    if files.whitening_corpus is not None:
        require(root / files.whitening_corpus, "whitening corpus",
                "eval.whitening.file / eval.whitening.fit_on; eval.whitening.fit_on=target needs only the STS files")
    if files.soft_negatives is not None and not Path(files.soft_negatives).is_file():
        raise FileNotFoundError(
            f"SNCSE's soft negatives {files.soft_negatives} (data.soft_negatives) are missing: write them with "
            f"`cselab data soft-negatives --corpus {root / files.train_path if files.train_path else '<corpus>'}` "
            f"(--out {files.soft_negatives}; offline rule-based negation; --parser spacy for the official spaCy "
            "rules), or point data.soft_negatives at the official Files/soft_negative_samples.txt")
    for i, path in enumerate(files.teachers):
        check_teacher(i, path)
    if files.transfer_tasks:
        try:
            check_transfer_files(root, list(files.transfer_tasks))
        except ValueError as err:
            raise ConfigError(f"eval.transfer_tasks / transfer.{files.transfer_mode}: {err}") from err
