"""Publishing an exported folder on the Hugging Face Hub (``huggingface_hub``'s upload API).

``cselab.export ... --push-to-hub ID`` calls :func:`check_push_access` BEFORE loading the checkpoint (no token,
offline mode or no network: a clear refusal, nothing computed) and :func:`push_folder` once the folder (with
its model card) is written.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

__all__ = ["HubError", "check_push_access", "push_folder"]

_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


class HubError(RuntimeError):
    """The folder cannot be pushed (no token, offline, bad repo id, Hub error); the message says what to do."""


def check_push_access(repo_id: str, token: str | None = None) -> str:
    """Refuse early: a valid ``owner/name`` id, a token, not offline, and the Hub answering ``whoami``.

    Args:
        repo_id: the model repository, ``owner/name``.
        token: a Hugging Face token (default: ``HF_TOKEN`` or the one saved by ``hf auth login``).

    Returns:
        The token to push with.

    Raises:
        HubError: the id is malformed, there is no token, ``HF_HUB_OFFLINE`` is set, or the Hub cannot be
            reached / rejects the token (the message names the cause and the fix).
    """
    from huggingface_hub import HfApi, get_token

    if not _REPO_ID.match(repo_id or ""):
        raise HubError(f"--push-to-hub {repo_id!r}: expected a model repository id 'owner/name'")
    token = token or get_token()
    if not token:
        raise HubError("--push-to-hub needs a Hugging Face token: run `hf auth login` or set HF_TOKEN "
                       "(a token with write access); nothing was exported")
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        raise HubError("--push-to-hub with HF_HUB_OFFLINE set: unset it (the push needs the network); "
                       "nothing was exported")
    try:
        user = HfApi(token=token).whoami()
    except Exception as err:  # network errors, HTTP 401 ...
        raise HubError(f"--push-to-hub: the Hugging Face Hub cannot be reached or refused the token "
                       f"({type(err).__name__}: {err}); nothing was exported") from err
    if not isinstance(user, dict) or not user.get("name"):
        raise HubError("--push-to-hub: the Hub did not identify the token's user; nothing was exported")
    return token


def push_folder(folder: str | os.PathLike, repo_id: str, token: str, private: bool = False,
                commit_message: str | None = None) -> str:
    """Create ``repo_id`` (if needed) and upload ``folder`` to it; returns the commit URL.

    Raises:
        HubError: the Hub refused the repository or the upload (the folder stays on disk).
    """
    from huggingface_hub import HfApi

    api = HfApi(token=token)
    try:
        api.create_repo(repo_id, repo_type="model", private=private, exist_ok=True)
        info = api.upload_folder(repo_id=repo_id, folder_path=str(Path(folder)), repo_type="model",
                                 commit_message=commit_message or "Upload a cselab model (sentence-transformers)")
    except Exception as err:
        raise HubError(f"pushing {folder} to {repo_id} failed ({type(err).__name__}: {err}); the folder is "
                       f"complete on disk: retry with `hf upload {repo_id} {folder}`") from err
    return str(getattr(info, "commit_url", info))
