"""Atomic file writes: a temporary file in the destination folder, renamed into place."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from medvl_engine.errors import ExportError, MedVLError

__all__ = ["atomic_write"]


def atomic_write(path: str | Path, write: Callable[[Path], None]) -> Path:
    """Call ``write(temporary_path)`` then rename it to ``path``; on failure nothing is left.

    The temporary file sits in the same folder (same file system), so the rename is atomic:
    readers see either the old file or the complete new one.
    """
    path = Path(path)
    if not path.parent.is_dir():
        raise ExportError(
            f"Cannot write {path.name}: folder {path.parent} does not exist; create it first.", path
        )
    fd, temporary = tempfile.mkstemp(prefix=f".{path.stem}-", suffix=path.suffix, dir=path.parent)
    os.close(fd)
    temporary_path = Path(temporary)
    try:
        write(temporary_path)
        os.replace(temporary_path, path)
    except MedVLError:
        temporary_path.unlink(missing_ok=True)
        raise
    except OSError as error:
        temporary_path.unlink(missing_ok=True)
        raise ExportError(
            f"Could not write {path}: {error.strerror or error}; check the folder is writable "
            "and has free space.",
            path,
        ) from error
    except BaseException:
        temporary_path.unlink(missing_ok=True)
        raise
    return path
