"""Where medvl keeps what it can rebuild: fitted models, feature stores, sample data.

One folder for the engine and the plugin: ``$MEDVL_CACHE`` if set, else ``~/.cache/medvl``.
"""

from __future__ import annotations

from pathlib import Path

from medvl_engine.common.cache_root import cache_root

__all__ = ["cache_dir"]


def cache_dir(*parts: str, create: bool = False) -> Path:
    """``$MEDVL_CACHE`` (default ``~/.cache/medvl``) joined with ``parts``.

    create: make the folder (and its parents) if missing; by default nothing is created.
    Raises :class:`~medvl_engine.errors.StorageError` (one sentence saying to set
    MEDVL_CACHE to a writable folder) when the folder cannot be made.
    """
    folder = cache_root().joinpath(*parts)
    if create:
        from medvl_engine.common.write_errors import reporting_write_errors

        with reporting_write_errors("cache folder", folder):
            folder.mkdir(parents=True, exist_ok=True)
    return folder
