"""Find model files on disk or in the Hugging Face cache, failing fast when offline."""

from __future__ import annotations

import os
from pathlib import Path

from medvl_engine.errors import ModelNotFoundError

__all__ = ["hub_reachable", "is_offline", "resolve_model_dir"]

_TRUE = {"1", "true", "yes", "on"}


def is_offline() -> bool:
    """True when HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE is set to a true value."""
    return any(
        os.environ.get(var, "").strip().lower() in _TRUE
        for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    )


def hub_reachable(timeout: float = 3.0) -> bool:
    """Whether a TCP connection to the Hub (HF_ENDPOINT) opens within ``timeout`` seconds.

    Run in a daemon thread, so a name lookup that never returns cannot block the caller.
    """
    import socket
    import threading
    from urllib.parse import urlparse

    endpoint = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    host = endpoint.hostname or "huggingface.co"
    port = endpoint.port or (80 if endpoint.scheme == "http" else 443)
    answer: list[bool] = []

    def probe() -> None:
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            answer.append(True)
        except OSError:
            answer.append(False)

    worker = threading.Thread(target=probe, daemon=True, name="medvl-hub-probe")
    worker.start()
    worker.join(timeout)
    return bool(answer and answer[0])


def resolve_model_dir(name_or_id: str, how_to_get: str = "") -> Path:
    """Return a local folder holding the model: the path itself or a Hub snapshot.

    The local cache is consulted first. A model that is not cached is downloaded only when
    offline mode is off (HF_HUB_OFFLINE) and the Hub answers within 3 s, so a missing model
    fails at once instead of waiting on network timeouts.
    """
    path = Path(name_or_id).expanduser()
    if path.is_dir():
        return path
    if path.exists() or name_or_id.startswith((".", "/", "~")) or name_or_id.count("/") != 1:
        raise ModelNotFoundError(
            f"Model '{name_or_id}' is neither a model folder on disk nor a Hugging Face id "
            f"(owner/name); give the path of a folder holding config.json and the weights.",
            path if path.exists() else None,
        )
    offline = is_offline()
    hint = how_to_get or (
        f"download it with `huggingface-cli download {name_or_id}` while online "
        "(log in first if the model is gated) or pass the path of a local copy"
    )
    try:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import (
            GatedRepoError,
            HfHubHTTPError,
            LocalEntryNotFoundError,
            RepositoryNotFoundError,
        )
    except ImportError as error:  # pragma: no cover - huggingface_hub ships with transformers
        raise ModelNotFoundError(
            f"Model '{name_or_id}' is not a local folder and huggingface_hub is not installed; "
            "pass the path of a local copy."
        ) from error
    try:
        return Path(snapshot_download(name_or_id, local_files_only=True))
    except LocalEntryNotFoundError:
        pass  # not cached: download below, if the Hub can be reached at all
    try:
        if not offline and not hub_reachable():
            raise LocalEntryNotFoundError("the Hugging Face Hub did not answer within 3 s")
        return Path(snapshot_download(name_or_id, local_files_only=offline))
    except LocalEntryNotFoundError as error:
        where = (
            "offline mode is on (HF_HUB_OFFLINE=1)" if offline else "the Hub could not be reached"
        )
        raise ModelNotFoundError(
            f"Model '{name_or_id}' is not in the local Hugging Face cache and {where}; {hint}."
        ) from error
    except GatedRepoError as error:
        raise ModelNotFoundError(
            f"Model '{name_or_id}' is gated on Hugging Face; request access on its model page, "
            f"log in with `huggingface-cli login`, then retry, or {hint}."
        ) from error
    except RepositoryNotFoundError as error:
        raise ModelNotFoundError(
            f"Model '{name_or_id}' does not exist on Hugging Face (or needs a login); check the "
            f"name, or {hint}."
        ) from error
    except (HfHubHTTPError, OSError) as error:
        raise ModelNotFoundError(
            f"Model '{name_or_id}' could not be downloaded ({type(error).__name__}); {hint}."
        ) from error
