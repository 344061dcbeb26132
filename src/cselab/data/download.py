"""Provide the data directory: link ../shared/data when it exists, else fetch the public sources.

    python -m cselab.data.download                 # link ../shared/data, or download what is missing
    python -m cselab.data.download --what senteval wiki1m nli --data-dir data

Sources: the Hugging Face dataset repository ``princeton-nlp/datasets-for-simcse`` holds
``senteval.tar`` (SentEval's processed STS/SICK, unpacks to ``downstream/...``), ``wiki1m_for_simcse.txt`` and
``nli_for_simcse.csv``; ``huggingface_hub.hf_hub_download`` fetches them with caching and resumable downloads.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tarfile
from pathlib import Path

REPO = "princeton-nlp/datasets-for-simcse"
FILES = {"senteval": "senteval.tar", "wiki1m": "wiki1m_for_simcse.txt", "nli": "nli_for_simcse.csv"}


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

    data_dir.mkdir(parents=True, exist_ok=True)
    for key in what:
        name = FILES[key]
        if key == "senteval" and (data_dir / "senteval" / "downstream").is_dir():
            continue
        if key != "senteval" and (data_dir / name).exists():
            continue
        print(f"downloading {REPO}/{name} ...", flush=True)
        path = Path(hf_hub_download(REPO, name, repo_type="dataset"))
        if key == "senteval":
            with tarfile.open(path) as tar:
                tar.extractall(data_dir / "senteval", filter="data")
        else:
            shutil.copyfile(path, data_dir / name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", default="data", type=Path)
    parser.add_argument("--shared", default=Path("../shared/data"), type=Path)
    parser.add_argument("--what", nargs="+", choices=sorted(FILES), default=["senteval", "wiki1m", "nli"])
    args = parser.parse_args(argv)
    if link_shared(args.data_dir, args.shared):
        print(f"{args.data_dir} -> {args.shared.resolve()} (evaluation data, wiki1m sample, NLI head)")
        return 0
    try:
        fetch(args.data_dir, args.what)
    except Exception as err:  # network errors: say what to do instead
        print(f"could not download {args.what} from {REPO}: {err}\n"
              f"Put the files in {args.data_dir}/ by hand (see src/cselab/data/paths.py for the layout).",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
