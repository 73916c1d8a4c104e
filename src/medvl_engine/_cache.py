"""Where medvl keeps what it can rebuild: fitted models, feature stores, sample data.

One folder for the engine and the plugin: ``$MEDVL_CACHE`` if set, else ``~/.cache/medvl``.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cache_dir"]


def cache_dir(*parts: str, create: bool = False) -> Path:
    """``$MEDVL_CACHE`` (default ``~/.cache/medvl``) joined with ``parts``.

    create: make the folder (and its parents) if missing; by default nothing is created.
    """
    root = Path(os.environ.get("MEDVL_CACHE") or Path.home() / ".cache" / "medvl").expanduser()
    folder = root.joinpath(*parts)
    if create:
        folder.mkdir(parents=True, exist_ok=True)
    return folder
