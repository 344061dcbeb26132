"""Provide the data directory: link ../shared/data when it exists, else fetch the public sources.

    python -m cselab data                 # link ../shared/data, or download what is missing
    python -m cselab data --what senteval wiki1m nli --data-dir data

Sources: the Hugging Face dataset repository ``princeton-nlp/datasets-for-simcse`` holds
``senteval.tar`` (SentEval's processed STS/SICK and transfer sets, unpacks to ``downstream/...``; ``--what transfer``
checks the seven transfer sets' line counts after unpacking), ``wiki1m_for_simcse.txt`` and
``nli_for_simcse.csv``; ``huggingface_hub.hf_hub_download`` fetches them with caching and resumable downloads.
"""

from __future__ import annotations

import shutil
import tarfile
from pathlib import Path

REPO = "princeton-nlp/datasets-for-simcse"
FILES = {"senteval": "senteval.tar", "wiki1m": "wiki1m_for_simcse.txt", "nli": "nli_for_simcse.csv",
         "transfer": "senteval.tar"}


def link_shared(data_dir: Path, shared: Path) -> bool:
    """Make ``data_dir`` a symbolic link to ``shared`` (read-only input) if ``shared`` exists and
    ``data_dir`` does not.  Returns True when ``data_dir`` now points at ``shared``."""
    if not (shared / "senteval" / "downstream").is_dir():
        return False
    if data_dir.is_symlink() or data_dir.exists():
        return data_dir.resolve() == shared.resolve()
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    data_dir.symlink_to(shared.resolve(), target_is_directory=True)
    return True


def fetch(data_dir: Path, what: list[str]) -> None:
    """Download the named public files into ``data_dir`` (needs network access to the hub)."""
    from huggingface_hub import hf_hub_download

    from cselab.data.transfer import TASK_FILES  # the transfer folders (SST/binary, not SST)

    data_dir.mkdir(parents=True, exist_ok=True)
    for key in what:
        name = FILES[key]
        downstream = data_dir / "senteval" / "downstream"
        if key == "senteval" and (downstream / "STS").is_dir():
            continue
        if key == "transfer" and all((downstream / folder).is_dir() for folder, _ in TASK_FILES.values()):
            _check_transfer(data_dir)
            continue
        if key != "senteval" and (data_dir / name).exists():
            continue
        print(f"downloading {REPO}/{name} ...", flush=True)
        path = Path(hf_hub_download(REPO, name, repo_type="dataset"))
        if key in ("senteval", "transfer"):  # SimCSE's senteval.tar: SentEval's processed STS, SICK and transfer sets
            with tarfile.open(path) as tar:
                tar.extractall(data_dir / "senteval", filter="data")
            if key == "transfer":
                _check_transfer(data_dir)
        else:
            shutil.copyfile(path, data_dir / name)


def _check_transfer(data_dir: Path) -> None:
    """SentEval's line counts of the seven transfer tasks (a truncated download is named with the expected count)."""
    from cselab.data.transfer import TRANSFER_TASKS, check_transfer_files

    check_transfer_files(data_dir, TRANSFER_TASKS)
    print(f"transfer tasks in {data_dir / 'senteval' / 'downstream'}: the seven SentEval sets, line counts checked")
