"""Every input file of a run checked before the backbone loads (:mod:`cselab.data.checks`), from the run's
:class:`cselab.run.spec.InputFiles`."""

from __future__ import annotations

from cselab.data.paths import data_root, require
from cselab.methods.checks import ConfigError
from cselab.run.pieces import InputFiles


def check_inputs(files: InputFiles) -> None:
    """The training file (``data.path``: exists, readable, not empty, not mostly undecodable or control
    characters, the NLI header), the STS files of every test task and of the dev task (names known, files parse)
    and the SentEval transfer files (counts), long before they are read.

    Raises:
        FileNotFoundError: a file is missing (names the path, the config key and how to get the data).
        PermissionError: the training file is not readable.
        ValueError: an unknown task name (names ``eval.test_tasks`` / ``eval.dev_task``) or a bad training file
            (names it and the counts); ``cselab.data.sts.STSFormatError`` for a malformed STS file.
        ConfigError: an unknown or truncated transfer task (names ``eval.transfer_tasks``).
    """
    from cselab.data.checks import check_corpus, check_nli, check_sts_tasks
    from cselab.data.transfer import check_transfer_files

    root = data_root(files.data_dir)
    if files.train_path is not None:
        path, sup = files.train_path, files.setting == "sup"
        found = require(path if path.startswith("/") else root / path,
                        "NLI triplets csv" if sup else "unsup corpus", "data.path")
        (check_nli if sup else check_corpus)(found, max_undecodable_share=float(files.max_undecodable_share),
                                             max_control_share=float(files.max_control_share))
    check_sts_tasks(root, list(files.test_tasks), files.dev_task)
    if files.transfer_tasks:
        try:
            check_transfer_files(root, list(files.transfer_tasks))
        except ValueError as err:
            raise ConfigError(f"eval.transfer_tasks / transfer.{files.transfer_mode}: {err}") from err
