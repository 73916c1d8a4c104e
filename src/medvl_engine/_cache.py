"""Where the engine keeps things it can rebuild: fitted demo models, feature stores."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cache_dir"]


def cache_dir() -> Path:
    """MEDVL_CACHE if set, else ~/.cache/medvl (not created here)."""
    return Path(os.environ.get("MEDVL_CACHE") or Path.home() / ".cache" / "medvl").expanduser()
