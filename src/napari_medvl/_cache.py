"""Where the plugin keeps generated sample data and cached feature stores."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cache_dir"]


def cache_dir(*parts: str) -> Path:
    """``$MEDVL_CACHE`` (default ``~/.cache/medvl``) / ``parts``, created on demand."""
    root = os.environ.get("MEDVL_CACHE") or Path.home() / ".cache" / "medvl"
    folder = Path(root).joinpath(*parts)
    folder.mkdir(parents=True, exist_ok=True)
    return folder
