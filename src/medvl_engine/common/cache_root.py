"""The cache folder's root: ``$MEDVL_CACHE`` if set, else ``~/.cache/medvl`` (nothing created).

Kept apart from :mod:`medvl_engine.common.cache` so that the write-error sentences
(:mod:`medvl_engine.common.write_errors`), which the cache uses, can tell a cache path without
importing the cache back.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cache_root"]


def cache_root() -> Path:
    """``$MEDVL_CACHE`` (default ``~/.cache/medvl``), user folder expanded; nothing is created."""
    return Path(os.environ.get("MEDVL_CACHE") or Path.home() / ".cache" / "medvl").expanduser()
